package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
	"cyberos.dev/skillclient"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/internal/tools"
)

type toolNopAudit struct{}

func (toolNopAudit) Emit(_ context.Context, d audit.Draft) (audit.Row, error) {
	return audit.Row{Kind: d.Kind}, d.Validate()
}

// startToolBroker runs a broker with the real tools for a skill allowed to
// Read files under dir, and points CYBEROS_BROKER_SOCKET at it.
func startToolBroker(t *testing.T, dir string) {
	t.Helper()
	sockDir, err := os.MkdirTemp("", "ct")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	os.Chmod(sockDir, 0o700)
	p, err := policy.Parse([]byte("---\nname: t\ndescription: d\nallowed_tools: [Read]\nx-allowed-files: [\"" + dir + "/**\"]\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	id := ulid.Make().String()
	b, err := broker.Start(broker.Config{
		SocketDir: sockDir,
		Common:    audit.Common{InvocationID: id, SkillID: "t"},
		Env:       &tools.Env{SkillID: "t", InvocationID: id, Enforcer: policy.NewEnforcer(p, policy.EnforcerOptions{})},
		Tools:     tools.Registry(),
		Audit:     toolNopAudit{},
		SocketUID: os.Geteuid(), SocketGID: os.Getegid(),
		NoConnectAfter: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	t.Setenv(skillclient.EnvSocket, b.Path())
}

// buildTool builds cmd/cyberos-tool, the client skills run, into a temp dir.
func buildTool(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "cyberos-tool")
	cmd := exec.Command("go", "build", "-o", out, "cyberos.dev/cmd/cyberos-tool")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build cyberos-tool: %v: %s", err, b)
	}
	return out
}

// runTool runs the built cyberos-tool with args, `{"path":"/nope"}` on stdin.
func runTool(t *testing.T, bin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(`{"path":"/nope"}`), &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return cmd.ProcessState.ExitCode(), o.String(), e.String()
}

// TestCyberosToolCallListErrors: the skills' command-line client against a
// real broker: results on stdout, refusals as the error object on stderr.
func TestCyberosToolCallListErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "x.txt")
	if err := os.WriteFile(file, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	startToolBroker(t, dir)
	bin := buildTool(t)

	code, out, errOut := runTool(t, bin, "call", "Read", `{"path":"`+file+`"}`)
	var res struct{ Body, ContentHash string }
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Body != "hello" || errOut != "" {
		t.Fatalf("call: %d %q %q", code, out, errOut)
	}

	code, out, errOut = runTool(t, bin, "list")
	if code != 0 || !strings.Contains(out, `"name":"Read"`) || strings.Contains(out, "Bash") {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}

	// A refusal: the error object on stderr, exit 1, nothing on stdout.
	code, out, errOut = runTool(t, bin, "call", "Bash", `{"cmd":"ls"}`)
	var e skillclient.RPCError
	if code != 1 || out != "" || json.Unmarshal([]byte(errOut), &e) != nil || e.Code != -32603 || e.Reason() != "tool_not_in_allowed_tools" {
		t.Fatalf("denied: %d %q %q", code, out, errOut)
	}
	// Args from stdin: a file outside x-allowed-files is file_violation.
	code, _, errOut = runTool(t, bin, "call", "Read", "-")
	if code != 1 || json.Unmarshal([]byte(errOut), &e) != nil || e.Reason() != "file_violation" {
		t.Fatalf("stdin args: %d %q", code, errOut)
	}

	for _, args := range [][]string{{}, {"call"}, {"call", "Read"}, {"call", "Read", "{not json"}, {"list", "x"}, {"frob"}} {
		if code, _, _ := runTool(t, bin, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}
