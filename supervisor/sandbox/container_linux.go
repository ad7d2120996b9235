package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"

	"cyberos.dev/cgroups"
	"cyberos.dev/supervisor/internal/seccomp"
	"cyberos.dev/supervisor/spawn"
)

// Check loads the seccomp profile the spec names and says what Start will
// enforce.
func (r *LinuxRunner) Check(spec Spec) (Containment, error) {
	sc, profileHash, err := seccomp.LoadProfileShared(spec.ProfilesDir, spec.SeccompProfile)
	if err != nil {
		return Containment{}, err
	}
	if spec.Recorder == nil {
		if _, err := seccomp.ProgramFor(profileHash, sc); err != nil && !errors.Is(err, seccomp.ErrUnsupportedProgram) {
			return Containment{}, fmt.Errorf("%w: %s: %w", ErrProfile, spec.SeccompProfile, err)
		}
	}
	_, cont := r.config(spec, nil)
	r.leaseMu.Lock()
	if l, ok := r.leases[spec.ID]; ok {
		l.identity(r.nsOwner(l)).Describe(&cont)
	}
	r.leaseMu.Unlock()
	cont.Seccomp = seccompSummary(spec.SeccompProfile)
	cont.SeccompProfileHash = profileHash
	planLandlock(r.landlockABI, r.landlockErr, sc, spec.SeccompProfile).apply(&cont)
	if spec.Recorder != nil {
		cont.Seccomp += recordingNote
	}
	return cont, nil
}

// recordingNote marks the containment of a recording run.
const recordingNote = "; RECORDING: allowed calls are reported, then let through"

func seccompSummary(profile string) string {
	return fmt.Sprintf("%s (allowlist, native architecture only)", profile)
}

// Start creates the container for spec and starts the skill in it: the
// same two steps as a warm sandbox (prewarm, then activate), back to back,
// so both kinds of start run one code path.
func (r *LinuxRunner) Start(spec Spec) (Process, error) {
	start := time.Now()
	p, err := r.prewarm(spec, start)
	if err != nil {
		return nil, err
	}
	env := spec.Env
	if spec.Network != nil {
		more, err := p.network(spec.Network)
		if err != nil {
			return nil, p.abort(fmt.Errorf("sandbox network: %w", err))
		}
		env = append(slices.Clip(env), more...)
	}
	if err := p.activate(Activation{Env: env, Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr, Pipes: spec.Pipes, Deadline: spec.Deadline}, start); err != nil {
		return nil, p.abort(err)
	}
	return p, nil
}

// Prewarm makes the sandbox for spec without its invocation: Env, stdio and
// Deadline are ignored (Activate brings them), Recorder must be nil.
func (r *LinuxRunner) Prewarm(spec Spec) (Warm, error) {
	if spec.Recorder != nil {
		return nil, errors.New("sandbox: a recording run is never prewarmed")
	}
	if spec.Network != nil {
		return nil, errors.New("sandbox: a sandbox with a Network hook is never prewarmed")
	}
	spec.Env, spec.Stdin, spec.Stdout, spec.Stderr, spec.Pipes, spec.Deadline = nil, nil, nil, nil, nil, 0
	return r.prewarm(spec, time.Now())
}

// prewarm creates the container and starts its init, which waits on its
// control pipe for the invocation (activate).
func (r *LinuxRunner) prewarm(spec Spec, start time.Time) (*linuxProcess, error) {
	if err := r.prepareRootfs(); err != nil {
		return nil, fmt.Errorf("sandbox rootfs: %w", err)
	}
	sc, profileHash, err := seccomp.LoadProfileHashed(spec.ProfilesDir, spec.SeccompProfile)
	if err != nil {
		return nil, err
	}
	if spec.SeccompProfileHash != "" && profileHash != spec.SeccompProfileHash {
		return nil, fmt.Errorf("%w: %s changed since the invocation was checked (sha256 %s, now %s)", ErrProfile, spec.SeccompProfile, spec.SeccompProfileHash, profileHash)
	}
	lock, ok := tryLock(r.lockPath(spec.ID))
	if !ok {
		return nil, fmt.Errorf("sandbox %s: already running", spec.ID)
	}
	p := &linuxProcess{runner: r, id: spec.ID, lock: lock, started: start, spec: spec}
	if len(spec.Binds) > 0 {
		if err := r.boundRootfs(spec); err != nil {
			return nil, p.abort(fmt.Errorf("sandbox rootfs: %w", err))
		}
	}
	var holder *nsHolder
	defer func() { holder.stop() }()
	if r.userNS {
		if p.lease, err = r.takeLease(spec.ID); err != nil {
			return nil, p.abort(err)
		}
		if r.ownedNS {
			if holder, err = startNSHolder(r.cfg.InitBinary, p.lease.start); err != nil {
				return nil, p.abort(fmt.Errorf("sandbox start: %w", err))
			}
		}
	}
	cfg, cont := r.config(spec, p.lease)
	if holder != nil {
		for i := range cfg.Namespaces {
			if cfg.Namespaces[i].Type == configs.NEWUSER {
				cfg.Namespaces[i].Path = holder.path()
			}
		}
	}
	if holder != nil {
		p.initRlimits = moveRlimitsToInit(cfg)
	}
	if spec.Recorder == nil {
		// cyberos-init loads the compiled profile before anything else
		// (withSeccomp): the container's Go init has no filter to build.
		// What Compile does not handle, libcontainer's init loads as before.
		p.filter, err = seccomp.ProgramFor(profileHash, sc)
		switch {
		case errors.Is(err, seccomp.ErrUnsupportedProgram):
			cfg.Seccomp = sc
		case err != nil:
			return nil, p.abort(fmt.Errorf("%w: %s: %w", ErrProfile, spec.SeccompProfile, err))
		}
	}
	cont.Seccomp = seccompSummary(spec.SeccompProfile)
	cont.SeccompProfileHash = profileHash
	ll := planLandlock(r.landlockABI, r.landlockErr, sc, spec.SeccompProfile)
	ll.Binds = spec.Binds
	ll.apply(&cont)
	p.cont, p.landlock = cont, ll
	if spec.Recorder != nil {
		if p.notify, err = startNotifyListener(filepath.Join(r.lockDir(), spec.ID+".notify.sock"), spec.Recorder); err != nil {
			return nil, p.abort(err)
		}
		cfg.Seccomp = seccomp.RecordingConfig(sc, p.notify.path)
		p.cont.Seccomp += recordingNote
	}
	helper, err := r.spawner()
	if err != nil {
		return nil, p.abort(fmt.Errorf("sandbox create: %w", err))
	}
	// cyberos-init reports the skill's wait status on fd 3 (its ExtraFiles[0]).
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, p.abort(fmt.Errorf("sandbox status pipe: %w", err))
	}
	p.status = statusR
	defer statusW.Close()
	// The invocation comes later on fd 4 (cyberos-init --control); stdio
	// are pipes of ours, connected to the invocation's readers and writers
	// by activate.
	child, err := p.openPipes()
	if err != nil {
		return nil, p.abort(fmt.Errorf("sandbox pipes: %w", err))
	}
	defer child.close()
	filter, err := p.filterFile()
	if err != nil {
		return nil, p.abort(err)
	}
	defer filter.Close()
	extra := []*os.File{statusW, child.control} // fds 3 and 4 (cyberos-init's CONTROL_FD)
	if filter != nil {
		extra = append(extra, filter) // initFilterFD
	}
	uid := r.skillUID()
	init := &spawn.Proc{
		Args:       append(withControl(withSeccomp(withInitRlimits(ll.initArgs(false), p.initRlimits), initFilterFD, p.filter)), filepath.Join(SkillMount, spec.Entrypoint)),
		ExtraFiles: extra,
		Env:        []string{"PATH=/usr/bin:/bin"},
		UID:        uid,
		GID:        uid,
		Cwd:        "/tmp",
		Stdin:      child.stdin,
		Stdout:     child.stdout,
		Stderr:     child.stderr,
		Hold:       holdInit,
	}
	c, proc, err := helper.Create(r.stateRoot(), spec.ID, cfg, init)
	p.created = c != nil
	// A helper that died (or was killed, wedged) during the create may
	// have made the cgroup and started the init: cleanup ends them there.
	p.orphaned = !p.created && errors.Is(err, spawn.ErrHelperGone)
	if err != nil {
		return nil, p.abort(err)
	}
	// Before the skill makes a socket: on cgroup v1 its TCP buffers count
	// against its memory limit only from here on
	// (TestHostileTCPBuffers).
	switch err := cgroups.LimitSocketMemory(p.cgroupPath(), spec.MemoryMB<<20); {
	case errors.Is(err, cgroups.ErrNoSocketLimit):
		p.cont.NotEnforced = append(p.cont.NotEnforced, "TCP buffers within memory.max: "+err.Error())
	case err != nil:
		return nil, p.abort(fmt.Errorf("sandbox start: %w", err))
	}
	// The sandbox's processes keep its user namespace alive now.
	holder.stop()
	holder = nil
	p.proc = proc
	return p, nil
}

// holdInit makes prewarm leave the init before its exec (spawn's
// procSpec.Hold); a test sets it.
var holdInit bool

// Activate hands the invocation to the waiting init, which starts the
// skill. A sandbox is activated at most once. If its init died while it
// waited (killed, OOM), nothing of the invocation has run: the sandbox is
// made again, cold, under the same id and in the same id range (the
// identity its invocation recorded), and the returned Process is that one,
// with Containment().Start StartCold.
func (p *linuxProcess) Activate(a Activation) (Process, error) {
	t0 := time.Now()
	err := p.activate(a, t0)
	if errors.Is(err, errInitGone) {
		q, rerr := p.remake()
		if rerr != nil {
			return nil, fmt.Errorf("sandbox: its init died before activation, and making it again failed: %w", rerr)
		}
		q.cont.Start = StartCold
		p, err = q, q.activate(a, t0)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// remake destroys p, whose init is dead, and makes the sandbox again from
// its spec in the same range. p's Close is then a no-op.
func (p *linuxProcess) remake() (*linuxProcess, error) {
	r, lease := p.runner, p.lease
	p.lease = nil
	var err error
	p.once.Do(func() { err = p.cleanup() })
	p.control = nil // closed by cleanup: p is never activated now
	if err != nil {
		p.lease = lease // not destroyed: the range stays held
		return nil, err
	}
	r.leaseMu.Lock()
	r.leases[p.id] = lease // a reservation, which prewarm takes over
	r.leaseMu.Unlock()
	q, err := r.prewarm(p.spec, time.Now())
	if err != nil {
		r.Release(p.id)
		return nil, err
	}
	return q, nil
}

// errInitGone: a sandbox's init died before its activation; nothing of the
// invocation was sent to it.
var errInitGone = errors.New("sandbox: its init is gone; it cannot be activated")

// Close kills what is left, then destroys the container (cgroup and state)
// and releases the lock. Order matters: Signal(SIGKILL) → reap → Destroy;
// Destroy on a running container may refuse (DESIGN.md).
func (p *linuxProcess) Close() error {
	var err error
	p.once.Do(func() { err = p.cleanup() })
	return err
}

// abort cleans up after a failed Start and returns err, with the cleanup's
// error added when the container could not be removed.
func (p *linuxProcess) abort(err error) error {
	if cerr := p.cleanup(); cerr != nil {
		return fmt.Errorf("%w (cleanup: %w)", err, cerr)
	}
	return err
}

func (p *linuxProcess) cleanup() error {
	var errs []error
	p.collectReap()
	if p.created {
		c, err := p.container()
		if err == nil {
			// After the init's reap (Wait's, or collected above) the
			// container is stopped: no status call, a helper round trip.
			// Destroy fails if anything still sits in the cgroup, and the
			// kill below runs.
			if !p.reaped {
				if st, err := c.Status(); err != nil || st != libcontainer.Stopped {
					_ = p.KillAll()
					if p.proc != nil {
						_, _ = p.proc.Reap()
					}
				}
			}
			if err = c.Destroy(); err != nil {
				_ = cgroups.KillAll(p.cgroupPath())
				err = c.Destroy()
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("destroy %s: %w", p.id, err))
		}
	}
	if p.orphaned {
		if err := cgroups.Remove(p.cgroupPath()); err != nil {
			errs = append(errs, fmt.Errorf("remove %s after its helper died: %w", p.id, err))
		}
	}
	_ = os.RemoveAll(filepath.Join(p.runner.stateRoot(), p.id))
	if len(p.spec.Binds) > 0 && len(errs) == 0 {
		// Only once the container is gone: its mounts sit on this copy.
		_ = os.RemoveAll(p.runner.rootfsFor(p.spec))
	}
	_ = os.Remove(p.runner.lockPath(p.id))
	if p.lock != nil {
		p.lock.Close()
	}
	for _, f := range []*os.File{p.status, p.control, p.lifeline, p.stdin, p.stdout, p.stderr} {
		if f != nil {
			f.Close()
		}
	}
	if p.notify != nil {
		p.notify.Close()
	}
	// Every process of the range is gone (reaped above): it may be reused.
	// A sandbox that could not be destroyed keeps its range.
	if len(errs) == 0 {
		p.lease.release()
	}
	return errors.Join(errs...)
}

// CleanLeftovers destroys containers and cgroups whose supervisor is gone:
// a container's lock file is held (flock) by the process running it, so a
// lock we can take belongs to a crashed run. It returns the ids cleaned.
func (r *LinuxRunner) CleanLeftovers() ([]string, error) {
	entries, err := os.ReadDir(r.stateRoot())
	if err != nil {
		return nil, fmt.Errorf("sandbox leftovers: %w", err)
	}
	var cleaned []string
	for _, e := range entries {
		id := e.Name()
		lock, ok := tryLock(r.lockPath(id))
		if !ok {
			continue // a live supervisor owns it
		}
		helper, err := r.spawner()
		if err != nil {
			lock.Close()
			return cleaned, fmt.Errorf("sandbox leftovers: %w", err)
		}
		c := helper.Container(r.stateRoot(), id)
		if err := c.Signal(unix.SIGKILL); !errors.Is(err, spawn.ErrHelperGone) {
			if err := c.Destroy(); err != nil {
				_ = cgroups.KillAll(r.cgroupParent + "/" + id)
				_ = c.Destroy()
			}
		}
		_ = os.RemoveAll(filepath.Join(r.stateRoot(), id))
		_ = os.RemoveAll(filepath.Join(r.boundRoots(), id))
		_ = os.Remove(r.lockPath(id))
		lock.Close()
		cleaned = append(cleaned, id)
	}
	// A root copy whose container state is already gone (its supervisor
	// died between the two removals).
	if ents, err := os.ReadDir(r.boundRoots()); err == nil {
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(r.stateRoot(), e.Name())); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if lock, ok := tryLock(r.lockPath(e.Name())); ok {
				_ = os.RemoveAll(filepath.Join(r.boundRoots(), e.Name()))
				_ = os.Remove(r.lockPath(e.Name()))
				lock.Close()
			}
		}
	}
	ids, err := cgroups.RemoveLeftovers(r.cgroupParent, func(id string) bool {
		lock, ok := tryLock(r.lockPath(id))
		if ok {
			lock.Close()
			_ = os.Remove(r.lockPath(id))
		}
		return !ok
	})
	cleaned = append(cleaned, ids...)
	if err != nil {
		return cleaned, fmt.Errorf("sandbox leftovers: %w", err)
	}
	return cleaned, nil
}

// tryLock opens and exclusively flocks path without blocking.
func tryLock(path string) (*os.File, bool) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil || !stillAt(f, path) {
		f.Close()
		return nil, false
	}
	return f, true
}

// stillAt reports whether f is the file at path. A sandbox's lock file is
// unlinked when it ends; a lock taken on the unlinked file (opened just
// before) guards nothing, and the sandbox made again under that id (a warm
// one whose init died) holds a new file at path: a cleaner must not take
// that one for a leftover's.
func stillAt(f *os.File, path string) bool {
	var have, at unix.Stat_t
	return unix.Fstat(int(f.Fd()), &have) == nil && unix.Lstat(path, &at) == nil && have.Dev == at.Dev && have.Ino == at.Ino
}
