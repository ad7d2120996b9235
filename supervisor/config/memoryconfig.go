package config

import (
	"fmt"
	"time"

	"cyberos.dev/memory"
)

// Memory bounds each tenant's share of the memory store on this host
// (memory.Limits): the store's connections and CPU serve every tenant.
type Memory struct {
	// TenantConcurrency is how many memory calls of one tenant run at
	// once; more wait, at most StatementTimeout.
	TenantConcurrency int `yaml:"tenant_concurrency"`
	// StatementTimeout bounds one memory call in the store.
	StatementTimeout MemoryTimeout `yaml:"statement_timeout"`
	// TenantWritesPerSecond and TenantWriteBurst are a token bucket on
	// each tenant's MemoryEmit calls on this host.
	TenantWritesPerSecond float64 `yaml:"tenant_writes_per_second"`
	TenantWriteBurst      int     `yaml:"tenant_write_burst"`
}

// MemoryTimeout is memory.statement_timeout.
type MemoryTimeout time.Duration

// UnmarshalText parses a duration, naming the key on error.
func (m *MemoryTimeout) UnmarshalText(b []byte) error {
	d, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("memory.statement_timeout: %q is not a duration (e.g. 5s)", b)
	}
	*m = MemoryTimeout(d)
	return nil
}

// defaultMemory is memory.DefaultLimits as config.
func defaultMemory() Memory {
	l := memory.DefaultLimits()
	return Memory{TenantConcurrency: l.TenantConcurrency, StatementTimeout: MemoryTimeout(l.StatementTimeout),
		TenantWritesPerSecond: l.WritesPerSecond, TenantWriteBurst: l.WriteBurst}
}

// Limits is the block as the store takes it.
func (m Memory) Limits() memory.Limits {
	return memory.Limits{TenantConcurrency: m.TenantConcurrency, StatementTimeout: time.Duration(m.StatementTimeout),
		WritesPerSecond: m.TenantWritesPerSecond, WriteBurst: m.TenantWriteBurst}
}

func (m Memory) validate() error {
	bad := func(key, why string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrConfig, key, fmt.Sprintf(why, a...))
	}
	switch d := time.Duration(m.StatementTimeout); {
	case m.TenantConcurrency < 1 || m.TenantConcurrency > 1024:
		return bad("memory.tenant_concurrency", "must be 1..1024, got %d", m.TenantConcurrency)
	case d < 10*time.Millisecond || d > 10*time.Minute:
		return bad("memory.statement_timeout", "must be 10ms..10m, got %v", d)
	case !(m.TenantWritesPerSecond > 0) || m.TenantWritesPerSecond > 1e6:
		return bad("memory.tenant_writes_per_second", "must be over 0 and at most 1000000, got %v", m.TenantWritesPerSecond)
	case m.TenantWriteBurst < 1 || m.TenantWriteBurst > 1_000_000:
		return bad("memory.tenant_write_burst", "must be 1..1000000, got %d", m.TenantWriteBurst)
	}
	if err := m.Limits().Validate(); err != nil { // the store's own ranges, should they differ
		return fmt.Errorf("%w: memory: %w", ErrConfig, err)
	}
	return nil
}
