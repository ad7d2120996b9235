package cli

import (
	"fmt"
	"io"
	"log/slog"

	"cyberos.dev/audit/auditstore"
	"cyberos.dev/memory"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"
)

// assembly is what differs between `skill run` and `serve` when they build
// a supervisor; everything else newSupervisor decides once for both.
type assembly struct {
	Sandbox  sandbox.Options // RunDir is also a reserved dir
	StateDir string
	// AuditOptions and AuditErr: how the store is opened and how its
	// failure to open is worded.
	AuditOptions []auditstore.Option
	AuditErr     string
	// SocketDir is the flag or config value, SocketDirDefault its fallback.
	SocketDir, SocketDirDefault string
	ProfilesDir                 string
	// ExtraReserved are reserved dirs beyond reservedDirs(RunDir).
	ExtraReserved     []string
	Metrics           *telemetry.Metrics
	AllowLoopbackHTTP bool
	AllowDegraded     bool
	Log               *slog.Logger
}

// newSupervisor builds the supervisor both `skill run` and `serve` use:
// the sandbox runner, the audit store, the memory store, the tool registry,
// the private socket dir and the reserved dirs. closeAll closes the memory
// store (if a skill opened it), then the audit store and the runner side by
// side; the runner ends and reaps its creation helper (orphaned, it would
// be left for init to reap, in the daemon's cgroup).
func newSupervisor(a assembly) (sup *supervisor.Supervisor, store *auditstore.Store, closeAll func(), err error) {
	// The host checks first: on a host that cannot run sandboxes the store
	// is not touched. Then the runner (its creation helper's start, the
	// binaries' copies, the probes) and the audit store's open (its
	// fsyncs and start-up check) go on side by side: neither needs the
	// other.
	if err := sandbox.Preflight(a.Sandbox); err != nil {
		return nil, nil, nil, &exitError{exitRefused, err}
	}
	type made struct {
		runner sandbox.Runner
		err    error
	}
	rc := make(chan made, 1)
	go func() {
		r, err := sandbox.New(a.Sandbox)
		rc <- made{r, err}
	}()
	store, serr := auditstore.Open(a.StateDir, a.AuditOptions...)
	m := <-rc
	runner := m.runner
	closeRunner := func() {
		if c, ok := runner.(io.Closer); ok {
			_ = c.Close()
		}
	}
	if m.err != nil {
		if serr == nil {
			store.Close()
		}
		return nil, nil, nil, &exitError{exitRefused, m.err}
	}
	if serr != nil {
		closeRunner()
		return nil, nil, nil, &exitError{exitRefused, fmt.Errorf("%s: %w", a.AuditErr, serr)}
	}
	socketDir, err := privateDir(a.SocketDir, a.SocketDirDefault)
	if err != nil {
		store.Close()
		closeRunner()
		return nil, nil, nil, &exitError{exitRefused, err}
	}
	stateDir := a.StateDir
	sup = &supervisor.Supervisor{
		Runner:            runner,
		Audit:             store,
		Metrics:           a.Metrics,
		OpenMemory:        func() (*memory.Store, error) { return memory.Open(stateDir) },
		Tools:             tools.Registry(),
		SocketDir:         socketDir,
		AllowLoopbackHTTP: a.AllowLoopbackHTTP,
		ProfilesDir:       a.ProfilesDir,
		StateDir:          a.StateDir,
		// The file tools never reach the run dir (rootfs skeleton,
		// containers), our binaries, nor what the caller adds (the skills,
		// the config), whatever a skill's globs say.
		ReservedDirs:  append(reservedDirs(a.Sandbox.RunDir), a.ExtraReserved...),
		Log:           a.Log,
		AllowDegraded: a.AllowDegraded,
	}
	closeAll = func() {
		if sup.Memory != nil {
			sup.Memory.Close()
		}
		// The runner's helper ends while the store makes its last
		// writes durable.
		done := make(chan struct{})
		go func() { defer close(done); closeRunner() }()
		store.Close()
		<-done
	}
	return sup, store, closeAll, nil
}
