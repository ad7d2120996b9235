package memory

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Row-level security: the application role's raw SQL sees no document
// without naming a tenant, only that tenant's when it names one, and
// cannot write a row for another tenant: a WHERE clause forgotten in this
// package could not cross tenants.
func TestPostgresRowLevelSecurity(t *testing.T) {
	s := newPGStore(t)
	emit(t, s, tenantA, "notes/a", "alpha of A")
	emit(t, s, tenantB, "notes/b", "beta of B")
	pool := s.b.(*pgDB).pool
	ctx := context.Background()
	inTx := func(tenant string, fn func(tx pgx.Tx) error) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if tenant != "" {
				if _, err := tx.Exec(ctx, `SELECT set_config('cyberos.tenant_id', $1, true)`, tenant); err != nil {
					return err
				}
			}
			return fn(tx)
		})
	}
	count := func(tenant string) (n int) {
		t.Helper()
		if err := inTx(tenant, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM memory_docs`).Scan(&n)
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(""); n != 0 {
		t.Errorf("without cyberos.tenant_id the application role sees %d documents, want 0", n)
	}
	if n := count(tenantA); n != 1 {
		t.Errorf("tenant A sees %d documents, want 1", n)
	}
	err := inTx(tenantA, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO memory_docs (tenant_id, path, body, body_withheld, content_hash, trace_id, invocation_id, skill_id, updated_at, tsv)
			VALUES ($1, 'notes/planted', 'x', false, repeat('0', 64), '', '', '', 0, to_tsvector('x'))`, tenantB)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "row-level security") {
		t.Errorf("tenant A writing a row of tenant B: %v, want a row-level security refusal", err)
	}
	if tag, err := pool.Exec(ctx, `UPDATE memory_docs SET body = 'x'`); err != nil || tag.RowsAffected() != 0 {
		t.Errorf("an UPDATE naming no tenant: %v rows, %v; want 0", tag.RowsAffected(), err)
	}
	if n := countDocs(t, s); n != 2 {
		t.Errorf("past RLS the table holds %d documents, want 2", n)
	}
}

// A compensation body is never sent to PostgreSQL: neither the table nor
// its index holds a word of it, read past row-level security.
func TestPostgresCompensationBodyNeverStored(t *testing.T) {
	s := newPGStore(t)
	ctx := context.Background()
	const secret = "Founder salary zanzibarquux 987654321 tangerinewombat"
	if _, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "people/founders/compensation", Body: secret,
		Compensation: true, Scopes: []string{"people/**"}}); err != nil {
		t.Fatal(err)
	}
	emit(t, s, tenantA, "notes/control", "visiblecanary")
	db, _ := pgSuper.Load(s)
	dump := pgServer.For(t).Psql(db.(string), `SELECT path, encode(coalesce(body, ''), 'escape'), tsv::text, content_hash FROM memory_docs`)
	if !strings.Contains(dump, "visiblecanary") || !strings.Contains(dump, sha(secret)) {
		t.Fatalf("the dump does not show what was stored:\n%s", dump)
	}
	for _, w := range []string{"tangerinewombat", "zanzibarquux", "987654321"} {
		if strings.Contains(strings.ToLower(dump), w) {
			t.Errorf("%q is in PostgreSQL:\n%s", w, dump)
		}
	}
}
