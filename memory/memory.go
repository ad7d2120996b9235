// Package memory is the tenant-scoped document store behind the MemoryRead,
// MemorySearch and MemoryEmit broker tools: documents keyed by tenant and
// canonical path, each call checked against the skill's allowed_memory_scopes.
package memory

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"cyberos.dev/internal/sqliteerr"
)

// Limits.
const (
	MaxBodyBytes  = 960 << 10 // a document body; larger is ErrTooLarge. With its JSON envelope it fits a 1 MiB request
	IndexChars    = 1 << 16   // characters of a body that search indexes
	SnippetChars  = 8192      // characters of a body a search hit's snippet is taken from
	MaxPathBytes  = 1024      // a canonical document path
	MaxIDBytes    = 256       // tenant, trace, invocation and skill ids
	MaxQueryBytes = 4096      // a search query
	MaxQueryTerms = 64        // words in a search query
	MaxLimit      = 100       // search results
)

// FileName is the store's file inside the state dir.
const FileName = "memory.db"

// Doc is one memory document. ContentHash is the lowercase hex SHA-256 of the
// body bytes exactly as emitted (not of a JSON encoding). When BodyWithheld is
// true (the document came from a compensation emit) the body was never
// stored: Body is "" and only ContentHash and the metadata remain.
type Doc struct {
	Tenant       string
	Path         string // canonical
	Body         string
	ContentHash  string
	TraceID      string
	InvocationID string
	SkillID      string
	UpdatedAt    time.Time // UTC
	BodyWithheld bool
}

// Entry is one MemoryEmit: Path is checked, after canonicalisation, against
// Scopes (the skill's allowed_memory_scopes). With Compensation set, Body is
// hashed and then dropped: it is written nowhere, not even the search index.
type Entry struct {
	Tenant       string
	Path         string
	Body         string
	TraceID      string
	InvocationID string
	SkillID      string
	Compensation bool
	Scopes       []string
}

// Hit is one search result. Score is the negated FTS5 bm25 rank, so a larger
// score is a better match. Snippet is a plain-text excerpt of the start of
// the body (snippet; "…" marks elisions, no highlighting markup).
type Hit struct {
	Path        string
	Score       float64
	Snippet     string
	ContentHash string
}

// Store is an open memory store: the checks every call makes (ids, path,
// scope, size, UTF-8) over one of two backends, SQLite in the state dir
// (Open) or a fleet's PostgreSQL (OpenPostgres). It is safe for concurrent use.
type Store struct {
	b    backend
	now  func() time.Time
	fair fairness
}

func newStoreOn(b backend) *Store {
	return &Store{b: b, now: time.Now, fair: fairness{lim: DefaultLimits(), tenants: map[string]*tenantShare{}}}
}

// backend stores and finds documents; Store has checked every argument.
type backend interface {
	// read returns tenant's document at the canonical path, or ErrNotFound.
	read(ctx context.Context, tenant, path string) (Doc, error)
	// upsert stores d, its Body dropped when d.BodyWithheld.
	upsert(ctx context.Context, d Doc) error
	// search returns the best limit documents of tenant holding every word,
	// matching a glob of scopes and none of excludes, all filtered before
	// the limit; withheld bodies are never found.
	search(ctx context.Context, tenant string, words, scopes, excludes []string, limit int) ([]Hit, error)
	close() error
}

// sqliteDB is the embedded backend: <state dir>/memory.db.
type sqliteDB struct {
	db *sql.DB
	// wmu serialises this process's writers; busy_timeout covers writers in
	// other processes sharing the state dir (cyberos skill run next to the
	// daemon).
	wmu sync.Mutex
}

// Open opens (creating if needed) the store at <stateDir>/memory.db: the
// directory is created 0700 if missing, the database file is 0600 (SQLite
// gives its -wal and -shm files the same mode), journal_mode=WAL and
// synchronous=FULL, so an Emit that returned is on disk. Every error wraps
// ErrUnavailable.
func Open(stateDir string) (*Store, error) {
	if stateDir == "" {
		return nil, fmt.Errorf("%w: no state dir", ErrUnavailable)
	}
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, unavailable("state dir", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, unavailable("create state dir", err)
	}
	file := filepath.Join(dir, FileName)
	if err := prepareFile(file); err != nil {
		return nil, err
	}
	if err := registerFuncs(); err != nil {
		return nil, unavailable("register sql functions", err)
	}
	// A fresh store opened by many processes at once can see SQLITE_BUSY
	// while one of them switches it to WAL, which the busy handler does not
	// cover: retry for as long as a writer would wait.
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := openDB(file)
		if err == nil || !sqliteerr.IsBusy(err) || time.Now().After(deadline) {
			return st, err
		}
		time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
	}
}

func openDB(file string) (*Store, error) {
	db, err := sql.Open("sqlite", dsn(file))
	if err != nil {
		return nil, unavailable("open database", err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, unavailable("open database", err)
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, unavailable("schema", err)
	}
	return newStoreOn(&sqliteDB{db: db}), nil
}

// prepareFile creates the database file 0600 before SQLite sees it, tightens
// an existing one to 0600, and refuses anything that is not a regular file
// (a symlink planted in the state dir included).
func prepareFile(file string) error {
	fi, err := os.Lstat(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			// Another process created it first: check what it is.
			return prepareFile(file)
		}
		if err != nil {
			return unavailable("create database file", err)
		}
		if err := f.Close(); err != nil {
			return unavailable("create database file", err)
		}
	case err != nil:
		return unavailable("stat database file", err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: database file is not a regular file", ErrUnavailable)
	}
	if err := os.Chmod(file, 0o600); err != nil {
		return unavailable("chmod database file", err)
	}
	return nil
}

// dsn is the modernc.org/sqlite connection string. The pragmas run on every
// new connection. _txlock=immediate makes BeginTx take the write lock at once
// (no deadlocked lock upgrades); _defensive forbids writing shadow tables.
func dsn(file string) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(60000)") // many `skill run` processes may share a state dir
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "secure_delete(ON)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	q.Set("_defensive", "1")
	q.Set("_dqs", "0")
	return "file:" + (&url.URL{Path: filepath.ToSlash(file)}).EscapedPath() + "?" + q.Encode()
}

// Close closes the store.
func (s *Store) Close() error { return s.b.close() }

func (b *sqliteDB) close() error {
	if err := b.db.Close(); err != nil {
		return unavailable("close", err)
	}
	return nil
}

// Read returns the tenant's document at path. The path is canonicalised
// (ErrInvalid if it cannot be) and must match one of scopes (ErrScope) before
// the store is looked at, so the answer to an out-of-scope path never depends
// on what exists. Only tenant's own documents are visible: a path that exists
// only for another tenant is ErrNotFound.
func (s *Store) Read(ctx context.Context, tenant, path string, scopes []string) (Doc, error) {
	if err := checkID("tenant", tenant, true); err != nil {
		return Doc{}, err
	}
	p, err := checkScope(path, scopes)
	if err != nil {
		return Doc{}, err
	}
	var d Doc
	err = s.do(ctx, tenant, "read", false, func(ctx context.Context) (err error) {
		d, err = s.b.read(ctx, tenant, p)
		return err
	})
	return d, err
}

func (b *sqliteDB) read(ctx context.Context, tenant, p string) (Doc, error) {
	d := Doc{Tenant: tenant, Path: p}
	var body sql.NullString
	var withheld, updated int64
	err := b.db.QueryRowContext(ctx, `
		SELECT body, body_withheld, content_hash, trace_id, invocation_id, skill_id, updated_at
		FROM docs WHERE tenant_id = ? AND path = ?`, tenant, p).
		Scan(&body, &withheld, &d.ContentHash, &d.TraceID, &d.InvocationID, &d.SkillID, &updated)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return Doc{}, fmt.Errorf("%w: %q", ErrNotFound, p)
	case err != nil:
		return Doc{}, dbErr(ctx, "read", err)
	}
	d.Body = body.String
	d.BodyWithheld = withheld == 1
	d.UpdatedAt = time.Unix(0, updated).UTC()
	return d, nil
}

// Emit creates or replaces the document at (e.Tenant, canonical e.Path) and
// returns it as stored. Checks, in order: ids (ErrInvalid), path
// canonicalisation (ErrInvalid), scope (ErrScope), body size (ErrTooLarge)
// and UTF-8 (ErrInvalid). A compensation entry stores body NULL with
// body_withheld = 1; its words never reach the search index.
func (s *Store) Emit(ctx context.Context, e Entry) (Doc, error) {
	if err := checkID("tenant", e.Tenant, true); err != nil {
		return Doc{}, err
	}
	for _, f := range []struct{ name, v string }{
		{"trace_id", e.TraceID}, {"invocation_id", e.InvocationID}, {"skill_id", e.SkillID},
	} {
		if err := checkID(f.name, f.v, false); err != nil {
			return Doc{}, err
		}
	}
	p, err := checkScope(e.Path, e.Scopes)
	if err != nil {
		return Doc{}, err
	}
	if len(e.Body) > MaxBodyBytes {
		return Doc{}, fmt.Errorf("%w: body is %d bytes, the limit is %d bytes", ErrTooLarge, len(e.Body), MaxBodyBytes)
	}
	if !utf8.ValidString(e.Body) {
		return Doc{}, fmt.Errorf("%w: body is not valid UTF-8", ErrInvalid)
	}
	sum := sha256.Sum256([]byte(e.Body))
	d := Doc{
		Tenant:       e.Tenant,
		Path:         p,
		ContentHash:  hex.EncodeToString(sum[:]),
		TraceID:      e.TraceID,
		InvocationID: e.InvocationID,
		SkillID:      e.SkillID,
		UpdatedAt:    time.Unix(0, s.now().UnixNano()).UTC(),
		BodyWithheld: e.Compensation,
	}
	if !e.Compensation {
		d.Body = e.Body
	}
	if err := s.do(ctx, e.Tenant, "emit", true, func(ctx context.Context) error { return s.b.upsert(ctx, d) }); err != nil {
		return Doc{}, err
	}
	return d, nil
}

func (b *sqliteDB) upsert(ctx context.Context, d Doc) error {
	body := sql.NullString{String: d.Body, Valid: !d.BodyWithheld}
	withheld := 0
	if d.BodyWithheld {
		withheld = 1
	}
	b.wmu.Lock()
	defer b.wmu.Unlock()
	_, err := b.db.ExecContext(ctx, `
		INSERT INTO docs (tenant_id, path, body, body_withheld, content_hash,
		                  trace_id, invocation_id, skill_id, updated_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant_id, path) DO UPDATE SET
			body          = excluded.body,
			body_withheld = excluded.body_withheld,
			content_hash  = excluded.content_hash,
			trace_id      = excluded.trace_id,
			invocation_id = excluded.invocation_id,
			skill_id      = excluded.skill_id,
			updated_at    = excluded.updated_at`,
		d.Tenant, d.Path, body, withheld, d.ContentHash,
		d.TraceID, d.InvocationID, d.SkillID, d.UpdatedAt.UnixNano())
	if err != nil {
		return dbErr(ctx, "emit", err)
	}
	return nil
}

// checkID bounds an identifier: valid UTF-8, no control characters, at most
// MaxIDBytes, and non-empty when required.
func checkID(name, v string, required bool) error {
	switch {
	case v == "" && required:
		return fmt.Errorf("%w: %s is empty", ErrInvalid, name)
	case len(v) > MaxIDBytes:
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, name, MaxIDBytes)
	case !utf8.ValidString(v):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, name)
	case strings.ContainsFunc(v, unicode.IsControl):
		return fmt.Errorf("%w: %s contains control characters", ErrInvalid, name)
	}
	return nil
}

// unavailable wraps a host-side failure in ErrUnavailable, dropping the file
// name an *fs.PathError carries so no host path reaches a skill.
func unavailable(op string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}

// dbErr classifies a failed statement: the call's cancellation or
// deadline stays that (errors.Is context.Canceled / DeadlineExceeded); a
// PostgreSQL statement timeout is ErrTimeout; what a later call may not
// meet (SQLite busy, PostgreSQL away or overloaded) is ErrUnavailable; the
// rest (any other SQLite error, PostgreSQL refusing the statement) is
// ErrFault.
func dbErr(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("memory %s: %w", op, cerr)
	}
	var sqliteErr interface{ Code() int }
	transient := sqliteerr.IsBusy(err)
	if !errors.As(err, &sqliteErr) {
		transient = pgTransient(err)
	}
	switch {
	case isStatementTimeout(err):
		return fmt.Errorf("%w: %s: %w", ErrTimeout, op, err)
	case transient:
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrFault, op, err)
}
