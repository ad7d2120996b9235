-- Every host's audit rows, as its journal holds them: payload is the exact
-- canonical JSON the row hash covers (text, not jsonb, which would
-- re-encode it). A host's rows are keyed and ordered by its own seq.
CREATE TABLE audit_rows (
    host_id       text        NOT NULL,
    seq           bigint      NOT NULL CHECK (seq > 0),
    row_id        text        NOT NULL,
    kind          text        NOT NULL,
    ts            text        NOT NULL,
    prev_hash     text        NOT NULL,
    row_hash      text        NOT NULL,
    payload       text        NOT NULL,
    invocation_id text GENERATED ALWAYS AS (payload::jsonb ->> 'invocation_id') STORED,
    tenant_id     text GENERATED ALWAYS AS (payload::jsonb ->> 'tenant_id') STORED,
    shipped_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (host_id, seq)
);
CREATE INDEX audit_rows_invocation ON audit_rows (invocation_id);
CREATE INDEX audit_rows_tenant_ts ON audit_rows (tenant_id, ts);

-- Shipped rows are never changed or removed through the application: an
-- auditor's copy that a compromised host could rewrite would prove nothing.
CREATE FUNCTION audit_rows_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_rows is append-only: % refused', TG_OP;
END $$;
CREATE TRIGGER audit_rows_append_only BEFORE UPDATE OR DELETE ON audit_rows
    FOR EACH ROW EXECUTE FUNCTION audit_rows_append_only();
CREATE TRIGGER audit_rows_no_truncate BEFORE TRUNCATE ON audit_rows
    FOR EACH STATEMENT EXECUTE FUNCTION audit_rows_append_only();
