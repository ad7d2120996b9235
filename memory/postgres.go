package memory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenPostgres is the store on a fleet's PostgreSQL (table memory_docs,
// made by the fleet package's migrations): the same API and checks as
// Open's SQLite. Every statement runs in a transaction that names the
// tenant (cyberos.tenant_id), which row-level security enforces, so a
// mistake in a WHERE clause here cannot reach another tenant's rows.
// The pool connects on first use: while PostgreSQL is away, calls fail
// with ErrUnavailable. prepare (the fleet's check that the database is
// set up for this daemon; nil: none) runs before the first call that
// reaches the database, until it succeeds.
func OpenPostgres(pool *pgxpool.Pool, prepare func(context.Context) error) *Store {
	return newStoreOn(&pgDB{pool: pool, prepare: prepare})
}

type pgDB struct {
	pool     *pgxpool.Pool
	prepare  func(context.Context) error
	mu       sync.Mutex
	prepared bool
}

func (b *pgDB) ready(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.prepared || b.prepare == nil {
		return nil
	}
	if err := b.prepare(ctx); err != nil {
		return err
	}
	b.prepared = true
	return nil
}

func (b *pgDB) close() error { return nil } // the pool is its opener's

// inTenant runs fn in a transaction scoped to tenant, with the server's
// statement_timeout set to what is left of ctx's deadline, so a statement
// the client no longer waits for does not go on holding a backend.
func (b *pgDB) inTenant(ctx context.Context, op, tenant string, fn func(pgx.Tx) error) error {
	if err := b.ready(ctx); err != nil {
		return dbErr(ctx, op, err)
	}
	timeout := "0" // none
	if dl, ok := ctx.Deadline(); ok {
		timeout = strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10)
	}
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('cyberos.tenant_id', $1, true), set_config('statement_timeout', $2, true)`,
			tenant, timeout); err != nil {
			return err
		}
		return fn(tx)
	})
	switch {
	case err == nil, errors.Is(err, ErrNotFound):
		return err
	default:
		return dbErr(ctx, op, err)
	}
}

func (b *pgDB) read(ctx context.Context, tenant, p string) (Doc, error) {
	d := Doc{Tenant: tenant, Path: p}
	err := b.inTenant(ctx, "read", tenant, func(tx pgx.Tx) error {
		var body []byte
		var updated int64
		err := tx.QueryRow(ctx, `SELECT body, body_withheld, content_hash, trace_id, invocation_id, skill_id, updated_at
			FROM memory_docs WHERE tenant_id = $1 AND path = $2`, tenant, p).
			Scan(&body, &d.BodyWithheld, &d.ContentHash, &d.TraceID, &d.InvocationID, &d.SkillID, &updated)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrNotFound, p)
		}
		d.Body = string(body)
		d.UpdatedAt = time.Unix(0, updated).UTC()
		return err
	})
	if err != nil {
		return Doc{}, err
	}
	return d, nil
}

func (b *pgDB) upsert(ctx context.Context, d Doc) error {
	var body []byte // NULL when withheld
	if !d.BodyWithheld {
		body = append([]byte{}, d.Body...) // non-nil: "" is a body, not NULL
	}
	return b.inTenant(ctx, "emit", d.Tenant, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO memory_docs (tenant_id, path, body, body_withheld, content_hash,
				trace_id, invocation_id, skill_id, updated_at, tsv)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, to_tsvector('simple', $10::text))
			ON CONFLICT (tenant_id, path) DO UPDATE SET
				body = excluded.body, body_withheld = excluded.body_withheld,
				content_hash = excluded.content_hash, trace_id = excluded.trace_id,
				invocation_id = excluded.invocation_id, skill_id = excluded.skill_id,
				updated_at = excluded.updated_at, tsv = excluded.tsv`,
			d.Tenant, d.Path, body, d.BodyWithheld, d.ContentHash, d.TraceID, d.InvocationID, d.SkillID, d.UpdatedAt.UnixNano(),
			searchText(indexPrefix(body)))
		return err
	})
}

// search ranks the tenant's matching documents in SQL (ts_rank over the
// GIN-indexed tsvector, every word required), narrowed in SQL to the
// scopes' literal prefixes; each row is then held to the exact globs and
// the exclusions, in rank order, until limit: out-of-scope documents
// never take a place in the result. Snippets are made for the hits only.
func (b *pgDB) search(ctx context.Context, tenant string, words, globs, excl []string, limit int) ([]Hit, error) {
	hits := []Hit{}
	err := b.inTenant(ctx, "search", tenant, func(tx pgx.Tx) error {
		var likes []string
		for _, g := range globs {
			likes = append(likes, likePrefix(g))
		}
		rows, err := tx.Query(ctx, `SELECT path, ts_rank(tsv, q), content_hash
			FROM memory_docs, plainto_tsquery('simple', $2) AS q
			WHERE tenant_id = $1 AND NOT body_withheld AND tsv @@ q AND path LIKE ANY ($3)
			ORDER BY ts_rank(tsv, q) DESC, path`, tenant, strings.Join(words, " "), likes)
		if err != nil {
			return err
		}
		for rows.Next() {
			var h Hit
			var score float32
			if err := rows.Scan(&h.Path, &score, &h.ContentHash); err != nil {
				rows.Close()
				return err
			}
			if !matchAny(h.Path, globs) || matchAny(h.Path, excl) {
				continue
			}
			h.Score = float64(score)
			hits = append(hits, h)
			if len(hits) == limit {
				break
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		return b.snippets(ctx, tx, tenant, words, hits)
	})
	if err != nil {
		return nil, err
	}
	return hits, nil
}

// snippets sets each hit's snippet (snippet) from the first
// SnippetChars characters of its body; no more of a body is read.
func (b *pgDB) snippets(ctx context.Context, tx pgx.Tx, tenant string, words []string, hits []Hit) error {
	if len(hits) == 0 {
		return nil
	}
	paths := make([]string, len(hits))
	for i, h := range hits {
		paths[i] = h.Path
	}
	heads := map[string][]byte{}
	rows, err := tx.Query(ctx, `SELECT path, substring(body FROM 1 FOR $3) FROM memory_docs WHERE tenant_id = $1 AND path = ANY ($2)`,
		tenant, paths, utf8.UTFMax*SnippetChars)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var p string
		var head []byte
		if err := rows.Scan(&p, &head); err != nil {
			return err
		}
		heads[p] = head
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for i, h := range hits {
		hits[i].Snippet = snippet(heads[h.Path], words)
	}
	return nil
}

// searchText is what the index reads of a body: PostgreSQL
// text holds no NUL.
func searchText(body []byte) string { return strings.ReplaceAll(string(body), "\x00", " ") }

// likePrefix is a LIKE pattern for the paths glob g can match: its literal
// part up to the first glob character, then anything.
func likePrefix(g string) string {
	lit := g
	if i := strings.IndexAny(g, `*?[{\`); i >= 0 {
		lit = g[:i]
	}
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(lit) + "%"
}

// indexPrefix is the part of a body that search indexes: its first
// IndexChars characters. It also keeps PostgreSQL's tsvector, which holds
// at most 1 MiB of lexemes, within bounds: a character gives at most 4
// bytes of lexeme, and the parser emits a compound word both whole and in
// parts.
func indexPrefix[T string | []byte](body T) T { return prefixChars(body, IndexChars) }

// prefixChars is the first n characters of UTF-8 text (all of it when
// shorter); a character cut off at the end of text does not count.
func prefixChars[T string | []byte](text T, n int) T {
	c := 0
	for i := 0; i < len(text); i++ {
		if text[i]&0xC0 != 0x80 { // the first byte of a character
			if c == n {
				return text[:i]
			}
			c++
		}
	}
	return text
}

// isStatementTimeout reports PostgreSQL's query_canceled (a statement
// over statement_timeout).
func isStatementTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "57014"
}

// pgTransient reports a failure a later call may not meet. Anything but
// the server's own answer is the connection's (refused, lost, closed,
// timed out); of the server's answers, a connection refused or closed
// (class 08), the server short of resources (class 53), shutting down or
// starting (57P01..57P03), a serialization failure or a deadlock.
func pgTransient(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true
	}
	switch {
	case strings.HasPrefix(pe.Code, "08"), strings.HasPrefix(pe.Code, "53"):
		return true
	}
	switch pe.Code {
	case "57P01", "57P02", "57P03", "40001", "40P01":
		return true
	}
	return false
}
