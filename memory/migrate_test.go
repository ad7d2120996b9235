package memory

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
)

// schemaV1 is the store as version 1 made it: the search index over whole
// bodies.
const schemaV1 = `
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

CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(
	body,
	content = 'docs',
	content_rowid = 'id',
	tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER IF NOT EXISTS docs_fts_ai AFTER INSERT ON docs
WHEN new.body IS NOT NULL BEGIN
	INSERT INTO docs_fts (rowid, body) VALUES (new.id, new.body);
END;

CREATE TRIGGER IF NOT EXISTS docs_fts_ad AFTER DELETE ON docs
WHEN old.body IS NOT NULL BEGIN
	INSERT INTO docs_fts (docs_fts, rowid, body) VALUES ('delete', old.id, old.body);
END;

CREATE TRIGGER IF NOT EXISTS docs_fts_au AFTER UPDATE ON docs BEGIN
	INSERT INTO docs_fts (docs_fts, rowid, body)
		SELECT 'delete', old.id, old.body WHERE old.body IS NOT NULL;
	INSERT INTO docs_fts (rowid, body)
		SELECT new.id, new.body WHERE new.body IS NOT NULL;
END;
`

// A version 1 store opened by this version keeps every document, and its
// index is rebuilt over the bodies' first IndexChars characters.
func TestMigrateV1(t *testing.T) {
	dir := t.TempDir()
	if err := registerFuncs(); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", dsn(filepath.Join(dir, FileName)))
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("filler ", IndexChars/7+1) + "farword"
	for _, q := range []string{schemaV1, `PRAGMA user_version = 1`,
		`INSERT INTO docs (tenant_id, path, body, body_withheld, content_hash, trace_id, invocation_id, skill_id, updated_at)
			VALUES ('` + tenantA + `', 'notes/short', 'nearword here', 0, '` + sha("nearword here") + `', '', '', '', 1),
			       ('` + tenantA + `', 'notes/long', '` + long + `', 0, '` + sha(long) + `', '', '', '', 1)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	db.Close()

	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var v int
	if err := sq(s).QueryRow(`PRAGMA user_version`).Scan(&v); err != nil || v != schemaVersion {
		t.Fatalf("user_version %d, %v; want %d", v, err, schemaVersion)
	}
	sqliteIntegrity(t, s)
	ctx := context.Background()
	if hits, err := s.Search(ctx, tenantA, "nearword", all, nil, 10); err != nil || len(hits) != 1 {
		t.Errorf("nearword: %v, %v", paths(hits), err)
	}
	if hits, err := s.Search(ctx, tenantA, "filler", all, nil, 10); err != nil || len(hits) != 1 {
		t.Errorf("filler: %v, %v", paths(hits), err)
	}
	if hits, err := s.Search(ctx, tenantA, "farword", all, nil, 10); err != nil || len(hits) != 0 {
		t.Errorf("a word past the first IndexChars characters: %v, %v; want not found", paths(hits), err)
	}
	if d, err := s.Read(ctx, tenantA, "notes/long", all); err != nil || d.Body != long {
		t.Errorf("read the long note after the migration: %v", err)
	}
	emit(t, s, tenantA, "notes/long", "replaced")
	sqliteIntegrity(t, s)
}
