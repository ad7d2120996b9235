package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"cyberos.dev/audit/auditstore"
	"cyberos.dev/fleet"
	"cyberos.dev/memory"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/config"
	"cyberos.dev/supervisor/internal/daemon"
	"cyberos.dev/supervisor/internal/mcpclient/mcpconf"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"
)

// newSupervisorCmd is `supervisor`, which holds `serve` under its old
// name (`cyberos serve` is the same command).
func newSupervisorCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "supervisor", Short: "The root daemon (supervisor serve is cyberos serve)"}
	cmd.AddCommand(newServeCmd())
	return cmd
}

// newServeCmd is the daemon: `cyberos serve`, also `cyberos supervisor serve`.
func newServeCmd() *cobra.Command {
	var configPath, runDir, logLevel, logFormat, placement string
	var check bool
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: admin API on a Unix socket, /metrics, skills from skills_dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, loadProblems, err := loadServeConfig(configPath, check)
			if err != nil {
				return err
			}
			log, err := newLogger(logLevel, logFormat)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			placementKey := "cgroup_placement"
			if cmd.Flags().Changed("cgroup-placement") {
				switch p := sandbox.Placement(placement); p {
				case sandbox.PlacementAuto, sandbox.PlacementService, sandbox.PlacementRoot:
					cfg.CgroupPlacement, placementKey = placement, "--cgroup-placement"
				default:
					return &exitError{exitUsage, fmt.Errorf("--cgroup-placement: %q: want auto, service or root", placement)}
				}
			}
			if runtime.GOOS == "linux" && os.Geteuid() != 0 {
				return &exitError{exitRefused, fmt.Errorf("supervisor serve must run as root (uid %d here): it creates namespaces, cgroups and mounts for every sandbox; `cyberos doctor` says what this host can enforce", os.Geteuid())}
			}
			sb := sandbox.Options{RunDir: runDir, HostIDBase: cfg.Userns.HostIDBase, IDRanges: cfg.IDRanges(),
				CgroupPlacement: sandbox.Placement(cfg.CgroupPlacement)}
			warnings, err := preflight(cfg, configPath, sb, placementKey, loadProblems...)
			if check {
				for _, w := range warnings {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
				}
			}
			if err != nil {
				return &exitError{exitUsage, err}
			}
			if check {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: valid\n", configPath)
				return nil
			}
			return serveDaemon(cfg, configPath, sb, log)
		},
	}
	fl := serve.Flags()
	fl.StringVar(&configPath, "config", "", "the daemon config (YAML; unknown keys are errors); default: built-in defaults")
	fl.BoolVar(&check, "check", false, "make every check serve makes on the --config file, the paths it names and this host, then exit")
	fl.StringVar(&runDir, "run-dir", "/run/cyberos", "runtime state: containers, rootfs skeleton, locks")
	fl.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fl.StringVar(&logFormat, "log-format", "text", "text (key=value) or json (one object per line)")
	fl.StringVar(&placement, "cgroup-placement", "", "overrides the config's cgroup_placement (auto, service or root); the systemd unit, which delegates the daemon its cgroup, says service")
	_ = fl.MarkHidden("run-dir")
	return serve
}

// loadServeConfig reads serve's config: the file at path, else the
// defaults. With check it goes on past the file's problems, returned to
// be named with every other one.
func loadServeConfig(path string, check bool) (cfg config.Config, problems []string, err error) {
	if check && path == "" {
		return cfg, nil, &exitError{exitUsage, errors.New("--check needs --config FILE: it checks a config file (serve without --config runs on the built-in defaults)")}
	}
	cfg = config.Default()
	switch {
	case check:
		var errs []error
		cfg, errs = config.CheckFile(path)
		for _, e := range errs {
			problems = append(problems, strings.TrimPrefix(e.Error(), config.ErrConfig.Error()+": "))
		}
	case path != "":
		if cfg, err = config.Load(path); err != nil {
			return cfg, nil, &exitError{exitUsage, err}
		}
	default:
		if err := cfg.Validate(); err != nil {
			return cfg, nil, &exitError{exitUsage, err}
		}
	}
	return cfg, problems, nil
}

func serveDaemon(cfg config.Config, configPath string, sb sandbox.Options, log *slog.Logger) error {
	auditOpts, err := signingOptions(cfg, configPath, log)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	metrics := telemetry.NewMetrics()
	sup, store, closeAll, err := newSupervisor(assembly{
		Sandbox:          sb,
		StateDir:         cfg.StateDir,
		AuditOptions:     append([]auditstore.Option{auditstore.WithIndexCheck()}, auditOpts...),
		AuditErr:         "audit store",
		SocketDir:        cfg.SocketDir,
		SocketDirDefault: cfg.SocketDir,
		ProfilesDir:      cfg.SeccompProfilesDir,
		// The skills and the config are reserved too.
		ExtraReserved: cfg.ReservedPaths(configPath),
		Metrics:       metrics,
		Log:           log,
	})
	if err != nil {
		return err
	}
	defer closeAll()
	if cfg.OTLPEndpoint != "" || telemetry.OTLPFromEnv() {
		tp, err := telemetry.NewTracerProvider(context.Background(), cfg.OTLPEndpoint)
		if err != nil {
			return &exitError{exitUsage, err}
		}
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := tp.Shutdown(ctx); err != nil {
				log.Warn("otlp: flushing spans at exit", "err", err)
			}
		}()
		sup.Tracer = tp.Tracer(telemetry.TracerName)
	}
	// Before any row is written (Reconcile writes some): the database must
	// be set up for this host's role (checkFleet), and then the journal
	// must hold the chain the fleet's PostgreSQL witnessed for this host,
	// read through that role's view (its host's rows).
	var fleetDB *pgxpool.Pool
	var fleetHost string
	if cfg.Fleet.Enabled() {
		fleetDB, fleetHost, err = fleetPool(cfg.Fleet)
		if err != nil {
			return &exitError{exitUsage, err}
		}
		defer fleetDB.Close()
		if err := checkFleet(fleetDB, fleetHost, log); err != nil {
			return &exitError{exitRefused, err}
		}
		if err := witnessAtStart(fleetDB, cfg.Fleet, fleetHost, cfg.StateDir, store, metrics, log); err != nil {
			return err
		}
	}
	sup.MaxTeardowns = cfg.Teardowns()
	sup.ResponseBudget = cfg.ResponseBudget()
	pool, err := mcpconf.FromConfig(cfg, sup.Runner, cfg.StateDir, cfg.SeccompProfilesDir, sup.AllowLoopbackHTTP, true, metrics.Registry, log)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if pool != nil {
		sup.Sources = append(sup.Sources, pool)
		defer pool.Close()
	}
	if r, ok := sup.Runner.(interface{ CgroupWhere() string }); ok {
		log.Info("sandbox cgroups", "where", r.CgroupWhere())
	}
	if lost, err := sup.Reconcile(context.Background(), store); err != nil {
		log.Error("crash reconciliation", "err", err)
	} else if len(lost) > 0 {
		log.Warn("closed invocations lost by a previous run", "count", len(lost))
	}
	if r, ok := sup.Runner.(interface{ Leftovers() []string }); ok {
		removeStaleSockets(sup.SocketDir, r.Leftovers(), log.Warn)
	}
	if sup.Warm, err = supervisor.NewWarmPool(sup, cfg.Warm.Pool()); errors.Is(err, supervisor.ErrWarmUnsupported) {
		log.Warn("warm sandboxes are off: every sandbox starts cold", "err", err)
	} else if err != nil {
		return &exitError{exitRefused, err}
	}
	if pool, host := fleetDB, fleetHost; pool != nil {
		// Tenant memory is the fleet's: a note saved through one host is
		// found through any other.
		sup.OpenMemory = func() (*memory.Store, error) {
			return memory.OpenPostgres(pool, func(ctx context.Context) error { return fleet.CheckRuntime(ctx, pool, host) }), nil
		}
		defer shipToFleet(pool, host, store, metrics, log)()
	}
	// Each tenant's share of the memory store: memory.* in the config.
	if open := sup.OpenMemory; open != nil {
		sup.OpenMemory = func() (*memory.Store, error) {
			m, err := open()
			if err != nil {
				return nil, err
			}
			if err := m.SetLimits(cfg.Memory.Limits()); err != nil {
				m.Close()
				return nil, err
			}
			return m, nil
		}
	}
	d, err := daemon.New(cfg, daemon.Options{Supervisor: sup, Store: store, Log: log})
	if err != nil {
		return &exitError{exitRefused, err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var mcpReload *mcpconf.Reloader
	if pool != nil {
		mcpReload = &mcpconf.Reloader{Pool: pool, Runner: sup.Runner, StateDir: cfg.StateDir, ProfilesDir: cfg.SeccompProfilesDir,
			AllowLoopback: sup.AllowLoopbackHTTP, Log: log}
	}
	go reloadOnHUP(ctx, hup, d, configPath, mcpReload, log)
	if err := d.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return &exitError{exitRefused, err}
	}
	log.Info("supervisor stopped")
	return nil
}

// reloadOnHUP reloads the config at each SIGHUP (systemctl reload): what
// can change in a running daemon is applied and logged at INFO, a changed
// key that needs a restart is named at WARN, and a config that does not
// load changes nothing (ERROR, with every problem).
func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, d *daemon.Daemon, configPath string, mcpReload *mcpconf.Reloader, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if configPath == "" {
			log.Warn("SIGHUP: no config file to reload (serve runs on the built-in defaults)")
			continue
		}
		cfg, problems := config.CheckFile(configPath)
		if len(problems) > 0 {
			log.Error("SIGHUP: the config does not load; nothing changed", "config", configPath, "err", errors.Join(problems...))
			continue
		}
		oldMCP := d.CurrentMCPServers()
		applied, restart := d.Reload(cfg)
		if slices.Contains(applied, "mcp_servers") && mcpReload != nil {
			added, removed, changed, err := mcpReload.Apply(oldMCP, cfg)
			if err != nil {
				log.Error("SIGHUP: applying mcp_servers failed", "err", err)
			} else {
				log.Info("SIGHUP: MCP servers reloaded", "added", strings.Join(added, ","), "removed", strings.Join(removed, ","),
					"changed", strings.Join(changed, ","), "note", "removed and changed servers end once their calls in flight are done; new ones start on first use")
			}
		}
		changed := strings.Join(applied, ",")
		if changed == "" {
			changed = "nothing"
		}
		log.Info("SIGHUP: config reloaded", "config", configPath, "applied", changed, "skills", "read from skills_dir at each invocation")
		if len(restart) > 0 {
			log.Warn("SIGHUP: changed keys need a restart to take effect", "keys", strings.Join(restart, ","))
		}
	}
}

// removeStaleSockets deletes the broker sockets of ids, sandboxes whose
// supervisor is gone (the runner removed them as leftovers; Reconcile
// removes those of invocations it closed as lost). Only those: the socket
// dir may be shared with live supervisors (a `skill run`, a second daemon)
// whose sandboxes are being made with their sockets right now.
func removeStaleSockets(dir string, ids []string, warn func(string, ...any)) {
	for _, id := range ids {
		p := filepath.Join(dir, "cyberos-skill-broker."+id+".sock")
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			warn("stale broker socket", "path", p, "err", err)
		}
	}
}

// fleetPool is the fleet's PostgreSQL, connected on first use, and this
// host's id in it.
func fleetPool(f config.Fleet) (*pgxpool.Pool, string, error) {
	dsn, err := f.DSN()
	if err != nil {
		return nil, "", err
	}
	host, err := f.ResolvedHostID()
	if err != nil {
		return nil, "", err
	}
	pool, err := fleet.NewPool(dsn)
	if err != nil {
		return nil, "", err
	}
	return pool, host, nil
}

// checkFleet checks at start that the fleet's database is set up for this
// daemon (fleet.CheckRuntime): a database not migrated, or a role that
// could lift its controls or is not bound to this host, is refused now,
// as an operator's mistake to fix; a database that cannot be reached is
// only logged, since rows wait in the journal until it can.
func checkFleet(pool *pgxpool.Pool, host string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), fleetCheck)
	defer cancel()
	err := fleet.CheckRuntime(ctx, pool, host)
	switch {
	case errors.Is(err, fleet.ErrSetup):
		return err
	case err != nil:
		log.Warn("the fleet's PostgreSQL cannot be checked at start; audit rows wait in the journal and memory calls fail until it can", "err", err)
		return nil
	}
	if shared, err := fleet.SharedRole(ctx, pool); err == nil && shared {
		log.Warn("the fleet's PostgreSQL binds this daemon's role to every host id ('*'): any host sharing it may read and append under this host's id (docs/fleet.md, Roles)")
	}
	return nil
}

// fleetCheck bounds the check of the fleet's database at start.
const fleetCheck = 10 * time.Second

// shipToFleet starts shipping the audit rows to the fleet's PostgreSQL in
// the background. The returned stop, called once the last invocation has
// ended, ships what is left (for at most fleetFlush).
func shipToFleet(pool *pgxpool.Pool, host string, store *auditstore.Store, metrics *telemetry.Metrics, log *slog.Logger) (stop func()) {
	sh := &fleet.Shipper{Pool: pool, HostID: host, Source: store, Log: log.With("component", "audit shipping"), Metrics: metrics,
		// A journal the fleet did not witness takes no invocation, even
		// when PostgreSQL was away at start and only the shipper sees it.
		OnDiverged: func(err error) {
			store.SetDamaged(fmt.Errorf("%w; compare with `cyberos audit verify --dsn-file F --host %s`, then `cyberos audit repair --from-dsn-file F --host %s`", err, host, host))
		}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); sh.Run(ctx) }()
	log.Info("shipping audit rows to the fleet's PostgreSQL; tenant memory there too", "host_id", host)
	return func() {
		cancel()
		<-done
		fctx, fcancel := context.WithTimeout(context.Background(), fleetFlush)
		defer fcancel()
		if err := sh.Flush(fctx); err != nil {
			log.Warn("audit rows left unshipped at exit; the next start ships them", "err", err)
		}
	}
}

// fleetFlush bounds the final shipment at exit.
const fleetFlush = 10 * time.Second
