package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"cyberos.dev/audit/auditstore"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/mcpclient/mcpconf"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"
)

// cliBusyTimeout bounds how long one CLI process waits for the audit store's
// write lock held by others.
const cliBusyTimeout = 60 * time.Second

type runFlags struct {
	args, argsFile, tenant, persona, traceparent string
	start                                        string // "cold" or "warm" (skill run --start)
	deadline                                     time.Duration
	stateDir, profilesDir, runDir, logLevel      string
	socketDir                                    string
	configPath                                   string // the daemon config: files reserved, limits, its fleet witnesses the state dir, its MCP servers
	json, allowDegraded, allowLoopbackHTTP       bool
	recorder                                     *sandbox.SyscallRecorder // seccomp record
	limits                                       supervisor.Defaults      // the cost bounds only
}

func newRunCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run DIR",
		Short: "Run one invocation of the skill in DIR inside a sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return runSkill(cmd.OutOrStdout(), a[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.args, "args", "", "the skill's args, one JSON value (default {})")
	fl.StringVar(&f.argsFile, "args-file", "", "read the args from this file")
	fl.StringVar(&f.tenant, "tenant", "00000000-0000-0000-0000-000000000000", "tenant id (UUID)")
	fl.StringVar(&f.persona, "persona", "", "caller persona")
	fl.StringVar(&f.traceparent, "traceparent", "", "W3C traceparent of the caller")
	fl.DurationVar(&f.deadline, "deadline", 0, "shorten the deadline below effort_minutes (e.g. 4s)")
	fl.StringVar(&f.stateDir, "state-dir", "/var/lib/cyberos", "audit, memory stores and logs")
	fl.StringVar(&f.profilesDir, "seccomp-profiles", "", "directory of seccomp profiles (default: /etc/cyberos/seccomp-profiles, else the repository's seccomp-profiles/)")
	fl.StringVar(&f.runDir, "run-dir", "/run/cyberos", "runtime state: containers, rootfs skeleton, locks")
	fl.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error")
	fl.BoolVar(&f.json, "json", false, "print the envelope as one JSON object")
	fl.StringVar(&f.start, "start", supervisor.StartCold, "cold, or warm: make the sandbox ahead as the daemon's pool does, then hand it this invocation")
	fl.BoolVar(&f.allowDegraded, "allow-degraded", false, "run even where the platform cannot enforce every control (macOS)")
	fl.IntVar(&f.limits.RateLimitPerMinute, "rate-limit-per-minute", supervisor.DefaultRateLimitPerMinute, "tool calls per minute (a frontmatter may lower it)")
	fl.IntVar(&f.limits.MaxBrokerConnections, "max-broker-connections", supervisor.DefaultMaxBrokerConnections, "simultaneous broker connections")
	fl.IntVar(&f.limits.MaxAuditRows, "max-audit-rows", supervisor.DefaultMaxAuditRows, "audit rows of the invocation; reached: it is ended as killed")
	fl.StringVar(&f.socketDir, "socket-dir", "", "private directory of broker sockets (default <run-dir>/sockets)")
	fl.StringVar(&f.configPath, "config", "", "a daemon config whose files (its directory, the signing key, skills_dir, …) no skill may reach, whose limits (the ceilings of x-memory-mb, x-pids-max, x-cpu) apply and whose mcp_servers the skill may call, as under serve; with a fleet whose state_dir is --state-dir, the journal is first compared with the rows PostgreSQL holds for the host, as serve does (default: "+defaultConfigPath+" when it exists)")
	fl.BoolVar(&f.allowLoopbackHTTP, "allow-loopback-http", false, "let Http tools reach 127.0.0.0/8 and ::1 (tests only)")
	_ = fl.MarkHidden("run-dir")
	_ = fl.MarkHidden("allow-loopback-http")
	return cmd
}

// readArgs returns the invocation's args from --args or --args-file (not
// both: a usage error).
func readArgs(inline, file string) ([]byte, error) {
	if inline != "" && file != "" {
		return nil, &exitError{exitUsage, errors.New("--args and --args-file are exclusive")}
	}
	if file == "" {
		return []byte(inline), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, &exitError{exitUsage, fmt.Errorf("--args-file: %w", err)}
	}
	return b, nil
}

func runSkill(out io.Writer, dir string, f runFlags) error {
	args, err := readArgs(f.args, f.argsFile)
	if err != nil {
		return err
	}
	for _, v := range []struct {
		flag string
		n    int
	}{{"rate-limit-per-minute", f.limits.RateLimitPerMinute}, {"max-broker-connections", f.limits.MaxBrokerConnections}, {"max-audit-rows", f.limits.MaxAuditRows}} {
		if v.n < 0 {
			return &exitError{exitUsage, fmt.Errorf("--%s: must not be negative, got %d", v.flag, v.n)}
		}
	}
	if f.start != "" && f.start != supervisor.StartCold && f.start != supervisor.StartWarm {
		return &exitError{exitUsage, fmt.Errorf("--start: want %s or %s, got %q", supervisor.StartCold, supervisor.StartWarm, f.start)}
	}
	log, err := newLogger(f.logLevel)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if runtime.GOOS == "linux" && os.Geteuid() != 0 {
		return &exitError{exitRefused, fmt.Errorf("skill run must run as root (uid %d here): the sandbox needs namespaces, cgroups and mounts; `cyberos doctor` says what this host can enforce", os.Geteuid())}
	}
	// The store is made when missing, but not its parent: a mistyped path
	// must not silently start a new audit chain.
	if why := mustBeDirOrCreatable(f.stateDir, false); why != "" {
		return &exitError{exitRefused, fmt.Errorf("--state-dir %s %s", f.stateDir, why)}
	}
	rc, err := loadRunConfig(f.configPath, log.Warn)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	profiles, err := resolveProfilesDir(f.profilesDir)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	seccompWarmed := warmSeccomp(dir, profiles)
	sup, store, closeAll, err := newSupervisor(assembly{
		Sandbox:  sandbox.Options{RunDir: f.runDir},
		StateDir: f.stateDir,
		// Many `skill run` processes may share one state dir; each waits its
		// turn for SQLite's write lock rather than refusing the invocation.
		AuditOptions:      []auditstore.Option{auditstore.WithBusyTimeout(cliBusyTimeout)},
		AuditErr:          "audit store unavailable, skill not started",
		SocketDir:         f.socketDir,
		SocketDirDefault:  filepath.Join(f.runDir, "sockets"),
		ProfilesDir:       profiles,
		ExtraReserved:     rc.reserved(), // with the MCP servers' secret files
		AllowLoopbackHTTP: f.allowLoopbackHTTP,
		AllowDegraded:     f.allowDegraded,
		Log:               log,
	})
	if err != nil {
		return err
	}
	defer closeAll()
	pool, err := mcpconf.FromConfig(rc.Config, sup.Runner, f.stateDir, profiles, f.allowLoopbackHTTP, false, nil, log)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if pool != nil {
		sup.Sources = append(sup.Sources, pool)
		defer pool.Close()
	}
	// The sandbox is destroyed after the envelope is ready (its range is
	// this process's until it exits).
	sup.MaxTeardowns = 1
	defer sup.Drain()
	if err := runWitness(rc.Config, f.stateDir, store, log); err != nil {
		return err
	}
	if _, err := sup.Reconcile(context.Background(), store); err != nil {
		log.Error("crash reconciliation", "err", err)
	}
	seccompWarmed()
	env, err := runOnce(context.Background(), sup, supervisor.Request{
		SkillDir:    dir,
		Args:        args,
		TenantID:    f.tenant,
		Persona:     f.persona,
		Traceparent: f.traceparent,
		Deadline:    f.deadline,
		Defaults:    limitsOnly(f.limits),
		Ceilings:    rc.Limits.Ceilings(),

		SeccompRecorder: f.recorder,
	}, f.start == supervisor.StartWarm)
	switch {
	case errors.Is(err, supervisor.ErrInvalidSkill), errors.Is(err, supervisor.ErrInvalidRequest):
		return &exitError{exitUsage, err}
	case errors.Is(err, supervisor.ErrAuditIncomplete):
		// The skill ran: show what it did, and fail the command.
		_ = writeEnvelope(out, env, f.json)
		return &exitError{exitRefused, err}
	case errors.Is(err, supervisor.ErrRefused):
		return &exitError{exitRefused, err}
	case err != nil:
		return &exitError{exitRefused, err}
	}
	return writeEnvelope(out, env, f.json)
}

// runOnce runs req; warm, in a sandbox made first as the daemon's warm
// pool makes one (and claimed as the daemon claims it), so that a warm
// start can be tried, and tested, like a cold one.
func runOnce(ctx context.Context, sup *supervisor.Supervisor, req supervisor.Request, warm bool) (supervisor.Envelope, error) {
	if !warm {
		return sup.Run(ctx, req)
	}
	if req.SeccompRecorder != nil {
		return supervisor.Envelope{}, fmt.Errorf("%w: --start warm: a recorded run starts cold", supervisor.ErrInvalidRequest)
	}
	pool, err := supervisor.NewWarmPool(sup, supervisor.WarmConfig{MaxSandboxes: 1, MaxPerSkill: 1, NoRefill: true})
	if err != nil {
		return supervisor.Envelope{}, fmt.Errorf("%w: --start warm: %w", supervisor.ErrRefused, err)
	}
	defer pool.Close()
	sup.Warm = pool
	if err := pool.Make(req); err != nil {
		return supervisor.Envelope{}, fmt.Errorf("--start warm: %w", err)
	}
	return sup.Run(ctx, req)
}

// limitsOnly is Defaults carrying only the cost bounds of `skill run`'s
// flags (the frontmatter's own limits, or the built-in ones, stand).
func limitsOnly(l supervisor.Defaults) *supervisor.Defaults {
	// CPU -1 keeps the built-in quota (0 would mean none).
	return &supervisor.Defaults{CPU: -1, RateLimitPerMinute: l.RateLimitPerMinute, MaxBrokerConnections: l.MaxBrokerConnections, MaxAuditRows: l.MaxAuditRows}
}

// writeEnvelope prints an invocation's envelope (as JSON with asJSON) and
// turns an outcome other than success into exit code exitOutcome; `skill
// run` and `skill invoke` share it.
func writeEnvelope(out io.Writer, env supervisor.Envelope, asJSON bool) error {
	if asJSON {
		if err := json.NewEncoder(out).Encode(env); err != nil {
			return err
		}
	} else {
		printEnvelope(out, env)
	}
	if env.Outcome != supervisor.OutcomeSuccess {
		return &exitError{exitOutcome, nil} // the envelope printed says why
	}
	return nil
}

func printEnvelope(w io.Writer, e supervisor.Envelope) {
	fmt.Fprintf(w, "skill       %s %s\n", e.SkillID, e.Version)
	fmt.Fprintf(w, "invocation  %s\n", e.InvocationID)
	fmt.Fprintf(w, "outcome     %s in %d ms (sandbox start %.1f ms)\n", e.Outcome, e.DurationMS, e.SandboxStartMS)
	if e.Result != nil {
		fmt.Fprintf(w, "result      %s\n", strings.TrimSpace(string(e.Result)))
		fmt.Fprintf(w, "result_hash %s\n", e.ResultHash)
	}
	if e.ErrorMessage != "" {
		fmt.Fprintf(w, "error       %s\n", e.ErrorMessage)
	}
	c := e.Containment
	fmt.Fprintf(w, "enforced:\n")
	fmt.Fprintf(w, "  namespaces    %s\n", strings.Join(c.Namespaces, ", "))
	fmt.Fprintf(w, "  user          %s\n", c.UserNamespace)
	fmt.Fprintf(w, "  seccomp       %s\n", c.Seccomp)
	fmt.Fprintf(w, "  landlock      %s\n", c.Landlock)
	if c.Egress != "" {
		fmt.Fprintf(w, "  egress        %s\n", c.Egress)
	}
	fmt.Fprintf(w, "  capabilities  %s; no_new_privs=%v; read-only root=%v\n", c.Capabilities, c.NoNewPrivs, c.ReadOnlyRoot)
	fmt.Fprintf(w, "  cgroup (%s) memory.max=%d MiB pids.max=%d", c.CgroupMode, c.MemoryMaxBytes>>20, c.PidsMax)
	if c.CPUQuota > 0 {
		fmt.Fprintf(w, " cpu=%.2f", c.CPUQuota)
	}
	fmt.Fprintf(w, "\n  used          memory peak %d KiB, pids peak %d, oom kills %d\n", e.Stats.MemoryPeakBytes>>10, e.Stats.PidsPeak, e.Stats.OOMKills)
	for _, n := range c.NotEnforced {
		fmt.Fprintf(w, "  NOT ENFORCED  %s\n", n)
	}
	if e.Outcome != supervisor.OutcomeSuccess && strings.TrimSpace(e.LogTail) != "" {
		lines := lastLines(e.LogTail, stderrLines)
		fmt.Fprintf(w, "stderr (last %d lines):\n", len(lines))
		for _, l := range lines {
			fmt.Fprintf(w, "  %s\n", l)
		}
	}
}

// stderrLines is how much of a failed skill's stderr its human output ends
// with: the lines that usually say why.
const stderrLines = 10

// lastLines is the last n non-empty-tail lines of s.
func lastLines(s string, n int) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

func newValidateCmd() *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:   "validate DIR",
		Short: "Parse and validate the skill's SKILL.md frontmatter and entrypoint",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			p, err := policy.LoadSkill(a[0])
			if err != nil {
				return &exitError{exitUsage, fmt.Errorf("invalid skill %s: %w", a[0], err)}
			}
			warn := func(msg string, kv ...any) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", slogLine(msg, kv...))
			}
			reserved, err := daemonReserved(configPath, warn)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			for _, w := range append(p.Warnings, reservedWarnings(p.Name, p, reserved)...) {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", w)
			}
			kind := "a tool, runs " + p.Entrypoint
			if p.Kind == policy.KindInstructions {
				kind = "instructions only: nothing to run, served as an MCP prompt"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: valid (%s)\n", p.Name, p.Version, kind)
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", "", "the daemon config whose reserved paths the skill's x-allowed-files are checked against; default: "+defaultConfigPath+" when it exists")
	return cmd
}

// slogLine renders a message and its key-value pairs as one line.
func slogLine(msg string, kv ...any) string {
	var b strings.Builder
	b.WriteString(msg)
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
	}
	return b.String()
}

// newLogger logs to stderr at level, as slog's text (key=value) or JSON
// lines (format "text" or "json"; "" is text).
func newLogger(level string, format ...string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: telemetry.ReplaceAttr}
	switch f := append(format, "")[0]; f {
	case "", "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format: %q: want text or json", f)
	}
}

// resolveProfilesDir picks the seccomp profile directory: the flag, else the
// installed /etc/cyberos/seccomp-profiles, else seccomp-profiles/ beside the
// binary's parent (a repository build: bin/cyberos), else in the working dir.
func resolveProfilesDir(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	candidates := []string{"/etc/cyberos/seccomp-profiles"}
	if exe, err := os.Executable(); err == nil {
		candidates = append(candidates, filepath.Join(filepath.Dir(exe), "..", "seccomp-profiles"))
	}
	candidates = append(candidates, "seccomp-profiles")
	for _, c := range candidates {
		if fi, err := os.Stat(c); err == nil && fi.IsDir() {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("no seccomp profile directory found (looked in %s); pass --seccomp-profiles", strings.Join(candidates, ", "))
}

// privateDir makes (or checks) a root-only 0700 directory: the broker
// refuses a socket directory anyone else can write to.
func privateDir(flag, def string) (string, error) {
	dir := flag
	if dir == "" {
		dir = def
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("socket dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("socket dir: %w", err)
	}
	return filepath.Abs(dir)
}

// reservedDirs are the directories besides the state, socket and profile
// dirs that no skill's file tools may touch: the run dir (container state
// and the rootfs skeleton every sandbox shares) and the directory of this
// binary, which holds cyberos-init and cyberos-tool, mounted into every
// sandbox.
func reservedDirs(runDir string) []string {
	dirs := []string{runDir}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	return dirs
}
