package config

import (
	"fmt"
	"runtime"

	"cyberos.dev/supervisor"
)

// Limits are the operator's ceilings on what a frontmatter may ask for
// (x-memory-mb, x-pids-max, x-cpu): an invocation asking for more is
// refused before anything runs, naming the key, the value and the ceiling.
type Limits struct {
	MaxMemoryMB int64   `yaml:"max_memory_mb"`
	MaxPids     int64   `yaml:"max_pids"`
	MaxCPU      float64 `yaml:"max_cpu"`
}

// Default ceilings: a few times the defaults (512 MiB, 64 pids), and no
// more CPU than the host has.
const (
	DefaultMaxMemoryMB = 4096
	DefaultMaxPids     = 1024
)

// DefaultLimits are the ceilings where the config sets none: the host's
// CPU count is the CPU ceiling.
func DefaultLimits() Limits {
	return Limits{MaxMemoryMB: DefaultMaxMemoryMB, MaxPids: DefaultMaxPids, MaxCPU: float64(runtime.NumCPU())}
}

// Ceilings are the limits as the supervisor applies them.
func (l Limits) Ceilings() supervisor.Ceilings {
	return supervisor.Ceilings{MaxMemoryMB: l.MaxMemoryMB, MaxPids: l.MaxPids, MaxCPU: l.MaxCPU}
}

// validateLimits checks the ceilings' ranges, and that each allows the
// default a skill gets where its frontmatter is silent.
func (c *Config) validateLimits() error {
	l, d := c.Limits, c.Defaults
	bad := func(key, why string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, key, fmt.Sprintf(why, a...))
	}
	switch {
	case l.MaxMemoryMB < 16 || l.MaxMemoryMB > 65536:
		return bad("limits.max_memory_mb", "must be 16..65536, got %d", l.MaxMemoryMB)
	case l.MaxPids < 8 || l.MaxPids > 4096:
		return bad("limits.max_pids", "must be 8..4096, got %d", l.MaxPids)
	case !(l.MaxCPU > 0 && l.MaxCPU <= 64): // NaN fails too
		return bad("limits.max_cpu", "must be more than 0, up to 64 CPUs, got %v", l.MaxCPU)
	case l.MaxMemoryMB < d.MemoryMB:
		return bad("limits.max_memory_mb", "%d is below defaults.memory_mb (%d)", l.MaxMemoryMB, d.MemoryMB)
	case l.MaxPids < d.PidsMax:
		return bad("limits.max_pids", "%d is below defaults.pids_max (%d)", l.MaxPids, d.PidsMax)
	case l.MaxCPU < d.CPU:
		return bad("limits.max_cpu", "%v is below defaults.cpu (%v)", l.MaxCPU, d.CPU)
	case d.CPU == 0 && l.MaxCPU < float64(runtime.NumCPU()):
		return bad("limits.max_cpu", "%v is below defaults.cpu 0 (no quota: all %d CPUs of this host)", l.MaxCPU, runtime.NumCPU())
	}
	return nil
}
