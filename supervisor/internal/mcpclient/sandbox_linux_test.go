//go:build seccomp

package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"cyberos.dev/cgroups"
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
	if out, err := testutil.BuildInit(initBin, filepath.Join(repo, "sandbox-init", "cyberos-init.c")).CombinedOutput(); err != nil {
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
	return w.serverOut(t, name, pids, nil, binds...)
}

// serverOut is server with egress (nil: loopback only).
func (w *sandboxWorld) serverOut(t *testing.T, name string, pids int64, egress *Egress, binds ...sandbox.Bind) (*Server, *strings.Builder) {
	t.Helper()
	var stderr strings.Builder
	sb := &Sandboxed{Runner: w.runner, Server: name, Command: filepath.Join(w.bin, "hostile"),
		Env:         []string{mcptest.EnvServe + "=1", "PATH=/usr/bin:/bin", "HOME=/tmp"},
		LauncherDir: filepath.Join(w.base, "launch-"+name), Stderr: &CappedWriter{W: &stderr, Max: 1 << 20},
		MemoryMB: 256, PidsMax: pids, ProfilesDir: w.profiles, SeccompProfile: "default",
		Binds: append([]sandbox.Bind{{Path: w.bin}}, binds...), Egress: egress}
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

// fetch calls the hostile server's fetch tool and returns its text and
// whether it was an error.
func fetch(t *testing.T, src tools.Source, server, url string) (string, bool) {
	t.Helper()
	res, err := call(t, src, "mcp__"+server+"__fetch", `{"url":"`+url+`"}`, "")
	if err != nil {
		return err.Error(), true // isError: true, as the broker sees it
	}
	var out struct {
		Content []struct{ Text string }
		IsError bool
	}
	if err := json.Unmarshal(res, &out); err != nil || len(out.Content) == 0 {
		t.Fatalf("fetch %s: %s %v", url, res, err)
	}
	return out.Content[0].Text, out.IsError
}

// A stdio server with domains reaches them, and only them, through the
// supervisor's proxy in its network namespace: a name outside its domains,
// an allowed name resolving to the host's own address, to the host's
// loopback or to cloud metadata are refused (and logged); dialling
// directly, ignoring the proxy, finds no route.
func TestSandboxedServerEgress(t *testing.T) {
	w := newSandboxWorld(t)
	backend := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.WriteString(rw, "hello from "+r.Host)
	}))
	defer backend.Close()
	tlsBackend := httptest.NewTLSServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		io.WriteString(rw, "tls hello")
	}))
	defer tlsBackend.Close()
	_, port, _ := net.SplitHostPort(backend.Listener.Addr().String())
	_, tlsPort, _ := net.SplitHostPort(tlsBackend.Listener.Addr().String())
	var own netip.Addr
	addrs, err := tools.HostAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if !a.IsLoopback() && a.Is4() {
			own = a
			break
		}
	}
	if !own.IsValid() {
		t.Fatal("the host has no IPv4 address besides loopback to test with")
	}
	names := map[string]netip.Addr{
		"example.test": netip.MustParseAddr("127.0.0.1"), "other.test": netip.MustParseAddr("127.0.0.1"),
		"self.example.test": own, "meta.example.test": netip.MustParseAddr("169.254.169.254"),
		"host.example.test": netip.MustParseAddr("8.8.8.8"),
	}
	// The host's addresses as the filter reads them, plus a public one
	// (so the host-address rule itself is what refuses it, whatever range
	// this host's own addresses are in).
	hostAddrs := func() ([]netip.Addr, error) { return append(slices.Clip(addrs), netip.MustParseAddr("8.8.8.8")), nil }
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		if a, ok := names[host]; ok {
			return []netip.Addr{a}, nil
		}
		return nil, errors.New("no such host")
	}
	var logs syncBuf
	log := slog.New(slog.NewTextHandler(&logs, nil))
	// AllowLoopback stands the test's backend on 127.0.0.1 for a public
	// address: only loopback is let through, the rest of the filter holds.
	srv, _ := w.serverOut(t, "out", 32, &Egress{Domains: []string{"example.test", "*.example.test"},
		AllowLoopback: true, Resolve: resolve, HostAddrs: hostAddrs, Log: log})
	src := NewSource(srv)
	if txt, isErr := fetch(t, src, "out", "http://example.test:"+port+"/x"); isErr || txt != "200 hello from example.test:"+port {
		t.Errorf("allowed http through the proxy: %q", txt)
	}
	if txt, isErr := fetch(t, src, "out", "https://example.test:"+tlsPort+"/"); isErr || txt != "200 tls hello" {
		t.Errorf("allowed https (CONNECT) through the proxy: %q", txt)
	}
	for _, u := range []string{
		"http://other.test:" + port + "/", "https://other.test:" + tlsPort + "/", // not in domains
		"http://self.example.test:" + port + "/", "https://self.example.test:" + tlsPort + "/", // the host's own address
		"http://host.example.test:" + port + "/", "https://host.example.test:" + tlsPort + "/",
		"http://meta.example.test/latest/meta-data/", // cloud metadata
		"http://" + own.String() + ":" + port + "/",  // an address, not a domain
	} {
		if txt, isErr := fetch(t, src, "out", u); !isErr || strings.Contains(txt, "hello") {
			t.Errorf("%s: reached through the proxy: %q", u, txt)
		}
	}
	for _, want := range []string{`host=other.test reason=domain_violation`, `host=self.example.test reason=domain_violation`,
		`host=host.example.test reason=domain_violation detail="host \"host.example.test\" resolves to a refused address (host address)"`,
		`host=meta.example.test reason=domain_violation`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	// Ignoring the proxy: no route off the namespace's loopback.
	if txt, isErr := fetch(t, src, "out", "http://"+net.JoinHostPort(own.String(), port)+"/"); !isErr || strings.Contains(txt, "hello") {
		t.Errorf("direct: %q", txt)
	}
	res, err := call(t, src, "mcp__out__dial", `{"addr":"`+net.JoinHostPort(own.String(), port)+`"}`, "")
	if err == nil || !strings.Contains(err.Error(), "network is unreachable") {
		t.Errorf("a direct dial to the host: %s %v", res, err)
	}
	// Without AllowLoopback an allowed name resolving to the host's
	// loopback is refused too.
	strict, _ := w.serverOut(t, "strict", 32, &Egress{Domains: []string{"example.test"}, Resolve: resolve, Log: log})
	if txt, isErr := fetch(t, NewSource(strict), "strict", "http://example.test:"+port+"/"); !isErr || !strings.Contains(txt, "403") {
		t.Errorf("loopback through the proxy: %q", txt)
	}
	// A server without domains has no proxy at all.
	plain, _ := w.server(t, "plain", 32)
	if txt, isErr := fetch(t, NewSource(plain), "plain", "http://example.test:"+port+"/"); !isErr || strings.Contains(txt, "hello") {
		t.Errorf("no domains: %q", txt)
	}
}

// standbyID is the id of s's ready sandbox ("" when none is).
func standbyID(s *Standby) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ready == nil {
		return ""
	}
	return s.ready.ID()
}

// A server's standby sandbox serves its start: the server runs in the
// sandbox made ahead (its cgroup), answers, and a new standby is made
// behind it. Closing the standby and the server leaves no sandbox.
func TestStandbySandboxServesTheStart(t *testing.T) {
	w := newSandboxWorld(t)
	sb := &Sandboxed{Runner: w.runner, Server: "ahead", Command: filepath.Join(w.bin, "hostile"),
		Env:         []string{mcptest.EnvServe + "=1", "PATH=/usr/bin:/bin", "HOME=/tmp"},
		LauncherDir: filepath.Join(w.base, "launch-ahead"), MemoryMB: 256, PidsMax: 32, CPU: 1,
		ProfilesDir: w.profiles, SeccompProfile: "default", Binds: []sandbox.Bind{{Path: w.bin}}}
	tr, err := sb.Transport()
	if err != nil {
		t.Fatal(err)
	}
	sb.Standby = NewStandby(w.runner, "ahead", sb.SandboxSpec(), nil)
	if sb.Standby == nil {
		t.Fatal("the Linux runner made no standby")
	}
	defer sb.Standby.Close()
	testutil.WaitFor(t, 30*time.Second, sb.Standby.Ready)
	first := standbyID(sb.Standby)
	parent := sandbox.CgroupParentFor(filepath.Join(w.base, "run"))
	if procs, _ := cgroups.Procs(parent + "/" + first); len(procs) != 1 {
		t.Fatalf("the standby sandbox %s holds %v, want its init alone", first, procs)
	}

	a, _ := OpenApprovals(t.TempDir())
	srv, err := New(Options{Name: "ahead", Approvals: a, Transport: tr, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := call(t, NewSource(srv), "mcp__ahead__echo", `{"text":"from the standby"}`, ""); err != nil || !strings.Contains(string(res), "from the standby") {
		t.Fatalf("echo: %s %v", res, err)
	}
	if procs, _ := cgroups.Procs(parent + "/" + first); len(procs) < 2 {
		t.Errorf("the server does not run in the standby sandbox %s: %v", first, procs)
	}
	testutil.WaitFor(t, 30*time.Second, sb.Standby.Ready)
	next := standbyID(sb.Standby)
	if next == first {
		t.Errorf("the standby made behind the start is the one taken: %s", next)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	sb.Standby.Close()
	if procs, err := cgroups.Procs(parent); err != nil || len(procs) != 0 {
		t.Errorf("processes left under %s after Close: %v %v", parent, procs, err)
	}
	for _, id := range []string{first, next} {
		if _, err := cgroups.Procs(parent + "/" + id); !errors.Is(err, cgroups.ErrNotExist) {
			t.Errorf("the sandbox %s is still there after Close: %v", id, err)
		}
	}
}
