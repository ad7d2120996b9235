-- Tenant memory shared by a fleet's hosts: the same documents as a host's
-- memory.db (one per tenant and canonical path; a withheld body is NULL and
-- never indexed), with a full-text index over the body. body is bytea: a
-- body is any UTF-8, NUL included, which text cannot hold; tsv is made by
-- the writer from the body with NULs as spaces.
CREATE TABLE memory_docs (
    tenant_id     text    NOT NULL,
    path          text    NOT NULL,
    body          bytea,
    body_withheld boolean NOT NULL,
    content_hash  text    NOT NULL CHECK (length(content_hash) = 64),
    trace_id      text    NOT NULL,
    invocation_id text    NOT NULL,
    skill_id      text    NOT NULL,
    updated_at    bigint  NOT NULL, -- Unix nanoseconds, as memory.db
    tsv           tsvector NOT NULL,
    PRIMARY KEY (tenant_id, path),
    CHECK ((body IS NULL) = body_withheld)
);
CREATE INDEX memory_docs_tsv ON memory_docs USING gin (tsv);

-- Tenant isolation by the database too: a session sees and writes only the
-- rows of the tenant it names in cyberos.tenant_id (set per transaction),
-- none without it, the table's owner included (FORCE); only a superuser or
-- a BYPASSRLS role sees past it, so the daemons' role must be neither.
ALTER TABLE memory_docs ENABLE ROW LEVEL SECURITY;
ALTER TABLE memory_docs FORCE ROW LEVEL SECURITY;
CREATE POLICY memory_docs_tenant ON memory_docs
    USING (tenant_id = current_setting('cyberos.tenant_id', true))
    WITH CHECK (tenant_id = current_setting('cyberos.tenant_id', true));
