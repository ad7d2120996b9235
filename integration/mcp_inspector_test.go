//go:build linux

package integration

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"cyberos.dev/internal/testutil"
)

// inspectorVersion pins the published MCP Inspector CLI the suite drives.
const inspectorVersion = "1.0.3"

// inspectorCLI installs @modelcontextprotocol/inspector-cli (pinned) from
// the npm registry into .cache/ once, and returns its entry point.
func inspectorCLI(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(repoRoot, ".cache", "inspector-cli-"+inspectorVersion)
	entry := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "inspector-cli", "build", "index.js")
	if _, err := os.Stat(entry); err == nil {
		return entry
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "@modelcontextprotocol/inspector-cli@"+inspectorVersion).CombinedOutput()
	if err != nil {
		t.Fatalf("npm install inspector-cli@%s (needs node and npm): %v\n%s", inspectorVersion, err, out)
	}
	return entry
}

// TestMCPInspectorCLI: a client nobody here wrote, the published MCP
// Inspector CLI, lists the tools of `cyberos mcp serve` and calls one.
func TestMCPInspectorCLI(t *testing.T) {
	testutil.RequiresRoot(t)
	cli := inspectorCLI(t)
	e := newEnv(t)
	mcpSkills(e)
	d := startDaemon(t, e)
	run := func(args ...string) []byte {
		t.Helper()
		// The server's command first, its flags after "--" (the CLI's own
		// flags come before it).
		cmd := exec.Command("node", append(append([]string{cli, cyberosBin}, args...), "--", "mcp", "serve", "--socket", d.adminSocket, "--tenant", mcpTenantA)...)
		// It finds its package.json relative to the working directory.
		cmd.Dir = filepath.Dir(cli)
		out, err := cmd.Output()
		if err != nil {
			var stderr string
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("inspector %v: %v\n%s\n%s", args, err, out, stderr)
		}
		return out
	}
	var list struct {
		Tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"inputSchema"`
		} `json:"tools"`
	}
	if out := run("--method", "tools/list"); json.Unmarshal(out, &list) != nil || len(list.Tools) != 3 || list.Tools[1].Name != "greet" || list.Tools[1].InputSchema["required"] == nil {
		t.Fatalf("tools/list: %s", out)
	}
	var res struct {
		IsError           bool           `json:"isError"`
		StructuredContent map[string]any `json:"structuredContent"`
	}
	out := run("--method", "tools/call", "--tool-name", "greet", "--tool-arg", "name=ada")
	if json.Unmarshal(out, &res) != nil || res.IsError || res.StructuredContent["greeting"] != "hello ada" {
		t.Fatalf("tools/call greet: %s", out)
	}
	if rows := startedRows(e, "greet"); len(rows) != 1 || !strings.EqualFold(rows[0]["tenant_id"].(string), mcpTenantA) {
		t.Errorf("greet's started rows: %v", rows)
	}
}
