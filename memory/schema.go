package memory

import (
	"context"
	"database/sql"
	"fmt"
)

// schemaVersion is stored in PRAGMA user_version. A database written by a
// newer version of this package is refused rather than misread.
const schemaVersion = 2

// schema is the whole store. docs holds one row per (tenant_id, path); a
// withheld (compensation) document has body NULL, and the CHECK makes "body
// stored" and "body withheld" mutually exclusive. docs_fts is an
// external-content FTS5 index over docs_indexed, the first IndexChars
// characters of each body (indexFunc), so neither indexing nor a snippet
// ever reads more of a body. The triggers index a body only when it is not
// NULL, so a withheld body never reaches the index, and they remove the old
// body's terms before indexing the new one on every upsert.
// FTS5 secure-delete (set once, in migrate) purges removed terms from the
// index pages instead of leaving them behind delete markers.
const schema = `
CREATE TABLE IF NOT EXISTS docs (
	id            INTEGER PRIMARY KEY,
	tenant_id     TEXT    NOT NULL,
	path          TEXT    NOT NULL,
	body          TEXT,
	body_withheld INTEGER NOT NULL CHECK (body_withheld IN (0, 1)),
	content_hash  TEXT    NOT NULL CHECK (length(content_hash) = 64),
	trace_id      TEXT    NOT NULL,
	invocation_id TEXT    NOT NULL,
	skill_id      TEXT    NOT NULL,
	updated_at    INTEGER NOT NULL,
	UNIQUE (tenant_id, path),
	CHECK ((body IS NULL) = (body_withheld = 1))
) STRICT;

CREATE VIEW IF NOT EXISTS docs_indexed AS
	SELECT id, ` + indexFunc + `(body) AS body FROM docs;

CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(
	body,
	content = 'docs_indexed',
	content_rowid = 'id',
	tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER IF NOT EXISTS docs_fts_ai AFTER INSERT ON docs
WHEN new.body IS NOT NULL BEGIN
	INSERT INTO docs_fts (rowid, body) VALUES (new.id, ` + indexFunc + `(new.body));
END;

CREATE TRIGGER IF NOT EXISTS docs_fts_ad AFTER DELETE ON docs
WHEN old.body IS NOT NULL BEGIN
	INSERT INTO docs_fts (docs_fts, rowid, body) VALUES ('delete', old.id, ` + indexFunc + `(old.body));
END;

CREATE TRIGGER IF NOT EXISTS docs_fts_au AFTER UPDATE ON docs BEGIN
	INSERT INTO docs_fts (docs_fts, rowid, body)
		SELECT 'delete', old.id, ` + indexFunc + `(old.body) WHERE old.body IS NOT NULL;
	INSERT INTO docs_fts (rowid, body)
		SELECT new.id, ` + indexFunc + `(new.body) WHERE new.body IS NOT NULL;
END;
`

// migrate creates the schema if needed and checks its version, in one
// immediate transaction so two processes opening a new store do not race.
func migrate(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("journal mode is %q, want wal", mode)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case v > schemaVersion:
		return fmt.Errorf("schema version %d is newer than this build (%d)", v, schemaVersion)
	case v == schemaVersion:
		return tx.Commit()
	}
	if v == 1 {
		// Version 1 indexed whole bodies: index the prefixes instead.
		if _, err := tx.ExecContext(ctx, `DROP TRIGGER docs_fts_ai; DROP TRIGGER docs_fts_ad;
			DROP TRIGGER docs_fts_au; DROP TABLE docs_fts;`); err != nil {
			return fmt.Errorf("drop the version 1 index: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO docs_fts (docs_fts) VALUES ('rebuild')`); err != nil {
		return fmt.Errorf("build fts index: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO docs_fts (docs_fts, rank) VALUES ('secure-delete', 1)`); err != nil {
		return fmt.Errorf("enable fts secure-delete: %w", err)
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
		return fmt.Errorf("set schema version: %w", err)
	}
	return tx.Commit()
}
