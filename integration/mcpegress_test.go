//go:build linux

package integration

// Issue 39: an MCP server's way out. A stdio server with domains reaches
// the network only through the supervisor's egress proxy, which refuses
// the host's own addresses whatever the domains say; a server that dials
// directly finds no route. A remote server is dialled through the Http
// tools' filter, with its headers read from root-only files.

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/internal/mcptest"
)

func TestMCPServerEgressAndRemote(t *testing.T) {
	e := newEnv(t)
	hostAddrs(t, egressGlobalAddr)
	hostPort, hostHits := countingServer(t, egressGlobalAddr)
	hostURL := "http://" + net.JoinHostPort(egressGlobalAddr, hostPort) + "/"

	// A remote MCP server on the host's loopback that wants a token.
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcptest.NewServer() }, nil)
	var unauth atomic.Int64
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer it-token" {
			unauth.Add(1)
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer remote.Close()
	token := filepath.Join(e.base, "secrets", "remote-auth")
	must(t, os.MkdirAll(filepath.Dir(token), 0o700))
	must(t, os.WriteFile(token, []byte("Bearer it-token\n"), 0o600))

	srv := filepath.Join(probeDir, "mcphostile")
	cfg := filepath.Join(e.base, "etc", "supervisor.yaml")
	must(t, os.MkdirAll(filepath.Dir(cfg), 0o755))
	must(t, os.WriteFile(cfg, []byte(e.daemonConfig("", "mcp_servers:",
		// Allowed the host's own address by name: still refused.
		"  out:", "    command: "+srv, "    files: [{path: "+probeDir+"}]", `    domains: ["`+egressGlobalAddr+`"]`,
		"  remote:", "    url: "+remote.URL+"/mcp", "    headers: {Authorization: "+token+"}",
		"  meta:", "    url: http://169.254.169.254/mcp",
		"  hostaddr:", "    url: "+hostURL,
	)), 0o644))
	dir := e.skill("egress", "allowed_tools: [mcp__out, mcp__remote__echo, mcp__meta__echo, mcp__hostaddr__echo]\n", callScript(
		[3]string{"proxied", "mcp__out__fetch", `{"url":"` + hostURL + `"}`},
		[3]string{"direct", "mcp__out__dial", `{"addr":"` + net.JoinHostPort(egressGlobalAddr, hostPort) + `"}`},
		[3]string{"remote", "mcp__remote__echo", `{"text":"from afar"}`},
		[3]string{"meta", "mcp__meta__echo", `{"text":"x"}`},
		[3]string{"hostaddr", "mcp__hostaddr__echo", `{"text":"x"}`},
	))
	// Loopback is let through for the remote server on 127.0.0.1 (the
	// tests' switch); the host's other addresses stay refused.
	r := e.run(dir, "--config", cfg, "--allow-loopback-http")
	if r.code != 0 {
		t.Fatalf("skill run: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	m := calls(t, r)
	if c := m["proxied"]; c.Err == nil || !strings.Contains(c.Err.Message+c.Err.Data.Detail, "403") {
		t.Errorf("fetch of the host's address through the proxy: %s %+v", c.OK, c.Err)
	}
	if c := m["direct"]; c.Err == nil || !strings.Contains(c.Err.Message+c.Err.Data.Detail, "unreachable") {
		t.Errorf("direct dial: %s %+v", c.OK, c.Err)
	}
	if ok := mustOK(t, m, "remote"); !strings.Contains(string(ok), "from afar") {
		t.Errorf("remote: %s", ok)
	}
	for _, name := range []string{"meta", "hostaddr"} {
		if c := m[name]; c.Err == nil {
			t.Errorf("%s: reached: %s", name, c.OK)
		}
	}
	if n := hostHits.Load(); n != 0 {
		t.Errorf("the host's own address was reached %d times", n)
	}
	if unauth.Load() != 0 {
		t.Errorf("%d requests to the remote server lacked the header", unauth.Load())
	}
	for _, want := range []string{"egress refused", "(host address)", "(metadata)"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("the log lacks %q:\n%s", want, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "it-token") {
		t.Error("the header's secret value is in the log")
	}
}
