package daemon

import (
	"slices"
	"strings"
	"testing"

	"cyberos.dev/supervisor/config"
)

// TestReloadAppliesDefaultsOnly: a changed defaults is applied to new
// invocations; other changed keys are named as needing a restart and not
// applied; reloading the same config again names nothing new.
func TestReloadAppliesDefaultsOnly(t *testing.T) {
	d := &Daemon{cfg: config.Default()}
	next := config.Default()
	next.Defaults.EffortMinutes = 1
	next.MaxConcurrent = 3
	next.SkillsDir = "/srv/other"
	applied, restart := d.Reload(next)
	if !slices.Equal(applied, []string{"defaults"}) || !slices.Equal(restart, []string{"skills_dir", "max_concurrent"}) {
		t.Errorf("applied %v, restart %v", applied, restart)
	}
	if d.currentDefaults().EffortMinutes != 1 || d.cfg.MaxConcurrent != config.Default().MaxConcurrent || d.cfg.SkillsDir != config.Default().SkillsDir {
		t.Errorf("after reload: defaults %+v, cfg max_concurrent %d skills_dir %s", d.currentDefaults(), d.cfg.MaxConcurrent, d.cfg.SkillsDir)
	}
	applied, restart = d.Reload(next)
	if len(applied) != 0 || !slices.Equal(restart, []string{"skills_dir", "max_concurrent"}) {
		t.Errorf("second reload: applied %v, restart %v", applied, restart)
	}
}

// TestReloadMCPServers: added, removed and changed servers are applied
// (the daemon then runs the new mcp_servers); a new secret file, or a
// first server in a daemon started without any, needs a restart.
func TestReloadMCPServers(t *testing.T) {
	cfg := config.Default()
	cfg.MCPServers = &config.MCPServers{
		"a": {Command: "/usr/bin/node", Secrets: map[string]string{"T": "/etc/cyberos/a-token"}},
		"b": {Command: "/usr/bin/node"},
	}
	d := &Daemon{cfg: cfg}
	next := config.Default()
	next.MCPServers = &config.MCPServers{
		"a": {Command: "/usr/bin/node", Args: []string{"--changed"}, Secrets: map[string]string{"T": "/etc/cyberos/a-token"}},
		"c": {URL: "https://mcp.example.com/"},
	}
	applied, restart := d.Reload(next)
	if !slices.Equal(applied, []string{"mcp_servers"}) || len(restart) != 0 {
		t.Fatalf("applied %v, restart %v", applied, restart)
	}
	if cur := d.CurrentMCPServers(); cur == nil || len(*cur) != 2 || (*cur)["c"].URL == "" {
		t.Errorf("running mcp_servers after the reload: %v", cur)
	}
	if applied, restart = d.Reload(next); len(applied) != 0 || len(restart) != 0 {
		t.Errorf("the same config again: applied %v, restart %v", applied, restart)
	}
	withSecret := config.Default()
	withSecret.MCPServers = &config.MCPServers{"c": {URL: "https://mcp.example.com/", Headers: map[string]string{"Authorization": "/etc/cyberos/c-auth"}}}
	applied, restart = d.Reload(withSecret)
	if len(applied) != 0 || len(restart) != 1 || !strings.HasPrefix(restart[0], "mcp_servers: a new secret or header file (/etc/cyberos/c-auth)") {
		t.Errorf("new secret file: applied %v, restart %v", applied, restart)
	}
	none := &Daemon{cfg: config.Default()}
	applied, restart = none.Reload(next)
	if len(applied) != 0 || len(restart) != 1 || !strings.Contains(restart[0], "started without MCP servers") {
		t.Errorf("first server: applied %v, restart %v", applied, restart)
	}
	// Removing every server is applied.
	if applied, _ = d.Reload(config.Default()); !slices.Equal(applied, []string{"mcp_servers"}) || d.CurrentMCPServers() == nil || len(*d.CurrentMCPServers()) != 0 {
		t.Errorf("remove all: applied %v, now %v", applied, d.CurrentMCPServers())
	}
}
