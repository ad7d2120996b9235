package memory

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"cyberos.dev/fleet"
	"cyberos.dev/internal/testutil"
)

// pgServer is this package's PostgreSQL, started by TestMain when the
// machine has one; each PostgreSQL store gets a database of its own.
var (
	pgServer  *testutil.Postgres
	pgMissing error
	pgDBs     atomic.Int64
	pgRoleMu  sync.Mutex
	pgRole    bool
	pgSuper   sync.Map // *Store → superuser DSN of its database
)

// ownerRole owns the stores' databases and migrates them; each store
// connects as a role of its own in cyberos_runtime, as a daemon does
// (docs/fleet.md): it owns nothing and row-level security holds for it.
const ownerRole = "cyberos_owner"

func TestMain(m *testing.M) {
	var stop func()
	pgServer, stop, pgMissing = testutil.LaunchPostgres()
	code := m.Run()
	if stop != nil {
		stop()
	}
	os.Exit(code)
}

// backends runs f on a fresh store of each backend: SQLite in a state dir,
// and PostgreSQL as the fleet runs it. The same assertions hold for both.
func backends(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("sqlite", func(t *testing.T) {
		s, _ := newStore(t)
		f(t, s)
	})
	t.Run("postgres", func(t *testing.T) { f(t, newPGStore(t)) })
}

// newPGStore makes a database owned by ownerRole, migrates it as that
// role, and opens the store on it as a runtime role bound to a host, as a
// daemon does.
func newPGStore(t *testing.T) *Store { return newPGStoreB(t) }

// newPGStoreB is newPGStore for a benchmark too.
func newPGStoreB(t testing.TB) *Store {
	t.Helper()
	testutil.RequiresPostgres(t, pgMissing)
	pg := pgServer.For(t)
	pgRoleMu.Lock()
	if !pgRole {
		pg.Psql("postgres", "CREATE ROLE "+ownerRole+" LOGIN CREATEROLE")
		pgRole = true
	}
	pgRoleMu.Unlock()
	db := fmt.Sprintf("mem%d", pgDBs.Add(1))
	pg.Psql("postgres", "CREATE DATABASE "+db+" OWNER "+ownerRole)
	dsn := func(role string) string {
		return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, pg.Port, db)
	}
	owner, err := pgxpool.New(context.Background(), dsn(ownerRole))
	if err != nil {
		t.Fatal(err)
	}
	err = fleet.Migrate(context.Background(), owner)
	owner.Close()
	if err != nil {
		t.Fatal(err)
	}
	host := db + "_host"
	pg.Psql("postgres", "CREATE ROLE "+host+" LOGIN IN ROLE cyberos_runtime")
	pg.Psql(db, "INSERT INTO cyberos_hosts (role_name, host_id) VALUES ('"+host+"', '"+host+"')")
	pool, err := pgxpool.New(context.Background(), dsn(host))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := OpenPostgres(pool, func(ctx context.Context) error { return fleet.CheckRuntime(ctx, pool, host) })
	t.Cleanup(func() { s.Close() })
	pgSuper.Store(s, db)
	return s
}

// sq is a SQLite store's database.
func sq(s *Store) *sql.DB { return s.b.(*sqliteDB).db }

// sqliteIntegrity checks a SQLite store's full-text index.
func sqliteIntegrity(t *testing.T, s *Store) {
	t.Helper()
	if b, ok := s.b.(*sqliteDB); ok {
		if _, err := b.db.Exec(`INSERT INTO docs_fts (docs_fts) VALUES ('integrity-check')`); err != nil {
			t.Fatal(err)
		}
	}
}

// countDocs counts every tenant's documents, past row-level security.
func countDocs(t *testing.T, s *Store) int {
	t.Helper()
	if b, ok := s.b.(*sqliteDB); ok {
		var n int
		if err := b.db.QueryRow(`SELECT count(*) FROM docs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	db, _ := pgSuper.Load(s)
	var n int
	fmt.Sscan(pgServer.For(t).Psql(db.(string), `SELECT count(*) FROM memory_docs`), &n)
	return n
}
