package supervisor

import (
	"context"
	"sync"
	"testing"

	"cyberos.dev/policy"
	"cyberos.dev/skillclient"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
)

// echoTool answers its args.
type echoTool struct{ name policy.Tool }

func (e echoTool) Name() policy.Tool   { return e.name }
func (e echoTool) Description() string { return "echoes its args" }
func (e echoTool) Call(_ context.Context, c *tools.Call) (any, error) {
	return map[string]any{"echo": c.Args}, nil
}

// localSource is a tool source that is neither native nor an MCP server's
// pool: one tool, and what invocations it was asked for.
type localSource struct {
	tool  echoTool
	mu    sync.Mutex
	asked []string
}

func (s *localSource) For(_, invocationID string) tools.Source {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, invocationID)
	return s
}

func (s *localSource) Lookup(_ context.Context, name policy.Tool) (tools.Tool, bool, error) {
	if name == s.tool.name {
		return s.tool, true, nil
	}
	return nil, false, nil
}

func (s *localSource) Tools(_ context.Context, e *policy.Enforcer) []tools.Tool {
	if e.CheckTool(s.tool.name) != nil {
		return nil
	}
	return []tools.Tool{s.tool}
}

// TestAnyToolSourcePlugsIn: a tool source that is not the MCP pool,
// plugged in through Supervisor.Sources, serves its tool to an invocation
// that is allowed it, judged and reported as any other call; the native
// registry is untouched and a tool no source holds is unknown.
func TestAnyToolSourcePlugsIn(t *testing.T) {
	src := &localSource{tool: echoTool{name: "mcp__local__echo"}}
	f := &fakeRunner{stdout: "{}"}
	var got map[string]any
	f.during = func(spec sandbox.Spec) {
		c, err := skillclient.Dial(spec.BrokerSocket)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		if err := c.Call(context.Background(), "mcp__local__echo", map[string]any{"x": 1}, &got); err != nil {
			t.Errorf("the source's tool: %v", err)
		}
		var out map[string]any
		if err := c.Call(context.Background(), "mcp__local__other", map[string]any{}, &out); err == nil {
			t.Error("a tool no source holds was called")
		}
	}
	sup := newSup(t, f)
	sup.Sources = []ToolSources{src}
	obs := &recObserver{}
	env, err := sup.Run(t.Context(), Request{SkillDir: skillDir(t, "allowed_tools: [mcp__local]\n"), Observer: obs})
	if err != nil || env.Outcome != OutcomeSuccess {
		t.Fatalf("%v %+v", err, env)
	}
	if echo, _ := got["echo"].(map[string]any); echo["x"] != float64(1) {
		t.Errorf("result %v, want the args echoed", got)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.calls) != 2 || obs.calls[0].Tool != "mcp__local__echo" || obs.calls[0].Outcome != "success" ||
		obs.calls[1].Outcome != "denied" || obs.calls[1].Reason != string(policy.ReasonUnknownTool) {
		t.Errorf("decided calls %+v", obs.calls)
	}
	if len(src.asked) != 1 || src.asked[0] != env.InvocationID {
		t.Errorf("source asked for invocations %v, want %s once", src.asked, env.InvocationID)
	}
	if err := tools.CheckRegistry(sup.Tools); err != nil {
		t.Errorf("native registry: %v", err)
	}
}
