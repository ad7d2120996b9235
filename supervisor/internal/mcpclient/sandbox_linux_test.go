package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"cyberos.dev/internal/mcptest"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
)

// sandboxWorld is a runner with a private run dir, and the hostile server
// (this test binary) copied where its sandbox binds it read-only.
type sandboxWorld struct {
	runner   sandbox.Runner
	base     string
	bin      string // dir holding the server binary
	profiles string
}

func newSandboxWorld(t *testing.T) *sandboxWorld {
	t.Helper()
	testutil.RequiresRoot(t)
	base, err := os.MkdirTemp("", "cyberos-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(base)
		testutil.RemoveCgroupDirs(sandbox.CgroupParentFor(filepath.Join(base, "run")))
	})
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	repo := filepath.Join(wd, "..", "..", "..")
	initBin := filepath.Join(base, "cyberos-init")
	if out, err := exec.Command("gcc", "-static", "-O2", "-o", initBin, filepath.Join(repo, "sandbox-init", "cyberos-init.c")).CombinedOutput(); err != nil {
		t.Fatalf("build cyberos-init: %v\n%s", err, out)
	}
	w := &sandboxWorld{base: base, bin: filepath.Join(base, "bin"), profiles: filepath.Join(repo, "seccomp-profiles")}
	if err := os.MkdirAll(w.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.bin, "hostile"), self, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := sandbox.New(sandbox.Options{RunDir: filepath.Join(base, "run"), InitBinary: initBin, ToolBinary: initBin, SpawnBinary: testutil.SpawnBinary(t)})
	if err != nil {
		t.Fatal(err)
	}
	w.runner = r
	t.Cleanup(func() {
		if c, ok := r.(io.Closer); ok {
			c.Close()
		}
	})
	return w
}

func (w *sandboxWorld) server(t *testing.T, name string, pids int64, binds ...sandbox.Bind) (*Server, *strings.Builder) {
	t.Helper()
	var stderr strings.Builder
	sb := &Sandboxed{Runner: w.runner, Server: name, Command: filepath.Join(w.bin, "hostile"),
		Env:         []string{mcptest.EnvServe + "=1", "PATH=/usr/bin:/bin", "HOME=/tmp"},
		LauncherDir: filepath.Join(w.base, "launch-"+name), Stderr: &CappedWriter{W: &stderr, Max: 1 << 20},
		MemoryMB: 256, PidsMax: pids, ProfilesDir: w.profiles, SeccompProfile: "default",
		Binds: append([]sandbox.Bind{{Path: w.bin}}, binds...)}
	tr, err := sb.Transport()
	if err != nil {
		t.Fatal(err)
	}
	a, _ := OpenApprovals(t.TempDir())
	s, err := New(Options{Name: name, Approvals: a, Transport: tr, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &stderr
}

// A stdio server runs in a sandbox of its own: its calls work, and the
// host's files, its loopback and more processes than pids_max are out of
// its reach.
func TestSandboxedServerContained(t *testing.T) {
	w := newSandboxWorld(t)
	secretDir := t.TempDir() // stands for the state dir
	secret := filepath.Join(secretDir, "audit.db")
	if err := os.WriteFile(secret, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	granted := filepath.Join(w.base, "granted")
	if err := os.MkdirAll(granted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(granted, "ok.txt"), []byte("granted file"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, _ := w.server(t, "box", 32, sandbox.Bind{Path: granted})
	src := NewSource(srv)
	res, err := call(t, src, "mcp__box__echo", `{"text":"from the sandbox"}`, "")
	if err != nil || !strings.Contains(string(res), "from the sandbox") {
		t.Fatalf("echo: %s %v", res, err)
	}
	if res, err := call(t, src, "mcp__box__readfile", `{"path":"`+filepath.Join(granted, "ok.txt")+`"}`, ""); err != nil || !strings.Contains(string(res), "granted file") {
		t.Errorf("granted file: %s %v", res, err)
	}
	for _, p := range []string{secret, "/root/.bashrc", "/var/lib/cyberos/audit.db"} {
		if res, err := call(t, src, "mcp__box__readfile", `{"path":"`+p+`"}`, ""); err == nil {
			t.Errorf("read %s from the sandbox: %s", p, res)
		}
	}
	// /etc/passwd is the sandbox skeleton's, not the host's.
	if res, err := call(t, src, "mcp__box__readfile", `{"path":"/etc/passwd"}`, ""); err != nil || !strings.Contains(string(res), "skill:x:1000") {
		t.Errorf("/etc/passwd in the sandbox: %s %v", res, err)
	}
	// The host's loopback is not the sandbox's.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if res, err := call(t, src, "mcp__box__dial", `{"addr":"`+ln.Addr().String()+`"}`, ""); err == nil {
		t.Errorf("reached the host's loopback: %s", res)
	}
	// A fork bomb stops at pids_max.
	res, err = call(t, src, "mcp__box__forkbomb", `{}`, "")
	if err != nil {
		t.Fatalf("forkbomb: %v", err)
	}
	var text struct{ Content []struct{ Text string } }
	_ = jsonUnmarshal(res, &text)
	if n, err := strconv.Atoi(text.Content[0].Text); err != nil || n < 1 || n >= 32 {
		t.Errorf("fork bomb started %q children with pids_max 32", text.Content[0].Text)
	}
}

// A server crashing in its sandbox fails its call and is started again in
// a new sandbox; the old one is gone.
func TestSandboxedServerCrash(t *testing.T) {
	w := newSandboxWorld(t)
	srv, _ := w.server(t, "crashy", 32)
	src := NewSource(srv)
	if _, err := call(t, src, "mcp__crashy__crash", `{}`, ""); !errors.Is(err, tools.ErrFailed) {
		t.Fatalf("crash: %v", err)
	}
	// Wait for a new sandbox to serve.
	testutil.WaitFor(t, 30e9, func() bool {
		_, err := call(t, src, "mcp__crashy__echo", `{"text":"back"}`, "")
		return err == nil
	})
	ctx := context.Background()
	if _, err := srv.Tools(ctx); err != nil {
		t.Fatal(err)
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
