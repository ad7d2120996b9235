package supervisor

import (
	"fmt"
	"runtime"

	"cyberos.dev/policy"
)

// ErrOverCeiling: the frontmatter (or the default it gets) asks for more
// memory, pids or CPU than the operator allows; nothing ran.
// errors.Is(err, ErrInvalidSkill) holds for it.
var ErrOverCeiling = fmt.Errorf("%w: over the operator's ceiling", ErrInvalidSkill)

// Ceilings are the operator's bounds on a sandbox's limits (the daemon
// config's `limits`); a frontmatter may ask for less, never more. Zero: no
// ceiling.
type Ceilings struct {
	MaxMemoryMB int64
	MaxPids     int64
	MaxCPU      float64
}

// check refuses pol, the frontmatter with the defaults applied, where a
// limit is over its ceiling. asked is the frontmatter as written: an x-cpu
// over the ceiling is refused there, before the operator's default quota
// would lower it. A CPU of 0 (no quota) counts as every CPU of the host.
func (c Ceilings) check(asked, pol *policy.Policy) error {
	over := func(key string, v any, ceiling string, max any) error {
		how := ""
		if !asked.Given(key) {
			how = " (the default where the frontmatter is silent)"
		}
		return fmt.Errorf("%w: %s: %v%s is over %s (%v)", ErrOverCeiling, key, v, how, ceiling, max)
	}
	if c.MaxMemoryMB > 0 && pol.MemoryMB > c.MaxMemoryMB {
		return over("x-memory-mb", pol.MemoryMB, "limits.max_memory_mb", c.MaxMemoryMB)
	}
	if c.MaxPids > 0 && pol.PidsMax > c.MaxPids {
		return over("x-pids-max", pol.PidsMax, "limits.max_pids", c.MaxPids)
	}
	if c.MaxCPU > 0 {
		if asked.Given("x-cpu") && asked.CPU > c.MaxCPU {
			return over("x-cpu", asked.CPU, "limits.max_cpu", c.MaxCPU)
		}
		if pol.CPU > c.MaxCPU || (pol.CPU == 0 && float64(runtime.NumCPU()) > c.MaxCPU) {
			return over("x-cpu", cpuString(pol.CPU), "limits.max_cpu", c.MaxCPU)
		}
	}
	return nil
}

func cpuString(cpu float64) string {
	if cpu == 0 {
		return "0 (no quota)"
	}
	return fmt.Sprint(cpu)
}
