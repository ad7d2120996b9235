// Package fleet holds what the hosts of a fleet share on PostgreSQL: the
// schema, migrated by the tables' owner (migrate.go); each host's audit rows,
// shipped from its own journal (ship.go); PostgreSQL as the witness of each
// host's chain (witness.go); the auditor's reads across hosts (read.go); and
// a daemon's check that its role is no more than a host's (runtime.go). The
// journal stays each host's first durable write; PostgreSQL is its copy.
// Tenant memory on PostgreSQL is package memory's.
package fleet

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed migrations/*.sql
var migrations embed.FS

// migrateLock is the advisory lock key under which one daemon at a time
// migrates (hosts of a fleet start together).
const migrateLock = 0x637962726f730001 // "cybros" + 1

// ErrSchemaTooNew: the database was migrated by a newer build than this one.
var ErrSchemaTooNew = fmt.Errorf("%w: the database schema is newer than this build", ErrSetup)

type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	files, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, f := range files {
		base := path.Base(f)
		n, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil || n < 1 {
			return nil, fmt.Errorf("fleet: migration %s: name must start with its version number", base)
		}
		b, err := migrations.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{n, strings.TrimSuffix(base, ".sql"), string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("fleet: migrations must be numbered 1, 2, …: %s is number %d", m.name, i+1)
		}
	}
	return out, nil
}

// Migrate brings the database to this build's schema: every migration
// newer than the recorded version runs in its own transaction, recorded in
// cyberos_schema, under an advisory lock so that two runs apply each
// migration once. A database newer than this build is refused. It runs as
// the tables' owner (`cyberos fleet migrate`), never as a daemon, which
// only checks the version (CheckRuntime).
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := loadMigrations()
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("fleet: migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("fleet: migrate: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(migrateLock)) //nolint:errcheck // the session ends the lock too
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS cyberos_schema (
		version    integer PRIMARY KEY,
		name       text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("fleet: migrate: %w", err)
	}
	var have int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM cyberos_schema`).Scan(&have); err != nil {
		return fmt.Errorf("fleet: migrate: %w", err)
	}
	if have > len(ms) {
		return fmt.Errorf("%w: version %d, this build knows %d", ErrSchemaTooNew, have, len(ms))
	}
	for _, m := range ms[have:] {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO cyberos_schema (version, name) VALUES ($1, $2)`, m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("fleet: migration %s: %w", m.name, err)
		}
	}
	return nil
}

// SchemaVersion is the version this build migrates to.
func SchemaVersion() int {
	ms, _ := loadMigrations()
	return len(ms)
}
