package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/goccy/go-yaml"

	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
)

// ErrConfig: the daemon config is invalid; the message names the key.
var ErrConfig = errors.New("invalid config")

// Config is the daemon's config file (DESIGN.md "Daemon config and admin
// API"). Unknown keys are errors.
type Config struct {
	Version            int      `yaml:"version"`
	SkillsDir          string   `yaml:"skills_dir"`
	StateDir           string   `yaml:"state_dir"`
	SocketDir          string   `yaml:"socket_dir"`
	AdminSocket        string   `yaml:"admin_socket"`
	AdminGroup         string   `yaml:"admin_group"`
	MetricsListen      string   `yaml:"metrics_listen"`
	OTLPEndpoint       string   `yaml:"otlp_endpoint"`
	SeccompProfilesDir string   `yaml:"seccomp_profiles_dir"`
	MaxConcurrent      int      `yaml:"max_concurrent"`
	Defaults           Defaults `yaml:"defaults"`
	ShutdownGrace      Grace    `yaml:"shutdown_grace"`
	Userns             Userns   `yaml:"userns"`
	// IdempotencyWindow is how long a (tenant_id, request_id) is answered
	// from its first invocation instead of running again; 0 turns it off.
	IdempotencyWindow Window `yaml:"idempotency_window"`
	Audit             Audit  `yaml:"audit"`
	// MaxConcurrentStarts bounds the sandboxes being created at once; the
	// other admitted invocations wait in line. 0 means two per CPU.
	MaxConcurrentStarts int  `yaml:"max_concurrent_starts"`
	Warm                Warm `yaml:"warm"`
	// CgroupPlacement is where the sandboxes' cgroups go: auto, service
	// or root (sandbox.Placement).
	CgroupPlacement string `yaml:"cgroup_placement"`
	// AdminMaxConnections bounds the admin socket's open connections (see
	// connCap); 0 means AdminConnections' default.
	AdminMaxConnections int `yaml:"admin_max_connections"`
	// Fleet puts the audit rows (and, later, tenant memory) on a shared
	// PostgreSQL; unset, the host stands alone.
	Fleet Fleet `yaml:"fleet"`
	// MCPServers are the MCP servers whose tools skills may be granted
	// (mcpconfig.go).
	MCPServers *MCPServers `yaml:"mcp_servers"`
	// MCPMaxRunning bounds the MCP server sandboxes running at once.
	MCPMaxRunning int `yaml:"mcp_max_running"`

	// Limits are the ceilings a frontmatter's limits may not exceed.
	Limits Limits `yaml:"limits"`

	// Memory bounds each tenant's share of the memory store (memoryconfig.go).
	Memory Memory `yaml:"memory"`

	// ResponseBudgetMB is what every invocation's tool calls together may
	// hold between reading and answering (broker.Budget); 0 means
	// broker.DefaultDaemonBudget. See checkResponseBudget.
	ResponseBudgetMB int64 `yaml:"response_budget_mb"`

	// MCPHTTP is the optional loopback TCP listener for MCP clients
	// (the daemon's mcptcp.go); the admin socket's /mcp needs none.
	MCPHTTP MCPHTTP `yaml:"mcp_http"`
}

// Fleet is the config of a daemon that is one host of many.
type Fleet struct {
	// PostgresDSN is a libpq connection string or URL; PostgresDSNFile a
	// file holding one (a mounted secret). At most one of them is set.
	PostgresDSN     string `yaml:"postgres_dsn"`
	PostgresDSNFile string `yaml:"postgres_dsn_file"`
	// HostID names this daemon's rows in PostgreSQL, unique per host and
	// stable across restarts; empty: $CYBEROS_HOST_ID, else the hostname.
	HostID string `yaml:"host_id"`
}

// HostIDEnv overrides the hostname as the default fleet.host_id (a
// Kubernetes DaemonSet sets it to the node's name).
const HostIDEnv = "CYBEROS_HOST_ID"

// hostIDPattern is compiled on first use: its {0,62} makes a large program,
// which every start of the binary (each `skill run`) paid in its inits.
var hostIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`) })

// Enabled says whether this daemon ships to a fleet's PostgreSQL.
func (f Fleet) Enabled() bool { return f.PostgresDSN != "" || f.PostgresDSNFile != "" }

// DSN returns the connection string, reading postgres_dsn_file if set.
func (f Fleet) DSN() (string, error) {
	if f.PostgresDSNFile == "" {
		return f.PostgresDSN, nil
	}
	b, err := os.ReadFile(f.PostgresDSNFile)
	if err != nil {
		return "", fmt.Errorf("%w: fleet.postgres_dsn_file: %w", ErrConfig, err)
	}
	dsn := strings.TrimSpace(string(b))
	if dsn == "" {
		return "", fmt.Errorf("%w: fleet.postgres_dsn_file: %s is empty", ErrConfig, f.PostgresDSNFile)
	}
	return dsn, nil
}

// ResolvedHostID is host_id, or $CYBEROS_HOST_ID, or the hostname.
func (f Fleet) ResolvedHostID() (string, error) {
	id, key := f.HostID, "fleet.host_id"
	if id == "" {
		id, key = os.Getenv(HostIDEnv), "$"+HostIDEnv
	}
	if id == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("%w: fleet.host_id: unset and the hostname cannot be read: %w", ErrConfig, err)
		}
		id, key = h, "fleet.host_id (the hostname)"
	}
	if !hostIDPattern().MatchString(id) {
		return "", fmt.Errorf("%w: %s: %q must match %s", ErrConfig, key, id, hostIDPattern())
	}
	return id, nil
}

// Warm is the pool of sandboxes made ahead of their invocations
// (supervisor.WarmPool).
type Warm struct {
	// MaxSandboxes bounds the warm sandboxes across skills; 0 disables the
	// pool. Each holds a user-namespace id range of its own.
	MaxSandboxes int `yaml:"max_sandboxes"`
	// MaxPerSkill bounds one skill's ready sandboxes.
	MaxPerSkill int `yaml:"max_per_skill"`
	// MaxMemoryMB and MaxPids bound the sums of the warm sandboxes' memory
	// and pids limits; 0 = no bound besides max_sandboxes.
	MaxMemoryMB int64 `yaml:"max_memory_mb"`
	MaxPids     int64 `yaml:"max_pids"`
	// Idle is how long a skill's warm sandboxes wait unused before they are
	// destroyed.
	Idle WarmIdle `yaml:"idle"`
}

// WarmIdle is warm.idle: a Go duration ("60s").
type WarmIdle time.Duration

// UnmarshalText parses a duration, naming the key on error.
func (w *WarmIdle) UnmarshalText(b []byte) error {
	d, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("warm.idle: %q is not a duration (e.g. 60s)", b)
	}
	*w = WarmIdle(d)
	return nil
}

// Pool is the pool's configuration.
func (w Warm) Pool() supervisor.WarmConfig {
	return supervisor.WarmConfig{MaxSandboxes: w.MaxSandboxes, MaxPerSkill: w.MaxPerSkill,
		MaxMemoryMB: w.MaxMemoryMB, MaxPids: w.MaxPids, Idle: time.Duration(w.Idle)}
}

// Audit is how the daemon signs its audit chain's head (audit.Signer).
type Audit struct {
	// SigningKey is the Ed25519 key (PKCS #8 PEM) that signs checkpoints,
	// made on the first start with its public half beside it (KEY.pub, for
	// `audit verify --pubkey`). A relative path is taken from the config
	// file's directory (/etc/cyberos without one).
	SigningKey string `yaml:"signing_key"`
	// Syslog is the local syslog socket every signed head is also sent to,
	// outside the state dir (e.g. /dev/log, which journald serves); "" sends
	// none.
	Syslog string `yaml:"syslog"`
	// ScrubInterval is how often the daemon verifies the whole chain in the
	// background (the first time at start); damage found stops it taking
	// invocations until `cyberos audit repair`. 0 turns the scrub off.
	ScrubInterval ScrubInterval `yaml:"scrub_interval"`
}

// ScrubInterval is audit.scrub_interval: a Go duration ("1h"), 0 for none.
type ScrubInterval time.Duration

// UnmarshalText parses a Go duration.
func (s *ScrubInterval) UnmarshalText(b []byte) error {
	d, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("audit.scrub_interval: %q is not a duration (e.g. 1h, or 0 for no scrub)", b)
	}
	*s = ScrubInterval(d)
	return nil
}

// DefaultScrubInterval is audit.scrub_interval's default.
const DefaultScrubInterval = time.Hour

// DefaultConfigDir is where relative paths point when the daemon runs
// without a config file.
const DefaultConfigDir = "/etc/cyberos"

// Userns are the host id ranges of the sandboxes: each running sandbox
// holds one range of 65536 ids of its own, from host_id_base on.
type Userns struct {
	HostIDBase uint32 `yaml:"host_id_base"`
	// Ranges is how many ranges there are; 0 means max_concurrent +
	// warm.max_sandboxes + DefaultTeardowns, and with mcp_servers
	// mcp_max_running and one a standby MCP server sandbox.
	Ranges int `yaml:"ranges"`
}

// DefaultTeardowns is how many sandboxes of ended invocations may be
// destroyed in the background at once when userns.ranges is 0: each still
// holds its range until it is gone.
var DefaultTeardowns = 2 * runtime.NumCPU()

// IDRanges is the number of ranges in force.
func (c *Config) IDRanges() int {
	if c.Userns.Ranges == 0 {
		return c.MaxConcurrent + c.Warm.MaxSandboxes + DefaultTeardowns + c.mcpRanges()
	}
	return c.Userns.Ranges
}

// Teardowns is how many sandboxes may be destroyed after their answer at
// once: the ranges beyond those of the running and warm sandboxes, at most
// DefaultTeardowns. With none spare, a sandbox is destroyed before its
// invocation answers.
func (c *Config) Teardowns() int {
	return max(0, min(DefaultTeardowns, c.IDRanges()-c.MaxConcurrent-c.Warm.MaxSandboxes))
}

// ConcurrentStarts is the bound on sandbox creations in force.
func (c *Config) ConcurrentStarts() int {
	if c.MaxConcurrentStarts == 0 {
		return 2 * runtime.NumCPU()
	}
	return c.MaxConcurrentStarts
}

// Grace is shutdown_grace: a Go duration ("30s", "1m").
type Grace time.Duration

// UnmarshalText parses a duration, naming the key on error.
func (g *Grace) UnmarshalText(b []byte) error {
	d, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("shutdown_grace: %q is not a duration (e.g. 30s)", b)
	}
	*g = Grace(d)
	return nil
}

// Defaults are the limits a skill gets where its frontmatter is silent.
type Defaults struct {
	MemoryMB       int64  `yaml:"memory_mb"`
	PidsMax        int64  `yaml:"pids_max"`
	EffortMinutes  int    `yaml:"effort_minutes"`
	SeccompProfile string `yaml:"seccomp_profile"`
	// CPU is the CPU quota where x-cpu is unset; 0 = no quota.
	CPU float64 `yaml:"cpu"`
	// FileSizeMB and NoFile are the sandbox's RLIMIT_FSIZE (MiB) and
	// RLIMIT_NOFILE, for every skill (no frontmatter key sets them).
	FileSizeMB int64 `yaml:"file_size_mb"`
	NoFile     int64 `yaml:"nofile"`
	// Per invocation: tool calls per minute (a frontmatter may lower it),
	// simultaneous broker connections, audit rows (reached: killed).
	RateLimitPerMinute   int `yaml:"rate_limit_per_minute"`
	MaxBrokerConnections int `yaml:"max_broker_connections"`
	MaxAuditRows         int `yaml:"max_audit_rows"`
}

// adminSpareConnections is how many admin connections the default bound
// leaves beyond one per running invocation.
const adminSpareConnections = 1024

// AdminConnections is the admin socket's connection bound:
// admin_max_connections, or max_concurrent + adminSpareConnections.
func (c *Config) AdminConnections() int {
	if c.AdminMaxConnections != 0 {
		return c.AdminMaxConnections
	}
	return c.MaxConcurrent + adminSpareConnections
}

// Default is what an empty file means.
func Default() Config {
	return Config{
		Version:            1,
		SkillsDir:          "/opt/cyberos/skills",
		StateDir:           "/var/lib/cyberos",
		SocketDir:          "/run/cyberos/sockets",
		AdminSocket:        "/run/cyberos/supervisor.sock",
		MetricsListen:      "127.0.0.1:9464",
		SeccompProfilesDir: "/etc/cyberos/seccomp-profiles",
		MaxConcurrent:      256,
		Defaults: Defaults{MemoryMB: 512, PidsMax: 64, EffortMinutes: 5, SeccompProfile: "default", CPU: 1, FileSizeMB: 128, NoFile: 1024,
			RateLimitPerMinute: 600, MaxBrokerConnections: 16, MaxAuditRows: 1000},
		ShutdownGrace:     Grace(30 * time.Second),
		IdempotencyWindow: Window(24 * time.Hour),
		Userns:            Userns{HostIDBase: sandbox.DefaultHostIDBase},
		Audit:             Audit{SigningKey: "audit-signing.key", ScrubInterval: ScrubInterval(DefaultScrubInterval)},
		CgroupPlacement:   string(sandbox.PlacementAuto),
		MCPMaxRunning:     DefaultMCPMaxRunning,
		Limits:            DefaultLimits(),
		Warm:              Warm{MaxSandboxes: 16, MaxPerSkill: supervisor.DefaultWarmPerSkill, MaxMemoryMB: 8192, Idle: WarmIdle(supervisor.DefaultWarmIdle)},
		Memory:            defaultMemory(),
	}
}

// Load reads path strictly over the defaults and validates it.
func Load(path string) (Config, error) {
	c := Default()
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := yaml.UnmarshalWithOptions(b, &c, yaml.DisallowUnknownField()); err != nil {
		return c, fmt.Errorf("%w: %s: %s", ErrConfig, path, yaml.FormatError(err, false, true))
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// SigningKeyPath is audit.signing_key made absolute: a relative path is
// taken from the directory of the config file at configPath, or from
// DefaultConfigDir when there is none.
func (c *Config) SigningKeyPath(configPath string) string {
	k := c.Audit.SigningKey
	if filepath.IsAbs(k) {
		return k
	}
	dir := DefaultConfigDir
	if configPath != "" {
		if abs, err := filepath.Abs(configPath); err == nil {
			dir = filepath.Dir(abs)
		}
	}
	return filepath.Join(dir, k)
}

// CheckSigningKeyPath refuses a signing key inside state_dir.
func (c *Config) CheckSigningKeyPath(configPath string) error {
	if k := c.SigningKeyPath(configPath); inside(k, c.StateDir) {
		return fmt.Errorf("%w: audit.signing_key: %s is inside state_dir %s: whoever can rewrite the journal could re-sign it", ErrConfig, k, c.StateDir)
	}
	return nil
}

var profileName = regexp.MustCompile(`^[a-z0-9_-]+$`)

// Validate checks every key; the error names the first bad one.
func (c *Config) Validate() error {
	mcpErr := c.validateMCP() // every mcp_servers problem, beside the first other one
	bad := func(key, why string, a ...any) error {
		return errors.Join(fmt.Errorf("%w: %s: %s", ErrConfig, key, fmt.Sprintf(why, a...)), mcpErr)
	}
	abs := func(key, v string) error {
		if v == "" || !filepath.IsAbs(v) {
			return bad(key, "must be an absolute path, got %q", v)
		}
		return nil
	}
	if c.Version != 1 {
		return bad("version", "must be 1, got %d", c.Version)
	}
	for _, kv := range [][2]string{{"skills_dir", c.SkillsDir}, {"state_dir", c.StateDir}, {"socket_dir", c.SocketDir},
		{"admin_socket", c.AdminSocket}, {"seccomp_profiles_dir", c.SeccompProfilesDir}} {
		if err := abs(kv[0], kv[1]); err != nil {
			return err
		}
	}
	if len(c.AdminSocket) > 103 {
		return bad("admin_socket", "longer than a unix socket path may be (103 bytes)")
	}
	if c.MetricsListen != "" {
		_, port, err := net.SplitHostPort(c.MetricsListen)
		if err != nil {
			return bad("metrics_listen", "must be host:port or empty, got %q", c.MetricsListen)
		}
		if _, err := net.LookupPort("tcp", port); err != nil {
			return bad("metrics_listen", "%q: the port must be a number from 0 to 65535 or a service name", c.MetricsListen)
		}
	}
	if c.OTLPEndpoint != "" {
		if _, _, err := net.SplitHostPort(c.OTLPEndpoint); err != nil && !regexp.MustCompile(`^https?://`).MatchString(c.OTLPEndpoint) {
			return bad("otlp_endpoint", "must be host:port or an http(s) URL, got %q", c.OTLPEndpoint)
		}
	}
	switch sandbox.Placement(c.CgroupPlacement) {
	case sandbox.PlacementAuto, sandbox.PlacementService, sandbox.PlacementRoot:
	default:
		return bad("cgroup_placement", "must be auto, service or root, got %q", c.CgroupPlacement)
	}
	if n := c.AdminMaxConnections; n != 0 && (n < c.MaxConcurrent+16 || n > 1<<20) {
		return bad("admin_max_connections", "%d: must be 0 (max_concurrent + %d) or from max_concurrent + 16 (%d: each running invocation holds one, and status, tail and /healthz need room) to 1048576", n, adminSpareConnections, c.MaxConcurrent+16)
	}
	if c.Fleet.PostgresDSN != "" && c.Fleet.PostgresDSNFile != "" {
		return bad("fleet", "postgres_dsn and postgres_dsn_file are both set; keep one")
	}
	if c.Fleet.PostgresDSNFile != "" {
		if err := abs("fleet.postgres_dsn_file", c.Fleet.PostgresDSNFile); err != nil {
			return err
		}
	}
	if c.Fleet.HostID != "" && !hostIDPattern().MatchString(c.Fleet.HostID) {
		return bad("fleet.host_id", "%q must match %s", c.Fleet.HostID, hostIDPattern())
	}
	if err := c.Memory.validate(); err != nil {
		return err
	}
	if c.MaxConcurrent < 1 || c.MaxConcurrent > 65536 {
		return bad("max_concurrent", "must be 1..65536, got %d", c.MaxConcurrent)
	}
	if c.MaxConcurrentStarts < 0 || c.MaxConcurrentStarts > 65536 {
		return bad("max_concurrent_starts", "must be 0 (two per CPU) to 65536, got %d", c.MaxConcurrentStarts)
	}
	d := c.Defaults
	switch {
	case d.MemoryMB < 16 || d.MemoryMB > 65536:
		return bad("defaults.memory_mb", "must be 16..65536, got %d", d.MemoryMB)
	case d.PidsMax < 8 || d.PidsMax > 4096:
		return bad("defaults.pids_max", "must be 8..4096, got %d", d.PidsMax)
	case d.EffortMinutes < 1 || d.EffortMinutes > 1440:
		return bad("defaults.effort_minutes", "must be 1..1440, got %d", d.EffortMinutes)
	case !profileName.MatchString(d.SeccompProfile):
		return bad("defaults.seccomp_profile", "must be a profile name ([a-z0-9_-]+), got %q", d.SeccompProfile)
	case !(d.CPU >= 0 && d.CPU <= 64): // NaN fails too
		return bad("defaults.cpu", "must be 0 (no quota) to 64 CPUs, got %v", d.CPU)
	case d.FileSizeMB < 1 || d.FileSizeMB > 1<<20:
		return bad("defaults.file_size_mb", "must be 1..1048576, got %d", d.FileSizeMB)
	case d.NoFile < 64 || d.NoFile > 1<<20:
		return bad("defaults.nofile", "must be 64..1048576, got %d", d.NoFile)
	case d.RateLimitPerMinute < 1 || d.RateLimitPerMinute > 1_000_000:
		return bad("defaults.rate_limit_per_minute", "must be 1..1000000, got %d", d.RateLimitPerMinute)
	case d.MaxBrokerConnections < 1 || d.MaxBrokerConnections > 1024:
		return bad("defaults.max_broker_connections", "must be 1..1024, got %d", d.MaxBrokerConnections)
	case d.MaxAuditRows < 100 || d.MaxAuditRows > 100_000_000:
		return bad("defaults.max_audit_rows", "must be 100..100000000, got %d", d.MaxAuditRows)
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	if g := time.Duration(c.ShutdownGrace); g < 0 || g > time.Hour {
		return bad("shutdown_grace", "must be 0..1h, got %v", g)
	}
	if w := time.Duration(c.IdempotencyWindow); w < 0 || w > 30*24*time.Hour {
		return bad("idempotency_window", "must be 0 (off) up to 720h, got %v", w)
	}
	if _, err := c.AdminGID(); err != nil {
		return err
	}
	w := c.Warm
	switch {
	case w.MaxSandboxes < 0 || w.MaxSandboxes > 4096:
		return bad("warm.max_sandboxes", "must be 0 (no warm sandboxes) to 4096, got %d", w.MaxSandboxes)
	case w.MaxPerSkill < 1 || w.MaxPerSkill > 4096:
		return bad("warm.max_per_skill", "must be 1..4096, got %d", w.MaxPerSkill)
	case w.MaxMemoryMB < 0:
		return bad("warm.max_memory_mb", "must be 0 (no bound) or more, got %d", w.MaxMemoryMB)
	case w.MaxPids < 0:
		return bad("warm.max_pids", "must be 0 (no bound) or more, got %d", w.MaxPids)
	case w.Idle < WarmIdle(time.Second) || w.Idle > WarmIdle(24*time.Hour):
		return bad("warm.idle", "must be 1s..24h, got %v", time.Duration(w.Idle))
	}
	if c.Userns.Ranges != 0 && c.Userns.Ranges < c.MaxConcurrent+w.MaxSandboxes {
		return bad("userns.ranges", "%d is below max_concurrent %d + warm.max_sandboxes %d: each running or warm sandbox holds a range (0 means their sum plus %d for sandboxes being destroyed)", c.Userns.Ranges, c.MaxConcurrent, w.MaxSandboxes, DefaultTeardowns)
	}
	if si := time.Duration(c.Audit.ScrubInterval); si != 0 && (si < time.Minute || si > 7*24*time.Hour) {
		return bad("audit.scrub_interval", "must be 0 (no scrub) or 1m..168h, got %s", si)
	}
	if c.Audit.SigningKey == "" {
		return bad("audit.signing_key", "must be a path (relative to the config file's directory), got \"\"")
	}
	if err := c.CheckSigningKeyPath(""); filepath.IsAbs(c.Audit.SigningKey) && err != nil {
		return err
	}
	if c.Audit.Syslog != "" {
		if err := abs("audit.syslog", c.Audit.Syslog); err != nil {
			return err
		}
	}
	if err := sandbox.CheckIDRanges("userns.host_id_base", "userns.ranges", c.Userns.HostIDBase, c.IDRanges(), sandbox.HostIDFiles); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := c.MCPHTTP.check(); err != nil {
		return errors.Join(err, mcpErr)
	}
	if err := c.checkResponseBudget(); err != nil {
		return errors.Join(err, mcpErr)
	}
	return mcpErr
}

// minResponseBudgetMB is the smallest daemon budget of response bytes in
// flight: one Read at the file cap with its result must fit.
const minResponseBudgetMB = (tools.MaxFileReadBytes + tools.MaxResultBytes + 1<<20 - 1) >> 20

// checkResponseBudget checks response_budget_mb: 0 (the default) or from
// minResponseBudgetMB to 1 TiB.
func (c *Config) checkResponseBudget() error {
	if n := c.ResponseBudgetMB; n != 0 && (n < minResponseBudgetMB || n > 1<<20) {
		return fmt.Errorf("%w: response_budget_mb: must be 0 (%d) or %d..1048576 (one Read of a file at the 16 MiB cap and its result must fit), got %d",
			ErrConfig, broker.DefaultDaemonBudget>>20, minResponseBudgetMB, n)
	}
	return nil
}

// ResponseBudget is the daemon's budget of response bytes in flight.
func (c *Config) ResponseBudget() int64 {
	if c.ResponseBudgetMB == 0 {
		return broker.DefaultDaemonBudget
	}
	return c.ResponseBudgetMB << 20
}

// ReservedPaths are the paths that feed a policy or the daemon, which no
// skill's file tools may touch whatever its globs say: the dedicated config
// directory (DefaultConfigDir), the config file at configPath (when the
// daemon was given one) and every path it names: skills_dir (every skill's
// SKILL.md and entrypoint), state_dir, socket_dir, seccomp_profiles_dir,
// the admin socket, the audit signing key and its public half, and the
// fleet's DSN file and mcp_http's token file. The directory holding a given config file is not
// reserved wholesale: it may be a shared one such as /tmp.
func (c *Config) ReservedPaths(configPath string) []string {
	key := c.SigningKeyPath(configPath)
	out := []string{DefaultConfigDir, c.SkillsDir, c.StateDir, c.SocketDir, c.SeccompProfilesDir, c.AdminSocket, key, key + ".pub"}
	if c.Fleet.PostgresDSNFile != "" { // it may hold a password
		out = append(out, c.Fleet.PostgresDSNFile)
	}
	if c.MCPHTTP.TokenFile != "" {
		out = append(out, c.MCPHTTP.TokenFile)
	}
	out = append(out, c.MCPSecretFiles()...)
	if configPath != "" {
		if abs, err := filepath.Abs(configPath); err == nil {
			out = append(out, abs)
		}
	}
	return out
}

// AdminGID resolves admin_group (a group name or a numeric gid): -1 when
// empty (root only).
func (c *Config) AdminGID() (int, error) {
	if c.AdminGroup == "" {
		return -1, nil
	}
	if n, err := strconv.Atoi(c.AdminGroup); err == nil {
		if n < 0 {
			return 0, fmt.Errorf("%w: admin_group: negative gid %d", ErrConfig, n)
		}
		return n, nil
	}
	g, err := user.LookupGroup(c.AdminGroup)
	if err != nil {
		return 0, fmt.Errorf("%w: admin_group: no group %q on this host", ErrConfig, c.AdminGroup)
	}
	return strconv.Atoi(g.Gid)
}

// inside reports whether path is dir or below it.
func inside(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}
