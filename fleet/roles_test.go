package fleet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"cyberos.dev/internal/testutil"
)

// fleetDB is a fleet's database set up as docs/fleet.md says: the tables'
// owner migrates it; each host's daemon connects as a login role of its
// own in cyberos_runtime, bound to its host id; the auditor reads as a
// member of cyberos_auditor.
type fleetDB struct {
	t     testing.TB
	pg    *testutil.Postgres
	name  string
	owner *pgxpool.Pool
}

// newFleetDB creates database name owned by the role fleet_owner (made
// once per server, with CREATEROLE for the group roles the migration
// makes) and migrates it as that role.
func newFleetDB(t testing.TB, pg *testutil.Postgres, name string) *fleetDB {
	t.Helper()
	db := &fleetDB{t: t, pg: pg, name: name, owner: ownerDB(t, pg, name)}
	if err := Migrate(context.Background(), db.owner); err != nil {
		t.Fatalf("migrate as the owner: %v", err)
	}
	return db
}

// ownerDB creates database name owned by fleet_owner, not migrated, and
// returns a pool on it as that role.
func ownerDB(t testing.TB, pg *testutil.Postgres, name string) *pgxpool.Pool {
	t.Helper()
	if pg.Psql("postgres", "SELECT count(*) FROM pg_roles WHERE rolname = 'fleet_owner'") == "0" {
		pg.Psql("postgres", "CREATE ROLE fleet_owner LOGIN CREATEROLE")
	}
	pg.Psql("postgres", "CREATE DATABASE "+name+" OWNER fleet_owner")
	return newPool(t, db2dsn(pg, "fleet_owner", name))
}

func db2dsn(pg *testutil.Postgres, role, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, pg.Port, db)
}

// hostRole is the login role of host id h in database db.
func hostRole(db, h string) string {
	return db + "_" + strings.NewReplacer("-", "_", ".", "_").Replace(h)
}

// host makes (once) host h's login role, bound to h, and returns a pool on
// it: what the daemon of host h connects as.
func (db *fleetDB) host(h string) *pgxpool.Pool {
	db.t.Helper()
	role := hostRole(db.name, h)
	if db.pg.Psql("postgres", "SELECT count(*) FROM pg_roles WHERE rolname = '"+role+"'") == "0" {
		db.pg.Psql("postgres", "CREATE ROLE "+role+" LOGIN IN ROLE cyberos_runtime")
		db.pg.Psql(db.name, "GRANT CONNECT ON DATABASE "+db.name+" TO "+role)
		db.pg.Psql(db.name, "INSERT INTO cyberos_hosts (role_name, host_id) VALUES ('"+role+"', '"+h+"')")
	}
	return newPool(db.t, db2dsn(db.pg, role, db.name))
}

// auditor returns a pool on a login role in cyberos_auditor.
func (db *fleetDB) auditor() *pgxpool.Pool {
	db.t.Helper()
	role := db.name + "_auditor"
	db.pg.Psql("postgres", "CREATE ROLE "+role+" LOGIN IN ROLE cyberos_auditor")
	return newPool(db.t, db2dsn(db.pg, role, db.name))
}

// Must show (issue 37, finding 3): the role a daemon runs as cannot lift
// the database's controls. It owns nothing: it cannot disable row-level
// security or the append-only triggers, drop a policy, turn triggers off
// for its session, take another role, or rebind itself to another host;
// it cannot update, delete or truncate a shipped row, read another host's
// rows or add one under another host's id, nor read another tenant's
// memory. What a daemon does (ship, memory) still works as that role.
func TestRuntimeRoleCannotLiftTheControls(t *testing.T) {
	pg := testutil.StartPostgres(t)
	db := newFleetDB(t, pg, "leastpriv")
	a, b := db.host("host-a"), db.host("host-b")
	stA, stB := newStore(t), newStore(t)
	emit(t, stA, "11111111-1111-1111-1111-111111111111", 3)
	emit(t, stB, "22222222-2222-2222-2222-222222222222", 2)
	ctx := context.Background()
	// The daemon's path: shipping, as the runtime role.
	for _, sh := range []*Shipper{{Pool: a, HostID: "host-a", Source: stA}, {Pool: b, HostID: "host-b", Source: stB}} {
		if err := sh.Flush(ctx); err != nil {
			t.Fatalf("ship as %s's runtime role: %v", sh.HostID, err)
		}
	}
	// And tenant memory, scoped by the transaction's tenant.
	inTenant := func(tenant string, fn func(tx pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, a, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('cyberos.tenant_id', $1, true)`, tenant); err != nil {
				return err
			}
			return fn(tx)
		})
	}
	const upsert = `INSERT INTO memory_docs (tenant_id, path, body, body_withheld, content_hash, trace_id, invocation_id, skill_id, updated_at, tsv)
		VALUES (current_setting('cyberos.tenant_id'), $1, 'x', false, repeat('0', 64), '', '', '', 0, to_tsvector('x'))
		ON CONFLICT (tenant_id, path) DO UPDATE SET body = excluded.body`
	for _, tenant := range []string{"tenant-1", "tenant-2"} {
		if err := inTenant(tenant, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, upsert, "notes/"+tenant)
			return err
		}); err != nil {
			t.Fatalf("memory upsert as the runtime role: %v", err)
		}
	}
	var seen []string
	if err := inTenant("tenant-1", func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, `SELECT path FROM memory_docs`)
		var err error
		seen, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}); err != nil || len(seen) != 1 || seen[0] != "notes/tenant-1" {
		t.Errorf("tenant-1 sees %v (%v), want only its own note", seen, err)
	}

	// The attacks, each as host A's daemon would run them.
	for _, q := range []string{
		`ALTER TABLE memory_docs DISABLE ROW LEVEL SECURITY`,
		`ALTER TABLE memory_docs NO FORCE ROW LEVEL SECURITY`,
		`DROP POLICY memory_docs_tenant ON memory_docs`,
		`ALTER TABLE audit_rows DISABLE ROW LEVEL SECURITY`,
		`DROP POLICY audit_rows_host_read ON audit_rows`,
		`ALTER TABLE audit_rows DISABLE TRIGGER audit_rows_append_only`,
		`ALTER TABLE audit_rows DISABLE TRIGGER ALL`,
		`DROP TRIGGER audit_rows_append_only ON audit_rows`,
		`SET session_replication_role = replica`,
		`UPDATE audit_rows SET payload = '{}' WHERE host_id = 'host-a' AND seq = 1`,
		`DELETE FROM audit_rows WHERE host_id = 'host-a' AND seq = 6`,
		`TRUNCATE audit_rows`,
		`DROP TABLE audit_rows`,
		`ALTER TABLE audit_rows RENAME TO audit_rows_old`,
		`INSERT INTO cyberos_hosts (role_name, host_id) VALUES (session_user, 'host-c')`,
		`UPDATE cyberos_hosts SET host_id = 'host-b' WHERE role_name = session_user`,
		`DELETE FROM cyberos_schema`,
		`SET ROLE cyberos_auditor`,
		`SET ROLE fleet_owner`,
		`SET SESSION AUTHORIZATION fleet_owner`,
		`GRANT cyberos_auditor TO ` + hostRole("leastpriv", "host-a"),
		`CREATE OR REPLACE FUNCTION cyberos_host_id() RETURNS text LANGUAGE sql AS $$ SELECT 'host-b' $$`,
		`CREATE OR REPLACE FUNCTION audit_rows_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$`,
	} {
		_, err := a.Exec(ctx, q)
		var pe *pgconn.PgError
		if err == nil {
			t.Errorf("%s: done as the daemon's role", q)
		} else if !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("%s: %v, want a refusal for lack of privilege", q, err)
		}
	}
	// Another host's rows: not seen, not writable.
	var n int
	if err := a.QueryRow(ctx, `SELECT count(*) FROM audit_rows WHERE host_id <> 'host-a'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("host A sees %d rows of other hosts (%v), want 0", n, err)
	}
	_, err := a.Exec(ctx, `INSERT INTO audit_rows (host_id, seq, row_id, kind, ts, prev_hash, row_hash, payload)
		VALUES ('host-b', 999, 'r', 'k', 't', 'p', 'h', '{}')`)
	if err == nil || !strings.Contains(err.Error(), "row-level security") {
		t.Errorf("host A adding a row under host-b: %v, want a row-level security refusal", err)
	}
	// A daemon configured with another host's id is refused by the binding.
	if err := (&Shipper{Pool: a, HostID: "host-b", Source: stB}).Flush(ctx); !errors.Is(err, ErrHostNotBound) {
		t.Errorf("host A's role shipping as host-b: %v, want ErrHostNotBound", err)
	}
	// Nothing changed: both chains verify, as the auditor reads them.
	reps, err := Verify(ctx, db.auditor(), "", "", nil)
	if err != nil || len(reps) != 2 || !reps[0].Report.OK || !reps[1].Report.OK || reps[0].Report.Rows != 6 || reps[1].Report.Rows != 4 {
		t.Errorf("the auditor's verify after the attacks: %+v %v", reps, err)
	}
}

// A daemon's role is checked before it ships: a database not migrated, a
// role that could lift the controls (superuser, owner), one not in
// cyberos_runtime and one not bound to a host are refused, each by its
// ErrSetup class, and nothing is written.
func TestCheckRuntimeRefusesWhatIsNotSetUp(t *testing.T) {
	pg := testutil.StartPostgres(t)
	ctx := context.Background()
	bare := newPool(t, pg.CreateDatabase("bare"))
	if err := CheckRuntime(ctx, bare, "host-a"); !errors.Is(err, ErrNotMigrated) || !errors.Is(err, ErrSetup) || !strings.Contains(err.Error(), "cyberos fleet migrate") {
		t.Errorf("a database not migrated: %v, want ErrNotMigrated naming `cyberos fleet migrate`", err)
	}
	db := newFleetDB(t, pg, "checked")
	pg.Psql("postgres", "CREATE ROLE stranger LOGIN")
	pg.Psql("postgres", "CREATE ROLE unbound LOGIN IN ROLE cyberos_runtime")
	pg.Psql("postgres", "CREATE ROLE owners_friend LOGIN IN ROLE fleet_owner")
	for _, c := range []struct {
		pool *pgxpool.Pool
		want error
	}{
		{newPool(t, pg.DSN("checked")), ErrRolePrivileged},
		{db.owner, ErrRolePrivileged},
		{newPool(t, db2dsn(pg, "owners_friend", "checked")), ErrRolePrivileged},
		{newPool(t, db2dsn(pg, "stranger", "checked")), ErrRoleNotRuntime},
		{newPool(t, db2dsn(pg, "unbound", "checked")), ErrHostNotBound},
		{db.host("host-b"), ErrHostNotBound},
	} {
		st := newStore(t)
		emit(t, st, "11111111-1111-1111-1111-111111111111", 1)
		err := (&Shipper{Pool: c.pool, HostID: "host-a", Source: st}).Flush(ctx)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.pool.Config().ConnConfig.User, err, c.want)
		}
	}
	if n := pg.Psql("checked", "SELECT count(*) FROM audit_rows"); n != "0" {
		t.Errorf("%s rows shipped by refused roles", n)
	}
	if err := CheckRuntime(ctx, db.host("host-a"), "host-a"); err != nil {
		t.Errorf("host A's own role: %v", err)
	}
	// A role many hosts share, bound to '*', ships as any of them.
	pg.Psql("postgres", "CREATE ROLE shared LOGIN IN ROLE cyberos_runtime")
	pg.Psql("checked", "INSERT INTO cyberos_hosts (role_name, host_id) VALUES ('shared', '*')")
	shared := newPool(t, db2dsn(pg, "shared", "checked"))
	if s, err := SharedRole(ctx, shared); err != nil || !s {
		t.Errorf("SharedRole of the role bound to '*': %v %v, want true", s, err)
	}
	if s, err := SharedRole(ctx, db.host("host-a")); err != nil || s {
		t.Errorf("SharedRole of host A's own role: %v %v, want false", s, err)
	}
	for _, h := range []string{"node-1", "node-2"} {
		st := newStore(t)
		emit(t, st, "11111111-1111-1111-1111-111111111111", 1)
		if err := (&Shipper{Pool: shared, HostID: h, Source: st}).Flush(ctx); err != nil {
			t.Errorf("the shared role shipping as %s: %v", h, err)
		}
	}
	if n := pg.Psql("checked", "SELECT count(*) FROM audit_rows"); n != "4" {
		t.Errorf("%s rows shipped by the shared role, want 4", n)
	}
}
