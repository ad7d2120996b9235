// Package mcpconf turns the daemon config's mcp_servers into a running
// Pool: each stdio server in a sandbox of its own, each remote one
// dialled through the Http tools' egress filter, and applies a reloaded
// mcp_servers to that pool.
package mcpconf

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"

	"cyberos.dev/supervisor/config"
	"cyberos.dev/supervisor/internal/mcpclient"
	"cyberos.dev/supervisor/sandbox"
)

// mcpStderrCap bounds one start's stderr log of an MCP server.
const mcpStderrCap = 8 << 20

// FromConfig runs cfg's mcp_servers: each stdio server in a sandbox of its
// own made by runner, on first use, and each remote one dialled through
// the Http tools' egress filter. nil when none is configured.
// allowLoopback lets the stdio servers' egress proxies reach the host's
// loopback (--allow-loopback-http, tests only). reg, when set, gets the
// pool's metrics (the daemon's registry). standby: each stdio server
// without domains has a sandbox made ahead for its starts (the daemon's;
// `skill run` makes each server's sandbox as it starts).
func FromConfig(cfg config.Config, runner sandbox.Runner, stateDir, profilesDir string, allowLoopback, standby bool, reg prometheus.Registerer, log *slog.Logger) (*mcpclient.Pool, error) {
	names := cfg.MCPServerNames()
	if len(names) == 0 {
		return nil, nil
	}
	approvals, err := mcpclient.OpenApprovals(stateDir)
	if err != nil {
		return nil, err
	}
	var m *mcpclient.Metrics
	if reg != nil {
		if m, err = mcpclient.NewMetrics(reg); err != nil {
			return nil, err
		}
	}
	specs, err := mcpSpecs(cfg, names, runner, stateDir, profilesDir, allowLoopback, standby, m, log)
	if err != nil {
		return nil, err
	}
	p, err := mcpclient.NewPool(specs, approvals, cfg.MCPMaxRunning, log)
	if err != nil {
		return nil, err
	}
	p.Metrics = m
	return p, nil
}

// mcpSpecs are the pool's specs of cfg's servers names.
func mcpSpecs(cfg config.Config, names []string, runner sandbox.Runner, stateDir, profilesDir string, allowLoopback, standby bool, m *mcpclient.Metrics, log *slog.Logger) ([]mcpclient.Spec, error) {
	var specs []mcpclient.Spec
	for _, name := range names {
		s, _ := cfg.MCPServer(name)
		share := map[string]mcpclient.Share{config.MCPSharePerTenant: mcpclient.SharePerTenant,
			config.MCPSharePerInvocation: mcpclient.SharePerInvocation, config.MCPShareGlobal: mcpclient.ShareGlobal}[s.Share]
		var tr func(string) (func(context.Context) (mcp.Transport, error), error)
		var sb *mcpclient.Standby
		var err error
		if s.URL != "" {
			tr, err = remoteTransport(name, s, allowLoopback, m, log)
		} else {
			tr, sb, err = stdioTransport(name, s, cfg.Defaults, runner, stateDir, profilesDir, allowLoopback, standby, m, log)
		}
		if err != nil {
			closeStandbys(specs)
			return nil, err
		}
		specs = append(specs, mcpclient.Spec{Name: name, Share: share, Idle: time.Duration(s.Idle),
			CallTimeout: time.Duration(s.CallTimeout), AutoApprove: s.Approve == config.MCPApproveAuto, Transport: tr, Standby: sb})
	}
	return specs, nil
}

// closeStandbys closes the standby sandboxes of specs no pool took.
func closeStandbys(specs []mcpclient.Spec) {
	for _, s := range specs {
		s.Standby.Close()
	}
}

// Reloader applies a reloaded mcp_servers to the running pool.
type Reloader struct {
	Pool                  *mcpclient.Pool
	Runner                sandbox.Runner
	StateDir, ProfilesDir string
	AllowLoopback         bool
	Log                   *slog.Logger
}

// Apply retires the servers removed or changed from old to next (each
// instance ends once its calls in flight are done) and serves the added
// and changed ones from their next use, as next says.
func (r *Reloader) Apply(old *config.MCPServers, next config.Config) (added, removed, changed []string, err error) {
	var was config.MCPServers
	if old != nil {
		was = *old
	}
	for _, name := range slices.Sorted(maps.Keys(was)) {
		if _, ok := next.MCPServer(name); !ok {
			removed = append(removed, name)
		}
	}
	for _, name := range next.MCPServerNames() {
		prev, ok := was[name]
		switch {
		case !ok:
			added = append(added, name)
		case !reflect.DeepEqual(prev, (*next.MCPServers)[name]):
			changed = append(changed, name)
		}
	}
	specs, err := mcpSpecs(next, append(slices.Clone(added), changed...), r.Runner, r.StateDir, r.ProfilesDir, r.AllowLoopback, true, r.Pool.Metrics, r.Log)
	if err == nil {
		if err = r.Pool.Apply(append(slices.Clone(removed), changed...), specs); err != nil {
			closeStandbys(specs)
		}
	}
	return added, removed, changed, err
}

// stdioTransport starts one instance of a stdio server: its secrets read
// at each start, its stderr to <state>/logs/mcp/<server>-<instance>.log.
// With standby, a server without domains has a sandbox made ahead
// (closed by the caller), at once: its first start, and every later one,
// activates it.
func stdioTransport(name string, s config.MCPServer, d config.Defaults, runner sandbox.Runner, stateDir, profilesDir string, allowLoopback, standby bool, m *mcpclient.Metrics, log *slog.Logger) (func(string) (func(context.Context) (mcp.Transport, error), error), *mcpclient.Standby, error) {
	logDir := filepath.Join(stateDir, "logs", "mcp")
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}
	for _, k := range sortedMapKeys(s.Env) {
		env = append(env, k+"="+s.Env[k])
	}
	base := mcpclient.Sandboxed{Runner: runner, Server: name, Command: s.Command, Args: s.Args,
		LauncherDir: filepath.Join(stateDir, "mcp", "launch", name),
		MemoryMB:    orDefault(s.MemoryMB, d.MemoryMB), PidsMax: orDefault(s.PidsMax, d.PidsMax), CPU: s.CPU,
		ProfilesDir: profilesDir, SeccompProfile: s.SeccompProfile, Env: env}
	if base.CPU == 0 {
		base.CPU = d.CPU
	}
	if base.SeccompProfile == "" {
		base.SeccompProfile = d.SeccompProfile
	}
	if len(s.Domains) > 0 {
		base.Egress = &mcpclient.Egress{Domains: s.Domains, AllowLoopback: allowLoopback, Log: log, Metrics: m}
	}
	for _, f := range s.Files {
		base.Binds = append(base.Binds, sandbox.Bind{Path: f.Path, Writable: f.Mode == "rw"})
	}
	if standby && base.Egress == nil {
		if err := mcpclient.WriteLauncher(base.LauncherDir, base.Command, base.Args); err != nil {
			return nil, nil, fmt.Errorf("mcp server %s: launcher: %w", name, err)
		}
		base.Standby = mcpclient.NewStandby(runner, name, base.SandboxSpec(), log)
	}
	return func(instance string) (func(context.Context) (mcp.Transport, error), error) {
		if err := os.MkdirAll(logDir, 0o700); err != nil {
			return nil, err
		}
		sb := base
		logPath := filepath.Join(logDir, name+"-"+safeName(instance)+".log")
		// Secrets are read at each start (a rotated token is picked up);
		// they reach only the server's environment.
		sb.Prepare = func() ([]string, io.WriteCloser, error) {
			var senv []string
			for _, k := range sortedMapKeys(s.Secrets) {
				v, err := config.ReadMCPSecret(s.Secrets[k])
				if err != nil {
					return nil, nil, err
				}
				senv = append(senv, k+"="+v)
			}
			f, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
			if err != nil {
				return nil, nil, err
			}
			return senv, &mcpclient.CappedWriter{W: f, Max: mcpStderrCap}, nil
		}
		return sb.Transport()
	}, base.Standby, nil
}

// remoteTransport dials a remote server over Streamable HTTP through the
// Http tools' egress filter, its header values read at each connection.
func remoteTransport(name string, s config.MCPServer, allowLoopback bool, m *mcpclient.Metrics, log *slog.Logger) (func(string) (func(context.Context) (mcp.Transport, error), error), error) {
	u, err := url.Parse(s.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: mcp_servers.%s.url: %w", config.ErrConfig, name, err)
	}
	client := (&mcpclient.Egress{Domains: []string{u.Hostname()}, AllowLoopback: allowLoopback,
		Log: log, Server: name, Metrics: m}).Client()
	return func(string) (func(context.Context) (mcp.Transport, error), error) {
		return func(ctx context.Context) (mcp.Transport, error) {
			h := http.Header{}
			for _, k := range sortedMapKeys(s.Headers) {
				v, err := config.ReadMCPSecret(s.Headers[k])
				if err != nil {
					return nil, err
				}
				h.Set(k, v)
			}
			return mcpclient.RemoteTransport(s.URL, h, client)(ctx)
		}, nil
	}, nil
}

func orDefault(v, d int64) int64 {
	if v == 0 {
		return d
	}
	return v
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return '_'
	}, s)
}

func sortedMapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
