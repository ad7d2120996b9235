package integration

// Issue 39: the published MCP reference servers, each in a cyberos sandbox,
// called by a sandboxed skill through the broker, in a daemon and with
// `skill run --config`: allow/deny shapes, rows with the server and the
// hashes, and server-filesystem kept to what its sandbox holds.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cyberos/supervisor/internal/testutil"
)

// mcpServers returns the directory scripts/mcp-servers.sh installs the
// published servers into, symlinks resolved (it is bound into their
// sandboxes at the same path).
func mcpServers(t *testing.T) string {
	t.Helper()
	idx := testutil.RequiresTool(t, "CYBEROS_MCP_EVERYTHING",
		filepath.Join(repoRoot, ".cache", "mcp", "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"),
		"run scripts/mcp-servers.sh (make test-tools)")
	dir, err := filepath.EvalSymlinks(filepath.Join(filepath.Dir(idx), "..", "..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// mcpConfig is the mcp_servers section: everything, fs granted one
// directory, and fsetc, a server-filesystem told to serve /etc but whose
// sandbox holds only the skeleton's /etc.
func mcpConfig(cache, granted string) []string {
	mod := func(pkg string) string {
		return filepath.Join(cache, "node_modules", "@modelcontextprotocol", pkg, "dist", "index.js")
	}
	return []string{
		"mcp_servers:",
		"  everything:",
		"    command: /usr/bin/node",
		"    args: [" + mod("server-everything") + ", stdio]",
		"    files: [{path: " + cache + "}]",
		"    memory_mb: 512",
		"    approve: auto",
		"  fs:",
		"    command: /usr/bin/node",
		"    args: [" + mod("server-filesystem") + ", " + granted + "]",
		"    files: [{path: " + cache + "}, {path: " + granted + "}]",
		"    memory_mb: 512",
		"  fsetc:",
		"    command: /usr/bin/node",
		"    args: [" + mod("server-filesystem") + ", /etc]",
		"    files: [{path: " + cache + "}]",
		"    memory_mb: 512",
	}
}

const mcpFrontmatter = "allowed_tools: [mcp__everything__echo, mcp__fs, 'mcp__fsetc__*']\ndisallowed_tools: [mcp__fs__write_file]\n"

func mcpCalls(granted string) string {
	return callScript(
		[3]string{"echo", "mcp__everything__echo", `{"message":"hello mcp"}`},
		[3]string{"notallowed", "mcp__everything__get-sum", `{"a":1,"b":2}`},
		[3]string{"read", "mcp__fs__read_text_file", `{"path":"` + granted + `/hello.txt"}`},
		[3]string{"passwd", "mcp__fs__read_text_file", `{"path":"/etc/passwd"}`},
		[3]string{"write", "mcp__fs__write_file", `{"path":"` + granted + `/x","content":"x"}`},
		[3]string{"etc", "mcp__fsetc__read_text_file", `{"path":"/etc/passwd"}`},
		[3]string{"badargs", "mcp__everything__echo", `{"message":7}`},
		[3]string{"unknown", "mcp__nosuch__tool", `{}`},
	)
}

// checkMCPCalls judges one run's results and its rows.
func checkMCPCalls(t *testing.T, e *env, r result) {
	t.Helper()
	m := calls(t, r)
	if ok := mustOK(t, m, "echo"); !strings.Contains(string(ok), "hello mcp") {
		t.Errorf("echo: %s", ok)
	}
	if ok := mustOK(t, m, "read"); !strings.Contains(string(ok), "granted content") {
		t.Errorf("read: %s", ok)
	}
	for name, reason := range map[string]string{"notallowed": "tool_not_in_allowed_tools", "write": "tool_denied", "unknown": "tool_not_in_allowed_tools"} {
		if c := m[name]; c.Err == nil || c.Err.Data.Reason != reason {
			t.Errorf("%s: %+v, want %s", name, m[name], reason)
		}
	}
	// server-filesystem refuses a path outside its directory itself.
	if c := m["passwd"]; c.Err == nil || c.Err.Data.Reason != "tool_error" {
		t.Errorf("fs read /etc/passwd: %s %+v", c.OK, c.Err)
	}
	// Told to serve /etc, it still sees only its sandbox's /etc.
	hostPasswd, _ := os.ReadFile("/etc/passwd")
	if c := m["etc"]; c.Err != nil || strings.Contains(string(c.OK), strings.SplitN(string(hostPasswd), "\n", 2)[0]) || !strings.Contains(string(c.OK), "skill:x:1000") {
		t.Errorf("fsetc /etc/passwd: %s %+v", c.OK, c.Err)
	}
	if c := m["badargs"]; c.Err == nil || c.Err.Code != -32602 {
		t.Errorf("bad args: %+v", c.Err)
	}
	// The rows: the echo call's pair names the server, the definition
	// hash, and the result's hash.
	var found bool
	for _, row := range e.auditRows("--invocation", r.env.InvocationID) {
		var p map[string]any
		_ = json.Unmarshal(row.Payload, &p)
		if p["tool_name"] == "mcp__everything__echo" && row.Kind == "skill.tool_call_completed" && p["outcome"] == "success" {
			found = true
			if p["mcp_server"] != "everything" || len(p["tool_definition_hash"].(string)) != 64 || len(p["result_hash"].(string)) != 64 {
				t.Errorf("echo completed row: %v", p)
			}
		}
	}
	if !found {
		t.Error("no completed row of the echo call")
	}
}

func mcpWorld(t *testing.T) (*env, string, string) {
	cache := mcpServers(t)
	e := newEnv(t)
	granted := filepath.Join(e.base, "granted")
	if err := os.MkdirAll(granted, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(granted, "hello.txt"), []byte("granted content"), 0o644); err != nil {
		t.Fatal(err)
	}
	return e, cache, granted
}

func TestMCPPublishedServersSkillRun(t *testing.T) {
	e, cache, granted := mcpWorld(t)
	cfg := filepath.Join(e.base, "etc", "supervisor.yaml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(e.daemonConfig("", mcpConfig(cache, granted)...)), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := e.skill("mcp", mcpFrontmatter, mcpCalls(granted))
	r := e.run(dir, "--config", cfg)
	if r.code != 0 {
		t.Fatalf("skill run: %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	checkMCPCalls(t, e, r)
	if t.Failed() {
		t.Logf("stderr: %s", r.stderr)
		logs, _ := filepath.Glob(filepath.Join(e.stateDir, "logs", "mcp", "*.log"))
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			t.Logf("%s:\n%s", l, b)
		}
	}
}

func TestMCPPublishedServersDaemon(t *testing.T) {
	e, cache, granted := mcpWorld(t)
	e.skill("mcp", mcpFrontmatter, mcpCalls(granted))
	d := startDaemon(t, e, mcpConfig(cache, granted)...)
	for _, round := range []string{"cold", "warm"} { // the servers' first start, then running
		code, env, raw := d.invoke(map[string]any{"skill_id": "mcp", "tenant_id": "11111111-1111-1111-1111-111111111111"})
		if code != 200 {
			t.Fatalf("%s: %d %s", round, code, raw)
		}
		checkMCPCalls(t, e, result{env: env})
	}
}
