package broker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"cyberos.dev/memory"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
)

// The documented MemoryEmit body limit can be sent: a body of
// memory.MaxBodyBytes of plain text, with the longest path and a
// traceparent, is a request under the 1 MiB frame cap (it once was not:
// the body limit was the frame cap itself).
func TestMemoryEmitMaxBodyFitsRequest(t *testing.T) {
	e := startEnv(t)
	c := e.dial()
	args, err := json.Marshal(map[string]string{
		"path": strings.Repeat("p", memory.MaxPathBytes),
		"body": strings.Repeat("a note. ", memory.MaxBodyBytes/8),
	})
	if err != nil {
		t.Fatal(err)
	}
	frame := callBody(1, "MemoryEmit", string(args), fmt.Sprintf("%q:%q", "traceparent", testTraceparent))
	if len(frame) > MaxRequest {
		t.Errorf("a MemoryEmit of the documented limit is a %d-byte request, over the %d-byte cap", len(frame), MaxRequest)
	}
	r := c.rpc(frame)
	if r.Error == nil || r.reason() == string(policy.ReasonTooLarge) {
		t.Fatalf("MemoryEmit of %d bytes: %+v, want it read (the test policy then refuses the tool)", memory.MaxBodyBytes, r.Error)
	}
}

// A memory store failure a retry will not mend is logged at WARN, not
// INFO, so the operator sees it.
func TestHostFaultLoggedAtWarn(t *testing.T) {
	var logs bytes.Buffer
	e := startEnv(t, func(c *Config) { c.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	e.tools.m[policy.ToolMemoryRead].(*fakeTool).fn = func(context.Context, *tools.Call) (any, error) {
		return nil, fmt.Errorf("%w (%w: memory store fault: emit: constraint failed)", tools.ErrFailed, tools.ErrHostFault)
	}
	c := e.dial()
	if r := c.rpc(callBody(1, "MemoryRead", `{}`, "")); r.Error == nil || r.reason() != "tool_error" {
		t.Fatalf("MemoryRead: %+v", r.Error)
	}
	e.b.Close()
	if !strings.Contains(logs.String(), `level=WARN msg="broker: tool failed"`) {
		t.Errorf("no WARN line for the fault:\n%s", logs.String())
	}
}
