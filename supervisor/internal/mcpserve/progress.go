package mcpserve

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/supervisor"
)

// endWait bounds how long progress waits, once the answer is in, for the
// events stream to deliver the invocation's end (it precedes the answer
// in the daemon, so this is only the stream's latency).
const endWait = 2 * time.Second

// followCalls sends a progress notification for each tool call of the
// invocation with request_id rid, found on the skill's events stream. It
// returns the function to call with the envelope once Invoke returned: it
// waits for the invocation's end on the stream and returns how many
// notifications were sent. Without a progressToken (or a rid) it does
// nothing.
func (s *Server) followCalls(ctx context.Context, req *mcp.CallToolRequest, skill, rid string) func(*supervisor.Envelope) float64 {
	none := func(*supervisor.Envelope) float64 { return 0 }
	if req.Params.GetProgressToken() == nil || req.Session == nil || rid == "" {
		return none
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, err := s.b.Events(wctx, skill)
	if err != nil {
		cancel()
		s.opts.Log.Warn("mcp: events stream for progress", "skill_id", skill, "err", err)
		return none
	}
	done := make(chan float64, 1)
	ended := make(chan struct{})
	go func() {
		var inv string
		var n float64
		defer func() { done <- n }()
		for ev := range ch {
			switch {
			case ev.Type == "invocation_started" && ev.RequestID == rid:
				inv = ev.InvocationID
			case inv == "" || ev.InvocationID != inv:
			case ev.Type == "tool_call" && ev.Call != nil:
				n++
				progress(ctx, req, n, fmt.Sprintf("tool_call %s: %s", ev.Call.Tool, ev.Call.Outcome))
			case ev.Type == "invocation_ended":
				close(ended)
				return
			}
		}
	}()
	return func(env *supervisor.Envelope) float64 {
		if env != nil {
			select {
			case <-ended:
			case <-time.After(endWait):
			}
		}
		cancel()
		return <-done
	}
}
