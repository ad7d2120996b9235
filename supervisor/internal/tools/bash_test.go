package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
)

// fakeExec records the requests it gets and plays a scripted command.
type fakeExec struct {
	calls  []ExecRequest
	stdin  []byte
	script func(ctx context.Context, r ExecRequest) (ExecResult, error)
}

func (f *fakeExec) exec(ctx context.Context, r ExecRequest) (ExecResult, error) {
	f.calls = append(f.calls, r)
	if r.Stdin != nil {
		f.stdin, _ = io.ReadAll(r.Stdin)
	}
	if f.script == nil {
		return ExecResult{}, nil
	}
	return f.script(ctx, r)
}

func bashEnvFor(t *testing.T, tools string, f *fakeExec) *Env {
	t.Helper()
	p, err := policy.Parse([]byte("---\nname: sh\ndescription: bash test\nallowed_tools: " + tools + "\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Policy: p, Enforcer: policy.NewEnforcer(p, policy.EnforcerOptions{}), Exec: f.exec}
}

// bashResult is Bash's result decoded.
type bashResult struct {
	ExitCode        int    `json:"exit_code"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated"`
	StderrTruncated bool   `json:"stderr_truncated"`
	TimedOut        bool   `json:"timed_out"`
	Signal          string `json:"signal,omitempty"`
}

func callBash(ctx context.Context, env *Env, args string) (bashResult, error) {
	res, err := NewBash().Call(ctx, &Call{Env: env, Args: json.RawMessage(args)})
	var r bashResult
	if b, ok := res.(Canonical); ok {
		if jerr := json.Unmarshal(b, &r); jerr != nil {
			return r, fmt.Errorf("result %.200s: %w", b, jerr)
		}
		if h, herr := audit.HashJSON(b); herr != nil || h != shaHex(b) {
			return r, fmt.Errorf("result %.200s is not canonical JSON", b)
		}
	}
	return r, err
}

func TestBashRunsInSandbox(t *testing.T) {
	f := &fakeExec{script: func(_ context.Context, r ExecRequest) (ExecResult, error) {
		io.WriteString(r.Stdout, "out\n")
		io.WriteString(r.Stderr, "err\n")
		return ExecResult{ExitCode: 3}, nil
	}}
	env := bashEnvFor(t, "[Bash]", f)
	r, err := callBash(context.Background(), env, `{"command":"echo out; echo err >&2; exit 3"}`)
	if err != nil {
		t.Fatal(err)
	}
	want := bashResult{ExitCode: 3, Stdout: "out\n", Stderr: "err\n"}
	if r != want {
		t.Errorf("result = %+v, want %+v", r, want)
	}
	if len(f.calls) != 1 {
		t.Fatalf("%d Exec calls", len(f.calls))
	}
	req := f.calls[0]
	if strings.Join(req.Argv, "\x00") != "/bin/sh\x00-c\x00echo out; echo err >&2; exit 3" {
		t.Errorf("argv = %q", req.Argv)
	}
	if strings.Join(req.Env, " ") != "PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp LANG=C.UTF-8" {
		t.Errorf("env = %q", req.Env)
	}
	if req.Timeout != DefaultBashTimeout || req.Stdin == nil || len(f.stdin) != 0 {
		t.Errorf("timeout %v, stdin %v %q", req.Timeout, req.Stdin, f.stdin)
	}

	if _, err := callBash(context.Background(), env, `{"command":"true","timeout_ms":1500}`); err != nil {
		t.Fatal(err)
	}
	if f.calls[1].Timeout != 1500*time.Millisecond {
		t.Errorf("timeout = %v", f.calls[1].Timeout)
	}
	if _, err := callBash(context.Background(), env, `{"command":"true","timeout_ms":600000}`); err != nil {
		t.Fatal(err)
	}
}

func TestBashSignal(t *testing.T) {
	f := &fakeExec{script: func(context.Context, ExecRequest) (ExecResult, error) {
		return ExecResult{ExitCode: 137, Signal: "SIGKILL"}, nil
	}}
	r, err := callBash(context.Background(), bashEnvFor(t, "[Bash]", f), `{"command":"kill -9 $$"}`)
	if err != nil || r.ExitCode != 137 || r.Signal != "SIGKILL" {
		t.Errorf("result %+v, err %v", r, err)
	}
	b, _ := json.Marshal(bashResult{})
	if strings.Contains(string(b), "signal") {
		t.Errorf("signal should be omitted when empty: %s", b)
	}
}

func TestBashCheckBashRefusalNeverExecs(t *testing.T) {
	f := &fakeExec{}
	env := bashEnvFor(t, `["Bash(git status:*)"]`, f)
	if _, err := callBash(context.Background(), env, `{"command":"git status --short"}`); err != nil {
		t.Fatalf("allowed prefix: %v", err)
	}
	for _, cmd := range []string{"rm -rf /", "git statusx", "git status; rm -rf /"} {
		args, _ := json.Marshal(map[string]string{"command": cmd})
		_, err := callBash(context.Background(), env, string(args))
		var d *policy.Denial
		if !errors.As(err, &d) {
			t.Errorf("%q: err = %v, want a denial", cmd, err)
		}
	}
	if len(f.calls) != 1 {
		t.Errorf("Exec called %d times, want once (the allowed command)", len(f.calls))
	}
	// A skill without Bash never reaches Exec either.
	g := &fakeExec{}
	_, err := callBash(context.Background(), bashEnvFor(t, "[Read]", g), `{"command":"true"}`)
	ftDenied(t, err, policy.ReasonToolNotAllowed, "")
	if len(g.calls) != 0 {
		t.Error("Exec called for a skill without Bash")
	}
}

func TestBashOutputCap(t *testing.T) {
	f := &fakeExec{script: func(_ context.Context, r ExecRequest) (ExecResult, error) {
		chunk := strings.Repeat("a", 4096)
		for n := 0; n < MaxBashOutput+10; n += len(chunk) {
			if k, err := io.WriteString(r.Stdout, chunk); k != len(chunk) || err != nil {
				return ExecResult{}, errors.New("short write")
			}
		}
		io.WriteString(r.Stderr, strings.Repeat("e", MaxBashOutput))
		return ExecResult{}, nil
	}}
	r, err := callBash(context.Background(), bashEnvFor(t, "[Bash]", f), `{"command":"yes"}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stdout) != MaxBashOutput || !r.StdoutTruncated {
		t.Errorf("stdout %d bytes, truncated %v", len(r.Stdout), r.StdoutTruncated)
	}
	if len(r.Stderr) != MaxBashOutput || r.StderrTruncated {
		t.Errorf("stderr %d bytes, truncated %v (exactly the cap is not truncated)", len(r.Stderr), r.StderrTruncated)
	}
}

func TestBashTimeout(t *testing.T) {
	f := &fakeExec{script: func(_ context.Context, r ExecRequest) (ExecResult, error) {
		io.WriteString(r.Stdout, "partial")
		return ExecResult{ExitCode: -1, Signal: "SIGKILL", TimedOut: true}, nil
	}}
	r, err := callBash(context.Background(), bashEnvFor(t, "[Bash]", f), `{"command":"sleep 100","timeout_ms":10}`)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	if !r.TimedOut || r.Stdout != "partial" || r.Signal != "SIGKILL" {
		t.Errorf("result = %+v, want the partial output with timed_out", r)
	}
}

func TestBashTimeoutBackstop(t *testing.T) {
	old := bashGrace
	bashGrace = 10 * time.Millisecond
	t.Cleanup(func() { bashGrace = old })
	// An Exec that ignores Timeout is still stopped by the call's context.
	f := &fakeExec{script: func(ctx context.Context, r ExecRequest) (ExecResult, error) {
		io.WriteString(r.Stdout, "so far")
		<-ctx.Done()
		return ExecResult{ExitCode: -1}, ctx.Err()
	}}
	r, err := callBash(context.Background(), bashEnvFor(t, "[Bash]", f), `{"command":"sleep 100","timeout_ms":5}`)
	if !errors.Is(err, ErrTimeout) || !r.TimedOut || r.Stdout != "so far" {
		t.Errorf("result %+v, err %v", r, err)
	}
}

func TestBashCancelledInvocation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := &fakeExec{script: func(ctx context.Context, r ExecRequest) (ExecResult, error) {
		cancel()
		<-ctx.Done()
		return ExecResult{}, ctx.Err()
	}}
	_, err := callBash(ctx, bashEnvFor(t, "[Bash]", f), `{"command":"sleep 100"}`)
	if !errors.Is(err, ErrFailed) || errors.Is(err, ErrTimeout) {
		t.Errorf("err = %v, want ErrFailed (the invocation ended), not ErrTimeout", err)
	}
}

func TestBashErrors(t *testing.T) {
	f := &fakeExec{script: func(context.Context, ExecRequest) (ExecResult, error) {
		return ExecResult{}, errors.New("container gone")
	}}
	env := bashEnvFor(t, "[Bash]", f)
	if _, err := callBash(context.Background(), env, `{"command":"true"}`); !errors.Is(err, ErrFailed) {
		t.Errorf("Exec failure: err = %v, want ErrFailed", err)
	}
	for _, args := range []string{
		`{}`, `{"command":""}`, `{"command":"   "}`, `{"command":"a\u0000b"}`,
		`{"command":"true","timeout_ms":0}`, `{"command":"true","timeout_ms":-5}`,
		`{"command":"true","timeout_ms":600001}`, `{"command":"true","timeout_ms":1.5}`,
		`{"command":"true","timeout":5}`, `{"command":"true","Command":"rm -rf /"}`, `"true"`,
	} {
		if _, err := callBash(context.Background(), env, args); !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s: err = %v, want ErrInvalidParams", args, err)
		}
	}
	if len(f.calls) != 1 {
		t.Errorf("Exec called %d times, want 1", len(f.calls))
	}
	noExec := bashEnvFor(t, "[Bash]", f)
	noExec.Exec = nil
	if _, err := callBash(context.Background(), noExec, `{"command":"true"}`); !errors.Is(err, ErrFailed) {
		t.Errorf("no Exec: err = %v, want ErrFailed", err)
	}
}
