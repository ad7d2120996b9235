//go:build linux

package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
)

// fleetDatabase is a fleet's database set up as docs/fleet.md says: made
// by an administrator for the owner role, migrated by `cyberos fleet
// migrate --dsn-file` as that role, then one login role per host in
// cyberos_runtime, bound to its host id, and an auditor in
// cyberos_auditor.
type fleetDatabase struct {
	t    testing.TB
	pg   *testutil.Postgres
	name string
	dir  string
}

func newFleetDatabase(t testing.TB, pg *testutil.Postgres, name string, migrate bool) *fleetDatabase { //nolint:unparam // the call site names the database its roles are on
	t.Helper()
	f := &fleetDatabase{t: t, pg: pg.For(t), name: name, dir: t.TempDir()}
	f.pg.Psql("postgres", "CREATE ROLE "+name+"_owner LOGIN CREATEROLE")
	f.pg.Psql("postgres", "CREATE DATABASE "+name+" OWNER "+name+"_owner")
	f.pg.Psql("postgres", "REVOKE ALL ON DATABASE "+name+" FROM PUBLIC")
	if migrate {
		if out, err := cyberos("fleet", "migrate", "--dsn-file", f.dsnFile(name+"_owner")).CombinedOutput(); err != nil {
			t.Fatalf("fleet migrate as the owner: %v\n%s", err, out)
		}
	}
	return f
}

// dsn is role's connection URL to the database.
func (f *fleetDatabase) dsn(role string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, f.pg.Port, f.name)
}

// dsnFile is a file holding role's connection URL.
func (f *fleetDatabase) dsnFile(role string) string {
	p := filepath.Join(f.dir, role+".dsn")
	if err := os.WriteFile(p, []byte(f.dsn(role)+"\n"), 0o600); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// host makes host h's login role, bound to h, and returns its DSN: what
// host h's daemon connects with.
func (f *fleetDatabase) host(h string) string {
	f.t.Helper()
	role := f.name + "_" + strings.ReplaceAll(h, "-", "_")
	f.pg.Psql("postgres", "CREATE ROLE "+role+" LOGIN IN ROLE cyberos_runtime")
	f.pg.Psql("postgres", "GRANT CONNECT ON DATABASE "+f.name+" TO "+role)
	f.pg.Psql(f.name, "INSERT INTO cyberos_hosts (role_name, host_id) VALUES ('"+role+"', '"+h+"')")
	return f.dsn(role)
}

// auditor makes the auditor's login role and returns a file holding its
// DSN, for audit verify|export --dsn-file.
func (f *fleetDatabase) auditor() string {
	f.t.Helper()
	role := f.name + "_audit"
	f.pg.Psql("postgres", "CREATE ROLE "+role+" LOGIN IN ROLE cyberos_auditor")
	f.pg.Psql("postgres", "GRANT CONNECT ON DATABASE "+f.name+" TO "+role)
	return f.dsnFile(role)
}

// Must show (issue 37, finding 3): a daemon needs no owner's rights and
// takes none. On a database not migrated it refuses to start, saying to
// run `cyberos fleet migrate`; as a superuser or as the tables' owner (who
// could lift row-level security and the append-only triggers) it refuses
// too; as a role bound to another host id, too. Once the owner migrated
// and bound the host's role, it serves.
func TestFleetDaemonRefusesADatabaseNotSetUp(t *testing.T) {
	pg := testutil.StartPostgres(t)
	f := newFleetDatabase(t, pg, "fleet", false)
	hostA := ""
	for _, c := range []struct {
		name, dsn, want string
	}{
		{"not migrated", pg.DSN("fleet"), "cyberos fleet migrate"},
		{"superuser", pg.DSN("fleet"), "is a superuser"},
		{"owner", f.dsn("fleet_owner"), "owns (or may act as the owner of)"},
		{"another host's role", "", "binds role fleet_host_b to host id \"host-b\""},
	} {
		if c.name == "superuser" {
			if out, err := cyberos("fleet", "migrate", "--dsn-file", f.dsnFile("fleet_owner")).CombinedOutput(); err != nil || !strings.Contains(string(out), "schema at version") {
				t.Fatalf("fleet migrate: %v\n%s", err, out)
			}
			hostA = f.host("host-a")
		}
		if c.dsn == "" {
			c.dsn = f.host("host-b")
		}
		e := newEnv(t)
		e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
		cfg := filepath.Join(e.base, "etc", "supervisor.yaml")
		os.MkdirAll(filepath.Dir(cfg), 0o755)
		os.WriteFile(cfg, []byte(e.daemonConfig(freePort(t), fmt.Sprintf("fleet: {postgres_dsn: '%s', host_id: host-a}", c.dsn))), 0o644)
		out, err := cyberos("supervisor", "serve", "--config", cfg, "--run-dir", e.runDir).CombinedOutput()
		if exitCode(err) != 3 || !strings.Contains(string(out), c.want) {
			t.Errorf("%s: serve: exit %d, want 3 and %q:\n%s", c.name, exitCode(err), c.want, out)
		}
	}
	e := newEnv(t)
	e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	d := startDaemon(t, e, fmt.Sprintf("fleet: {postgres_dsn: '%s', host_id: host-a}", hostA))
	if code, env, raw := d.invoke(map[string]any{"skill_id": "quick"}); code != 200 || env.Outcome != "success" {
		t.Fatalf("HTTP %d %s", code, raw)
	}
	waitFor(t, 20*time.Second, func() bool {
		return pg.Psql("fleet", "SELECT count(*) FROM audit_rows WHERE host_id = 'host-a'") == fmt.Sprint(len(e.auditRows()))
	})
}
