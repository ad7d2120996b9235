package fleet

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrSetup: the database is not set up for this daemon; the owner or an
// administrator must act (docs/fleet.md). A daemon refuses to start on
// it, where a database that is only away is waited for.
var ErrSetup = errors.New("fleet: the database is not set up for this daemon")

// The ways a database is not set up, each an ErrSetup.
var (
	// ErrNotMigrated: the schema is older than this build's.
	ErrNotMigrated = fmt.Errorf("%w: the schema is not migrated to this build's version", ErrSetup)
	// ErrRolePrivileged: the daemon's role could lift the database's own
	// controls (row-level security, the append-only triggers).
	ErrRolePrivileged = fmt.Errorf("%w: the daemon's role could lift row-level security or the append-only triggers", ErrSetup)
	// ErrRoleNotRuntime: the daemon's role was not granted what a daemon
	// needs (it is not a member of cyberos_runtime).
	ErrRoleNotRuntime = fmt.Errorf("%w: the daemon's role is not a member of cyberos_runtime", ErrSetup)
	// ErrHostNotBound: cyberos_hosts does not bind the daemon's role to
	// its host id.
	ErrHostNotBound = fmt.Errorf("%w: the daemon's role is not bound to its host id", ErrSetup)
)

// querier is a pool, a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ownerRun is what the owner runs to migrate, for the messages.
const ownerRun = "the tables' owner runs `cyberos fleet migrate --dsn-file OWNER_DSN_FILE`"

// CheckRuntime is a daemon's check of the database it connects to, at
// start and at each new shipping session: the schema is this build's,
// its role is neither a superuser, BYPASSRLS, nor a member of a table's
// owner (any of which could lift row-level security or the append-only
// triggers), it is a member of cyberos_runtime, and cyberos_hosts binds
// it (the session's login role) to hostID. It never changes anything: a
// daemon needs no owner's rights.
func CheckRuntime(ctx context.Context, q querier, hostID string) error {
	var have int
	if err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM cyberos_schema`).Scan(&have); err != nil {
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "42P01": // undefined_table
			return fmt.Errorf("%w: the database has no cyberos_schema: %s", ErrNotMigrated, ownerRun)
		case errors.As(err, &pe) && pe.Code == "42501": // insufficient_privilege
			return fmt.Errorf("%w: it may not read cyberos_schema (%s)", ErrRoleNotRuntime, pe.Message)
		}
		return fmt.Errorf("fleet: check the schema: %w", err)
	}
	want := SchemaVersion()
	switch {
	case have < want:
		return fmt.Errorf("%w: version %d, this build needs %d: %s", ErrNotMigrated, have, want, ownerRun)
	case have > want:
		return fmt.Errorf("%w: version %d, this build knows %d", ErrSchemaTooNew, have, want)
	}
	var role, owned string
	var super, bypass, runtime bool
	var bound *string
	err := q.QueryRow(ctx, `SELECT session_user,
			bool_or(r.rolsuper), bool_or(r.rolbypassrls),
			pg_has_role(session_user, 'cyberos_runtime', 'USAGE'),
			coalesce((SELECT string_agg(c.relname::text, ', ' ORDER BY c.relname) FROM pg_class c
				WHERE c.oid IN ('cyberos_schema'::regclass, 'cyberos_hosts'::regclass, 'audit_rows'::regclass, 'memory_docs'::regclass)
				AND (pg_has_role(session_user, c.relowner, 'MEMBER') OR pg_has_role(current_user, c.relowner, 'MEMBER'))), ''),
			cyberos_host_id()
		FROM pg_roles r WHERE r.rolname IN (session_user, current_user)`).Scan(&role, &super, &bypass, &runtime, &owned, &bound)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			return fmt.Errorf("%w: %s", ErrRoleNotRuntime, pe.Message)
		}
		return fmt.Errorf("fleet: check the role: %w", err)
	}
	switch {
	case super:
		return fmt.Errorf("%w: role %s is a superuser: run the daemon as a login role in cyberos_runtime (docs/fleet.md)", ErrRolePrivileged, role)
	case bypass:
		return fmt.Errorf("%w: role %s has BYPASSRLS: run the daemon as a login role in cyberos_runtime (docs/fleet.md)", ErrRolePrivileged, role)
	case owned != "":
		return fmt.Errorf("%w: role %s owns (or may act as the owner of) %s: run the daemon as a login role in cyberos_runtime that owns nothing (docs/fleet.md)", ErrRolePrivileged, role, owned)
	case !runtime:
		return fmt.Errorf("%w: role %s: GRANT cyberos_runtime TO %s (docs/fleet.md)", ErrRoleNotRuntime, role, role)
	case bound == nil:
		return fmt.Errorf("%w: cyberos_hosts binds role %s to no host id; the owner binds it: INSERT INTO cyberos_hosts (role_name, host_id) VALUES ('%s', '%s')", ErrHostNotBound, role, role, hostID)
	case *bound != hostID && *bound != "*":
		return fmt.Errorf("%w: cyberos_hosts binds role %s to host id %q, and this daemon's fleet.host_id is %q", ErrHostNotBound, role, *bound, hostID)
	}
	return nil
}

// SharedRole says whether cyberos_hosts binds the session's role to every
// host id ('*'): each host using it may then read and append under any
// host's id, which a daemon says in its log at start.
func SharedRole(ctx context.Context, q querier) (bool, error) {
	var bound *string
	if err := q.QueryRow(ctx, `SELECT cyberos_host_id()`).Scan(&bound); err != nil {
		return false, fmt.Errorf("fleet: read the role's binding: %w", err)
	}
	return bound != nil && *bound == "*", nil
}
