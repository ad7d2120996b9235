package daemon

import (
	"reflect"
	"slices"
	"strings"

	"cyberos.dev/supervisor/config"
)

// reloadable are the config keys SIGHUP applies to a running daemon: the
// defaults each new invocation gets, and the MCP servers (added, removed
// or changed; see mcpReloadable for when they need a restart). The skills
// need no key: skills_dir is read at each invocation. Every other key
// shapes what is already running (sockets, paths, the audit store, the
// pools) and needs a restart.
var reloadable = map[string]bool{"defaults": true, "mcp_servers": true}

// currentDefaults are the defaults a new invocation gets: the config's, or
// the last reload's.
func (d *Daemon) currentDefaults() config.Defaults {
	if p := d.reloadedDefaults.Load(); p != nil {
		return *p
	}
	return d.cfg.Defaults
}

// CurrentMCPServers is the mcp_servers the daemon runs: the config's, or
// the last reload's.
func (d *Daemon) CurrentMCPServers() *config.MCPServers {
	if p := d.reloadedMCP.Load(); p != nil {
		return p
	}
	return d.cfg.MCPServers
}

// mcpReloadable says why next's mcp_servers cannot be applied without a
// restart ("" when it can): the daemon started without any server (it has
// no pool and no id ranges for them), or next reads a secret or header file
// the daemon did not reserve from the skills' file tools at its start.
func (d *Daemon) mcpReloadable(next config.Config) string {
	if len(d.cfg.MCPServerNames()) == 0 && len(next.MCPServerNames()) > 0 {
		return "the daemon started without MCP servers"
	}
	reserved := d.cfg.MCPSecretFiles()
	for _, f := range next.MCPSecretFiles() {
		if !slices.Contains(reserved, f) {
			return "a new secret or header file (" + f + ") is reserved from skills only at start"
		}
	}
	return ""
}

// Reload applies what of next can change while the daemon runs and
// reports the top-level keys that differ from what the daemon runs with:
// applied (now in effect for new invocations; for mcp_servers, the caller
// applies the servers to its pool) and restart (ignored until the daemon
// restarts; an entry may say why after the key: "mcp_servers: why").
func (d *Daemon) Reload(next config.Config) (applied, restart []string) {
	running := d.cfg
	running.Defaults = d.currentDefaults()
	running.MCPServers = noneIfEmpty(d.CurrentMCPServers())
	next.MCPServers = noneIfEmpty(next.MCPServers)
	cur, nv := reflect.ValueOf(running), reflect.ValueOf(next)
	for i := 0; i < cur.NumField(); i++ {
		key, _, _ := strings.Cut(cur.Type().Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" || reflect.DeepEqual(cur.Field(i).Interface(), nv.Field(i).Interface()) {
			continue
		}
		switch {
		case key == "mcp_servers" && d.mcpReloadable(next) != "":
			restart = append(restart, key+": "+d.mcpReloadable(next))
		case reloadable[key]:
			applied = append(applied, key)
		default:
			restart = append(restart, key)
		}
	}
	for _, k := range applied {
		switch k {
		case "defaults":
			def := next.Defaults
			d.reloadedDefaults.Store(&def)
		case "mcp_servers":
			m := next.MCPServers
			if m == nil {
				m = &config.MCPServers{}
			}
			d.reloadedMCP.Store(m)
		}
	}
	return applied, restart
}

// noneIfEmpty is m, or nil when it holds no server: an empty mcp_servers
// and none are the same config.
func noneIfEmpty(m *config.MCPServers) *config.MCPServers {
	if m == nil || len(*m) == 0 {
		return nil
	}
	return m
}
