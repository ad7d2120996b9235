package main

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"github.com/cyberos/supervisor/audit"
	"github.com/cyberos/supervisor/policy"
	"github.com/cyberos/supervisor/skillclient"
	"github.com/cyberos/supervisor/supervisor/broker"
	"github.com/cyberos/supervisor/supervisor/tools"
)

type nopAudit struct{}

func (nopAudit) Emit(_ context.Context, d audit.Draft) (audit.Row, error) {
	return audit.Row{Kind: d.Kind}, d.Validate()
}

// startBroker runs a broker with the real tools for a skill allowed to
// Read files under dir, and points CYBEROS_BROKER_SOCKET at it.
func startBroker(t *testing.T, dir string) {
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
		Audit:     nopAudit{},
		SocketUID: os.Geteuid(), SocketGID: os.Getegid(),
		NoConnectAfter: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	t.Setenv(skillclient.EnvSocket, b.Path())
}

func runTool(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, strings.NewReader(`{"path":"/nope"}`), &o, &e)
	return code, o.String(), e.String()
}

func TestCallListErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "x.txt")
	if err := os.WriteFile(file, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	startBroker(t, dir)

	code, out, errOut := runTool("call", "Read", `{"path":"`+file+`"}`)
	var res struct{ Body, ContentHash string }
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Body != "hello" || errOut != "" {
		t.Fatalf("call: %d %q %q", code, out, errOut)
	}

	code, out, errOut = runTool("list")
	if code != 0 || !strings.Contains(out, `"name":"Read"`) || strings.Contains(out, "Bash") {
		t.Fatalf("list: %d %q %q", code, out, errOut)
	}

	// A refusal: the error object on stderr, exit 1, nothing on stdout.
	code, out, errOut = runTool("call", "Bash", `{"cmd":"ls"}`)
	var e skillclient.RPCError
	if code != 1 || out != "" || json.Unmarshal([]byte(errOut), &e) != nil || e.Code != -32603 || e.Reason() != "tool_not_in_allowed_tools" {
		t.Fatalf("denied: %d %q %q", code, out, errOut)
	}
	// Args from stdin: a file outside x-allowed-files is file_violation.
	code, _, errOut = runTool("call", "Read", "-")
	if code != 1 || json.Unmarshal([]byte(errOut), &e) != nil || e.Reason() != "file_violation" {
		t.Fatalf("stdin args: %d %q", code, errOut)
	}

	for _, args := range [][]string{{}, {"call"}, {"call", "Read"}, {"call", "Read", "{not json"}, {"list", "x"}, {"frob"}} {
		if code, _, _ := runTool(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
}

func TestNoBroker(t *testing.T) {
	t.Setenv(skillclient.EnvSocket, filepath.Join(t.TempDir(), "none.sock"))
	if code, _, errOut := runTool("list"); code != 1 || errOut == "" {
		t.Fatalf("%d %q", code, errOut)
	}
}

// The binary is static (it is bind-mounted into sandboxes with no libc).
func TestStaticBuild(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no go toolchain on PATH in CI: the static-build check cannot run")
		}
		t.Skip("no go toolchain on PATH")
	}
	out := filepath.Join(t.TempDir(), "cyberos-tool")
	cmd := exec.Command(gobin, "build", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatal("cyberos-tool is dynamically linked")
		}
	}
}
