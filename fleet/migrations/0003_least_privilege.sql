-- Least privilege. The tables belong to the role that migrates (the
-- owner); the daemons connect as login roles that own nothing, members of
-- cyberos_runtime, and the auditor's reads as members of cyberos_auditor.
-- Both are group roles (NOLOGIN), made here when missing (the owner then
-- needs CREATEROLE) or beforehand by an administrator (docs/fleet.md).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'cyberos_runtime') THEN
        CREATE ROLE cyberos_runtime NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'cyberos_auditor') THEN
        CREATE ROLE cyberos_auditor NOLOGIN;
    END IF;
END $$;

-- Which login role ships as which host: written by the owner only. A host
-- cannot choose its host_id: it is read from here by the role it logged
-- in as (session_user, which only a superuser can change). '*' binds a
-- role shared by many hosts (one Kubernetes Secret) to every host id:
-- weaker, since each of those hosts then reads and appends under any id.
CREATE TABLE cyberos_hosts (
    role_name name PRIMARY KEY,
    host_id   text NOT NULL UNIQUE CHECK (host_id = '*' OR host_id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$')
);

-- cyberos_host_id() is the host id of the session's login role (NULL:
-- none). SECURITY DEFINER reads cyberos_hosts, which no host may; its
-- search_path is this schema then pg_temp, so no object a caller makes
-- can stand in for the table.
CREATE FUNCTION cyberos_host_id() RETURNS text LANGUAGE sql STABLE SECURITY DEFINER
    AS $$ SELECT host_id FROM cyberos_hosts WHERE role_name = session_user $$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION cyberos_host_id() SET search_path = %I, pg_temp', current_schema());
END $$;

-- A host reads and adds only its own rows; the auditor reads every row.
-- Nobody but the owner updates or deletes (the grants, then the
-- append-only triggers, which only the owner can disable).
ALTER TABLE audit_rows ENABLE ROW LEVEL SECURITY;
CREATE POLICY audit_rows_host_read ON audit_rows FOR SELECT TO cyberos_runtime
    USING ((SELECT cyberos_host_id()) IN (host_id, '*'));
CREATE POLICY audit_rows_host_insert ON audit_rows FOR INSERT TO cyberos_runtime
    WITH CHECK ((SELECT cyberos_host_id()) IN (host_id, '*'));
CREATE POLICY audit_rows_auditor ON audit_rows FOR SELECT TO cyberos_auditor
    USING (true);

REVOKE ALL ON cyberos_schema, cyberos_hosts, audit_rows, memory_docs FROM PUBLIC;
REVOKE ALL ON FUNCTION cyberos_host_id() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION cyberos_host_id() TO cyberos_runtime;
GRANT SELECT ON cyberos_schema TO cyberos_runtime, cyberos_auditor;
GRANT SELECT, INSERT ON audit_rows TO cyberos_runtime;
GRANT SELECT ON audit_rows TO cyberos_auditor;
-- Tenant memory: the upsert (INSERT … ON CONFLICT DO UPDATE) and the
-- reads, each transaction on the tenant it names (memory_docs_tenant).
GRANT SELECT, INSERT, UPDATE ON memory_docs TO cyberos_runtime;
