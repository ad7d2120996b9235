package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"cyberos.dev/policy"
)

// MCPServers is mcp_servers: the MCP servers whose tools skills may be
// granted, by server name. A pointer in Config keeps Config comparable.
type MCPServers map[string]MCPServer

// MCPServer is one configured MCP server: a stdio server the daemon runs in
// a sandbox of its own (Command set), or a remote one it dials over
// Streamable HTTP (URL set). Exactly one of the two.
type MCPServer struct {
	// Command, Args and Env start a stdio server; Command is an absolute
	// path inside the server's sandbox (its root is the host's /usr, /bin,
	// /lib and /etc read-only, plus Files).
	Command string            `yaml:"command"`
	Args    []string          `yaml:"args"`
	Env     map[string]string `yaml:"env"`
	// Secrets are environment variables read at start from root-only
	// files (mode 0600 or 0400, owned by root): variable name → file.
	// Their values are never logged nor put in a row, and the files are
	// reserved from every skill's file tools.
	Secrets map[string]string `yaml:"secrets"`
	// The sandbox's limits, in SKILL.md's vocabulary; 0 or "" take the
	// daemon's defaults.
	MemoryMB       int64     `yaml:"memory_mb"`
	PidsMax        int64     `yaml:"pids_max"`
	CPU            float64   `yaml:"cpu"`
	SeccompProfile string    `yaml:"seccomp_profile"`
	Files          []MCPFile `yaml:"files"`
	// Domains the server may reach (x-allowed-domains' vocabulary:
	// "api.example.com", "*.example.com") through the supervisor's egress
	// proxy, named by HTTP(S)_PROXY in its environment; every address is
	// judged as HttpFetch's. None: loopback only.
	Domains []string `yaml:"domains"`
	// Share is which invocations share one running server (a remote
	// server's: one session): per_tenant (default), per_invocation or
	// global.
	Share string `yaml:"share"`
	// Idle stops a server unused this long (default 5m).
	Idle MCPDuration `yaml:"idle"`

	// URL and Headers dial a remote server over Streamable HTTP, through
	// the Http tools' egress filter (the URL's host only, its addresses
	// judged as HttpFetch's, no redirects); each header's value is read
	// from a root-only file (header name → file) at each connection.
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`

	// CallTimeout bounds one tools/call (default 60s), within the
	// invocation's deadline.
	CallTimeout MCPDuration `yaml:"call_timeout"`
	// Approve is what a changed tool definition meets: manual (default:
	// refused as tool_definition_changed until `cyberos mcp approve`) or
	// auto (accepted and recorded).
	Approve string `yaml:"approve"`
}

// MCPFile is a host path bound into a stdio server's sandbox at the same
// path, read-only unless Mode is rw.
type MCPFile struct {
	Path string `yaml:"path"`
	Mode string `yaml:"mode"`
}

// MCPDuration is a Go duration ("30s").
type MCPDuration time.Duration

// UnmarshalText parses a duration.
func (d *MCPDuration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("%q is not a duration (e.g. 30s)", b)
	}
	*d = MCPDuration(v)
	return nil
}

// Share modes of a stdio server.
const (
	MCPSharePerTenant     = "per_tenant"
	MCPSharePerInvocation = "per_invocation"
	MCPShareGlobal        = "global"
)

// Approval modes of a changed tool definition.
const (
	MCPApproveManual = "manual"
	MCPApproveAuto   = "auto"
)

// MCP defaults where a server's config is silent.
const (
	DefaultMCPIdle        = 5 * time.Minute
	DefaultMCPCallTimeout = 60 * time.Second
	// DefaultMCPMaxRunning is mcp_max_running's default.
	DefaultMCPMaxRunning = 16
)

// mcpRanges is the host id ranges the MCP server sandboxes may hold at
// once: mcp_max_running when a server is configured, and one for the
// standby sandbox of each stdio server without domains (the daemon's).
func (c *Config) mcpRanges() int {
	names := c.MCPServerNames()
	if len(names) == 0 {
		return 0
	}
	n := c.MCPMaxRunning
	for _, name := range names {
		if s, _ := c.MCPServer(name); s.URL == "" && len(s.Domains) == 0 {
			n++
		}
	}
	return n
}

// mcpServerName is a server's name: it is the middle of every tool name
// mcp__<server>__<tool>, so it may not hold "__" (checked apart).
var mcpServerName = regexp.MustCompile(`^[a-z0-9_-]{1,32}$`)

// envName is an environment variable's name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// MCPServerNames returns the configured names, sorted.
func (c *Config) MCPServerNames() []string {
	if c.MCPServers == nil {
		return nil
	}
	names := make([]string, 0, len(*c.MCPServers))
	for n := range *c.MCPServers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// MCPServer returns the named server with its defaults applied.
func (c *Config) MCPServer(name string) (MCPServer, bool) {
	if c.MCPServers == nil {
		return MCPServer{}, false
	}
	s, ok := (*c.MCPServers)[name]
	if !ok {
		return MCPServer{}, false
	}
	if s.Share == "" {
		s.Share = MCPSharePerTenant
	}
	if s.Approve == "" {
		s.Approve = MCPApproveManual
	}
	if s.Idle == 0 {
		s.Idle = MCPDuration(DefaultMCPIdle)
	}
	if s.CallTimeout == 0 {
		s.CallTimeout = MCPDuration(DefaultMCPCallTimeout)
	}
	return s, true
}

// validateMCP checks mcp_servers and returns every problem at once, each
// wrapping ErrConfig and naming its key (mcp_servers.NAME.KEY).
func (c *Config) validateMCP() error {
	var errs []error
	if c.MCPMaxRunning < 1 || c.MCPMaxRunning > 4096 {
		errs = append(errs, fmt.Errorf("%w: mcp_max_running: must be 1..4096, got %d", ErrConfig, c.MCPMaxRunning))
	}
	for _, name := range c.MCPServerNames() {
		for _, p := range checkMCPServer(name, (*c.MCPServers)[name], c) {
			errs = append(errs, fmt.Errorf("%w: mcp_servers.%s", ErrConfig, p))
		}
	}
	return errors.Join(errs...)
}

// checkMCPServer lists what is wrong with one server, each problem
// starting with the key under mcp_servers.NAME ("NAME: why" for the server
// as a whole).
func checkMCPServer(name string, s MCPServer, c *Config) []string {
	var out []string
	bad := func(key, why string, a ...any) {
		k := name
		if key != "" {
			k += "." + key
		}
		out = append(out, k+": "+fmt.Sprintf(why, a...))
	}
	switch {
	case !mcpServerName.MatchString(name):
		bad("", "a server name must match %s (its tools are named mcp__<server>__<tool>)", mcpServerName)
	case strings.Contains(name, "__"):
		bad("", `a server name must not contain "__": it separates the server from the tool in mcp__<server>__<tool>`)
	}
	stdio, remote := s.Command != "", s.URL != ""
	switch {
	case stdio && remote:
		bad("", "command (a stdio server) and url (a remote server) are both set; keep one")
		return out
	case !stdio && !remote:
		bad("", "needs command (a stdio server run in a sandbox) or url (a remote server over Streamable HTTP)")
		return out
	}
	if stdio {
		checkMCPStdio(s, c, bad)
	} else {
		checkMCPRemote(s, bad)
	}
	if d := time.Duration(s.Idle); d != 0 && (d < time.Second || d > 24*time.Hour) {
		bad("idle", "must be 1s..24h, got %v", d)
	}
	switch s.Share {
	case "", MCPSharePerTenant, MCPSharePerInvocation, MCPShareGlobal:
	default:
		bad("share", "must be per_tenant, per_invocation or global, got %q", s.Share)
	}
	switch s.Approve {
	case "", MCPApproveManual, MCPApproveAuto:
	default:
		bad("approve", "must be manual or auto, got %q", s.Approve)
	}
	if t := time.Duration(s.CallTimeout); t != 0 && (t < 100*time.Millisecond || t > 24*time.Hour) {
		bad("call_timeout", "must be 100ms..24h, got %v", t)
	}
	return out
}

func checkMCPStdio(s MCPServer, c *Config, bad func(key, why string, a ...any)) {
	if !filepath.IsAbs(s.Command) || filepath.Clean(s.Command) != s.Command {
		bad("command", "must be an absolute, clean path inside the server's sandbox (e.g. /usr/bin/node), got %q", s.Command)
	}
	for i, a := range s.Args {
		if strings.ContainsRune(a, 0) {
			bad(fmt.Sprintf("args[%d]", i), "must not contain NUL")
		}
	}
	for _, k := range sortedKeys(s.Env) {
		if !envName.MatchString(k) {
			bad("env", "%q is not an environment variable name", k)
		} else if strings.ContainsRune(s.Env[k], 0) {
			bad("env."+k, "must not contain NUL")
		}
		if _, ok := s.Secrets[k]; ok {
			bad("env."+k, "is also in secrets; keep one")
		}
	}
	for _, k := range sortedKeys(s.Secrets) {
		if !envName.MatchString(k) {
			bad("secrets", "%q is not an environment variable name", k)
		}
		if f := s.Secrets[k]; !filepath.IsAbs(f) {
			bad("secrets."+k, "must be an absolute path to a root-only file, got %q", f)
		}
	}
	switch {
	case s.MemoryMB != 0 && (s.MemoryMB < 16 || s.MemoryMB > 65536):
		bad("memory_mb", "must be 0 (defaults.memory_mb) or 16..65536, got %d", s.MemoryMB)
	case s.PidsMax != 0 && (s.PidsMax < 8 || s.PidsMax > 4096):
		bad("pids_max", "must be 0 (defaults.pids_max) or 8..4096, got %d", s.PidsMax)
	case !(s.CPU >= 0 && s.CPU <= 64):
		bad("cpu", "must be 0 (defaults.cpu) to 64 CPUs, got %v", s.CPU)
	case s.SeccompProfile != "" && !profileName.MatchString(s.SeccompProfile):
		bad("seccomp_profile", "must be a profile name ([a-z0-9_-]+), got %q", s.SeccompProfile)
	}
	reserved := []string{c.StateDir, c.SocketDir, c.SkillsDir, c.SeccompProfilesDir, c.AdminSocket}
	for i, f := range s.Files {
		key := fmt.Sprintf("files[%d]", i)
		switch {
		case !filepath.IsAbs(f.Path) || filepath.Clean(f.Path) != f.Path:
			bad(key+".path", "must be an absolute, clean path, got %q", f.Path)
		case f.Path == "/":
			bad(key+".path", "must not be /")
		default:
			for _, r := range reserved {
				if inside(f.Path, r) || inside(r, f.Path) {
					bad(key+".path", "%s overlaps %s, which holds the supervisor's own state", f.Path, r)
					break
				}
			}
		}
		switch f.Mode {
		case "", "ro", "rw":
		default:
			bad(key+".mode", "must be ro (default) or rw, got %q", f.Mode)
		}
	}
	for i, d := range s.Domains {
		if why := policy.DomainProblem(d); why != "" {
			bad(fmt.Sprintf("domains[%d]", i), "%q %s", d, why)
		}
	}
	if s.Headers != nil {
		bad("headers", "is for a remote server (url); a stdio server takes env and secrets")
	}
}

func checkMCPRemote(s MCPServer, bad func(key, why string, a ...any)) {
	u, err := url.Parse(s.URL)
	switch {
	case err != nil:
		bad("url", "%q is not a URL", s.URL)
	case u.Scheme != "https" && u.Scheme != "http" || u.Host == "":
		bad("url", "must be an http(s) URL with a host, got %q", s.URL)
	case u.User != nil:
		bad("url", "must not carry credentials; put them in headers, read from a secret file")
	case policy.DomainProblem(u.Hostname()) != "":
		bad("url", "host %q %s", u.Hostname(), policy.DomainProblem(u.Hostname()))
	}
	for _, h := range sortedKeys(s.Headers) {
		if !validHeaderName(h) {
			bad("headers", "%q is not an HTTP header name", h)
		}
		if f := s.Headers[h]; !filepath.IsAbs(f) {
			bad("headers."+h, "must be an absolute path to a root-only file holding the value, got %q", f)
		}
	}
	for key, set := range map[string]bool{"args": s.Args != nil, "env": s.Env != nil, "secrets": s.Secrets != nil,
		"memory_mb": s.MemoryMB != 0, "pids_max": s.PidsMax != 0, "cpu": s.CPU != 0, "seccomp_profile": s.SeccompProfile != "",
		"files": s.Files != nil, "domains": s.Domains != nil} {
		if set {
			bad(key, "is for a stdio server (command); a remote server takes url and headers")
		}
	}
}

// validHeaderName reports whether h is an RFC 9110 token.
func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for _, r := range h {
		if r > 0x7e || r <= ' ' || strings.ContainsRune(`"(),/:;<=>?@[\]{}`, r) {
			return false
		}
	}
	return http.CanonicalHeaderKey(h) != ""
}

// MCPSecretFiles are the files mcp_servers reads secrets and header values
// from: reserved from every skill's file tools.
func (c *Config) MCPSecretFiles() []string {
	var out []string
	for _, name := range c.MCPServerNames() {
		s := (*c.MCPServers)[name]
		for _, k := range sortedKeys(s.Secrets) {
			out = append(out, s.Secrets[k])
		}
		for _, k := range sortedKeys(s.Headers) {
			out = append(out, s.Headers[k])
		}
	}
	return out
}

// ErrMCPSecret: a secret file of mcp_servers is missing or not root-only.
var ErrMCPSecret = errors.New("mcp secret file")

// ReadMCPSecret reads a secret file, refusing one that is not a regular
// file owned by root (or by the daemon's user) with no group or other
// permission: a secret anyone could read or replace is not one.
func ReadMCPSecret(path string) (string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrMCPSecret, path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrMCPSecret, path, err)
	}
	if err := rootOnly(fi); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrMCPSecret, path, err)
	}
	b := make([]byte, 64<<10+1)
	n, _ := f.Read(b)
	if n > 64<<10 {
		return "", fmt.Errorf("%w: %s: over 64 KiB", ErrMCPSecret, path)
	}
	v := strings.TrimRight(string(b[:n]), "\r\n")
	if v == "" || strings.ContainsAny(v, "\x00\r\n") {
		return "", fmt.Errorf("%w: %s: must hold one non-empty line", ErrMCPSecret, path)
	}
	return v, nil
}

func rootOnly(fi fs.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return errors.New("not a regular file")
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("mode %04o: must be 0600 or 0400 (no group or other access)", fi.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("owned by uid %d: must be owned by root", st.Uid)
	}
	return nil
}

// MCPPreflight checks what serve --check can see of mcp_servers on this
// host: every secret file readable and root-only, every bound path
// present, every seccomp profile in profilesDir. One line per problem.
func (c *Config) MCPPreflight(profileExists func(name string) error) []string {
	var out []string
	for _, name := range c.MCPServerNames() {
		s := (*c.MCPServers)[name]
		for _, k := range sortedKeys(s.Secrets) {
			if _, err := ReadMCPSecret(s.Secrets[k]); err != nil {
				out = append(out, fmt.Sprintf("mcp_servers.%s.secrets.%s: %v", name, k, err))
			}
		}
		for _, k := range sortedKeys(s.Headers) {
			if _, err := ReadMCPSecret(s.Headers[k]); err != nil {
				out = append(out, fmt.Sprintf("mcp_servers.%s.headers.%s: %v", name, k, err))
			}
		}
		for i, f := range s.Files {
			if _, err := os.Stat(f.Path); err != nil {
				out = append(out, fmt.Sprintf("mcp_servers.%s.files[%d].path: %v", name, i, err))
			}
		}
		if s.SeccompProfile != "" && profileExists != nil {
			if err := profileExists(s.SeccompProfile); err != nil {
				out = append(out, fmt.Sprintf("mcp_servers.%s.seccomp_profile: %v", name, err))
			}
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
