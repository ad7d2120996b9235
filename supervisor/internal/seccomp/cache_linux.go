package seccomp

import (
	"slices"
	"sync"
	"sync/atomic"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// profileCache keeps, per profile path, the config converted from the bytes
// that path held when it last passed the checks, and their SHA-256.
// LoadProfileHashed reads the file on every start and uses the entry only
// when the bytes it just read hash the same: an edit, a swap for another
// file or for an invalid profile is seen at the next start, and the hash in
// the audit is always that of the bytes read. What is saved is the decoding,
// the key walk, libseccomp's lookup of every syscall name and specconv.
type profileCache struct {
	mu sync.Mutex
	m  map[string]cachedProfile
	// checked counts the profiles checked in full (the tests read it).
	checked atomic.Int64
}

type cachedProfile struct {
	sum [32]byte
	cfg *configs.Seccomp // read-only once cached
}

// maxCachedProfiles bounds the cache; a daemon uses a handful of profiles.
const maxCachedProfiles = 64

var profiles profileCache

// get returns the config cached for path when it was built from bytes
// hashing to sum, else nil. The result is shared: LoadProfileHashed hands
// out copies, LoadProfileShared this one, to callers that only read it.
func (c *profileCache) get(path string, sum [32]byte) *configs.Seccomp {
	c.mu.Lock()
	e, ok := c.m[path]
	c.mu.Unlock()
	if !ok || e.sum != sum {
		return nil
	}
	return e.cfg
}

// put records cfg, checked from bytes hashing to sum, as path's profile.
func (c *profileCache) put(path string, sum [32]byte, cfg *configs.Seccomp) {
	c.checked.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cachedProfile{}
	}
	if _, ok := c.m[path]; !ok && len(c.m) >= maxCachedProfiles {
		for p := range c.m { // any one: a miss only costs a check
			delete(c.m, p)
			break
		}
	}
	c.m[path] = cachedProfile{sum: sum, cfg: cfg}
}

// forget drops path's entry (its current bytes failed the checks).
func (c *profileCache) forget(path string) {
	c.checked.Add(1)
	c.mu.Lock()
	delete(c.m, path)
	c.mu.Unlock()
}

// cloneSeccomp deep-copies cfg, so that no caller can change the cached
// profile another sandbox is built from.
func cloneSeccomp(cfg *configs.Seccomp) *configs.Seccomp {
	out := *cfg
	out.Architectures = slices.Clone(cfg.Architectures)
	out.Flags = slices.Clone(cfg.Flags)
	out.DefaultErrnoRet = clonePtr(cfg.DefaultErrnoRet)
	if cfg.Syscalls != nil {
		out.Syscalls = make([]*configs.Syscall, len(cfg.Syscalls))
		for i, s := range cfg.Syscalls {
			c := *s
			c.ErrnoRet = clonePtr(s.ErrnoRet)
			if s.Args != nil {
				c.Args = make([]*configs.Arg, len(s.Args))
				for j, a := range s.Args {
					arg := *a
					c.Args[j] = &arg
				}
			}
			out.Syscalls[i] = &c
		}
	}
	return &out
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
