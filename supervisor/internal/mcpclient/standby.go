package mcpclient

import (
	"log/slog"
	"sync"
	"time"

	"cyberos.dev/supervisor/sandbox"
)

// Standby keeps one sandbox made ahead for a stdio server's next start,
// as the warm pool does for skills: its namespaces, cgroup, mounts,
// limits and seccomp filter are in place and its init waits for the
// server's environment and stdio. A start takes it (Sandboxed.Standby)
// and a new one is made behind it; a start that finds none ready makes
// its own sandbox. One Standby serves every instance of a server (each
// tenant's, each restart). A server with egress has none: its proxy is
// set up in its network namespace as it starts.
type Standby struct {
	runner sandbox.Runner
	server string
	spec   sandbox.Spec // the server's sandbox; ID, env and stdio unset
	log    *slog.Logger

	mu     sync.Mutex
	ready  sandbox.Warm // nil while none is ready
	timer  *time.Timer  // the next refill, after a take
	making bool
	closed bool
	made   sync.WaitGroup // the refill in progress, if any
}

// NewStandby makes the first standby sandbox of server (spec, named
// mcp-<server>-<ulid>) in the background. It returns nil when runner
// cannot make sandboxes ahead (not a sandbox.Warmer) or spec has a
// Network hook.
func NewStandby(runner sandbox.Runner, server string, spec sandbox.Spec, log *slog.Logger) *Standby {
	if _, ok := runner.(sandbox.Warmer); !ok || spec.Network != nil {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Standby{runner: runner, server: server, spec: spec, log: log}
	s.mu.Lock()
	s.refillLocked()
	s.mu.Unlock()
	return s
}

// standbyRefill is how long after a take the next standby sandbox is
// made: not beside the server starting in the one taken (node's and
// python's starts use every CPU they get).
const standbyRefill = time.Second

// take returns the ready sandbox, if one is (and alive), and has the next
// one made standbyRefill later; nil when none is ready.
func (s *Standby) take() sandbox.Warm {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.ready
	s.ready = nil
	if w != nil && !w.Alive() {
		s.discard(w)
		w = nil
	}
	if s.timer == nil && !s.closed {
		s.timer = time.AfterFunc(standbyRefill, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.timer = nil
			s.refillLocked()
		})
	}
	return w
}

// refillLocked starts making a standby sandbox unless one is ready or
// being made (s.mu held).
func (s *Standby) refillLocked() {
	if s.closed || s.ready != nil || s.making {
		return
	}
	s.making = true
	s.made.Add(1)
	go func() {
		defer s.made.Done()
		w, err := s.make()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.making = false
		switch {
		case err != nil:
			// The next start makes its own sandbox and tries again.
			s.log.Warn("mcp: standby sandbox not made; the server's next start makes its own", "server", s.server, "err", err)
		case s.closed:
			s.discard(w)
		default:
			s.ready = w
		}
	}()
}

// make creates one standby sandbox under an id of its own, the host
// identity reserved for it.
func (s *Standby) make() (sandbox.Warm, error) {
	spec := s.spec
	spec.ID = sandboxID(s.server)
	if _, err := s.runner.Reserve(spec.ID); err != nil {
		return nil, err
	}
	defer s.runner.Release(spec.ID) // a no-op once Prewarm took the identity over
	return s.runner.(sandbox.Warmer).Prewarm(spec)
}

// discard destroys a standby sandbox never activated and gives its
// identity back.
func (s *Standby) discard(w sandbox.Warm) {
	_ = w.Close()
	s.runner.Release(w.ID())
}

// Close destroys the ready sandbox, and the one being made once it is;
// no more are made.
func (s *Standby) Close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.closed = true
	w := s.ready
	s.ready = nil
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.mu.Unlock()
	if w != nil {
		s.discard(w)
	}
	s.made.Wait()
}

// Ready reports whether a standby sandbox is ready to be taken.
func (s *Standby) Ready() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready != nil
}
