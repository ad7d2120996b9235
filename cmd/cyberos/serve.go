package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/cyberos/supervisor/audit"
	"github.com/cyberos/supervisor/fleet"
	"github.com/cyberos/supervisor/memory"
	"github.com/cyberos/supervisor/supervisor"
	"github.com/cyberos/supervisor/supervisor/daemon"
	"github.com/cyberos/supervisor/supervisor/mcpclient"
	"github.com/cyberos/supervisor/supervisor/sandbox"
	"github.com/cyberos/supervisor/telemetry"
)

func newSupervisorCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "supervisor", Short: "The root daemon"}
	var configPath, runDir, logLevel, logFormat, placement string
	var check bool
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: admin API on a Unix socket, /metrics, skills from skills_dir",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if check && configPath == "" {
				return &exitError{exitUsage, errors.New("--check needs --config FILE: it checks a config file (serve without --config runs on the built-in defaults)")}
			}
			cfg := daemon.DefaultConfig()
			if configPath != "" {
				var err error
				if cfg, err = daemon.LoadConfig(configPath); err != nil {
					return &exitError{exitUsage, err}
				}
			} else if err := cfg.Validate(); err != nil {
				return &exitError{exitUsage, err}
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
			warnings, err := preflight(cfg, configPath, sb, placementKey)
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
	cmd.AddCommand(serve)
	return cmd
}

func serveDaemon(cfg daemon.Config, configPath string, sb sandbox.Options, log *slog.Logger) error {
	auditOpts, err := signingOptions(cfg, configPath, log)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	metrics := telemetry.NewMetrics()
	sup, store, closeAll, err := newSupervisor(assembly{
		Sandbox:          sb,
		StateDir:         cfg.StateDir,
		AuditOptions:     append([]audit.Option{audit.WithIndexCheck()}, auditOpts...),
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
	sup.MaxTeardowns = cfg.Teardowns()
	pool, err := newMCPPool(cfg, sup.Runner, cfg.StateDir, cfg.SeccompProfilesDir, log)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if pool != nil {
		if pool.Metrics, err = mcpclient.NewMetrics(metrics.Registry); err != nil {
			return err
		}
		sup.MCP = pool
		defer pool.Close()
	}
	if r, ok := sup.Runner.(interface{ CgroupWhere() string }); ok {
		log.Info("sandbox cgroups " + r.CgroupWhere())
	}
	if lost, err := sup.Reconcile(context.Background(), store); err != nil {
		log.Error("crash reconciliation", "err", err)
	} else if len(lost) > 0 {
		log.Warn("closed invocations lost by a previous run", "count", len(lost))
	}
	removeStaleSockets(sup.SocketDir, log.Warn)
	if sup.Warm, err = supervisor.NewWarmPool(sup, cfg.Warm.Pool()); errors.Is(err, supervisor.ErrWarmUnsupported) {
		log.Warn("warm sandboxes are off: every sandbox starts cold", "err", err)
	} else if err != nil {
		return &exitError{exitRefused, err}
	}
	var fleetRows daemon.RowSource
	if cfg.Fleet.Enabled() {
		pool, host, err := fleetPool(cfg.Fleet)
		if err != nil {
			return &exitError{exitUsage, err}
		}
		defer pool.Close()
		// Tenant memory is the fleet's: a note saved through one host is
		// found through any other.
		sup.OpenMemory = func() (*memory.Store, error) {
			return memory.OpenPostgres(pool, func(ctx context.Context) error { return fleet.Migrate(ctx, pool) }), nil
		}
		fleetRows = fleet.Rows{Pool: pool}
		defer shipToFleet(pool, host, store, metrics, log)()
	}
	d, err := daemon.New(cfg, daemon.Options{Supervisor: sup, Store: store, Log: log, Fleet: fleetRows})
	if err != nil {
		return &exitError{exitRefused, err}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := d.Serve(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return &exitError{exitRefused, err}
	}
	log.Info("supervisor stopped")
	return nil
}

// removeStaleSockets deletes broker sockets a previous daemon left behind
// (their invocations were closed as lost by Reconcile).
func removeStaleSockets(dir string, warn func(string, ...any)) {
	ents, _ := filepath.Glob(filepath.Join(dir, "cyberos-skill-broker.*.sock"))
	for _, e := range ents {
		if err := os.Remove(e); err != nil {
			warn("stale broker socket", "path", e, "err", err)
		}
	}
}

// fleetPool is the fleet's PostgreSQL, connected on first use, and this
// host's id in it.
func fleetPool(f daemon.Fleet) (*pgxpool.Pool, string, error) {
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

// shipToFleet starts shipping the audit rows to the fleet's PostgreSQL in
// the background. The returned stop, called once the last invocation has
// ended, ships what is left (for at most fleetFlush).
func shipToFleet(pool *pgxpool.Pool, host string, store *audit.Store, metrics *telemetry.Metrics, log *slog.Logger) (stop func()) {
	sh := &fleet.Shipper{Pool: pool, HostID: host, Source: store, Log: log.With("component", "audit shipping"), Metrics: metrics}
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
