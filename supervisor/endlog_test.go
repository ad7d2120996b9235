package supervisor

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"cyberos.dev/supervisor/sandbox"
)

// captured is a slog.Handler keeping every record.
type captured struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *captured) Enabled(context.Context, slog.Level) bool { return true }
func (c *captured) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.recs = append(c.recs, r.Clone())
	return nil
}
func (c *captured) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *captured) WithGroup(string) slog.Handler      { return c }

// ended returns the "invocation ended" records, each with its attributes.
func (c *captured) ended() []struct {
	level slog.Level
	attrs map[string]slog.Value
} {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []struct {
		level slog.Level
		attrs map[string]slog.Value
	}
	for _, r := range c.recs {
		if r.Message != "invocation ended" {
			continue
		}
		m := map[string]slog.Value{}
		r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value; return true })
		out = append(out, struct {
			level slog.Level
			attrs map[string]slog.Value
		}{r.Level, m})
	}
	return out
}

// TestFailedInvocationLoggedAtWarn: a failed invocation's fixed
// "invocation ended" line is a warning naming the outcome, the error (with
// the stderr tail) and the reason, its duration a time.Duration (so "5s"
// through telemetry.ReplaceAttr); a success stays at INFO without them.
func TestFailedInvocationLoggedAtWarn(t *testing.T) {
	for _, c := range []struct {
		runner    *fakeRunner
		level     slog.Level
		outcome   Outcome
		errSubstr string
		reason    string
	}{
		{&fakeRunner{exit: sandbox.Exit{Code: 7}, stderr: "boom: no such table\n"}, slog.LevelWarn, OutcomeError, "boom: no such table", "exit status 7"},
		{&fakeRunner{stdout: `{"ok":true}`}, slog.LevelInfo, OutcomeSuccess, "", ""},
	} {
		h := &captured{}
		sup := newSup(t, c.runner)
		sup.Log = slog.New(h)
		env, err := sup.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
		if err != nil || env.Outcome != c.outcome {
			t.Fatalf("%v %+v", err, env)
		}
		sup.Drain() // the teardown writes the line
		recs := h.ended()
		if len(recs) != 1 {
			t.Fatalf("%s: %d invocation ended records, want 1", c.outcome, len(recs))
		}
		r := recs[0]
		if r.level != c.level || r.attrs["outcome"].String() != string(c.outcome) {
			t.Errorf("%s: level %v outcome %v, want %v", c.outcome, r.level, r.attrs["outcome"], c.level)
		}
		if d := r.attrs["duration"]; d.Kind() != slog.KindDuration || d.Duration() < 0 || d.Duration() > time.Minute {
			t.Errorf("%s: duration %v (%v), want a time.Duration", c.outcome, d, d.Kind())
		}
		if _, ok := r.attrs["duration_ms"]; ok {
			t.Errorf("%s: duration_ms still logged", c.outcome)
		}
		if c.errSubstr == "" {
			if _, ok := r.attrs["error"]; ok {
				t.Errorf("success logged an error: %v", r.attrs["error"])
			}
			continue
		}
		if !strings.Contains(r.attrs["error"].String(), c.errSubstr) || r.attrs["reason"].String() != c.reason {
			t.Errorf("%s: error %q reason %q, want the stderr tail and %q", c.outcome, r.attrs["error"], r.attrs["reason"], c.reason)
		}
	}
}
