package memory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
	return &Store{b: &pgDB{pool: pool, prepare: prepare}, now: time.Now}
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

// inTenant runs fn in a transaction scoped to tenant.
func (b *pgDB) inTenant(ctx context.Context, op, tenant string, fn func(pgx.Tx) error) error {
	if err := b.ready(ctx); err != nil {
		return dbErr(ctx, op, err)
	}
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('cyberos.tenant_id', $1, true)`, tenant); err != nil {
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
			searchText(body))
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

// snippets sets each hit's snippet: ts_headline over its body, NULs as
// spaces, up to 24 words, no highlighting markup.
func (b *pgDB) snippets(ctx context.Context, tx pgx.Tx, tenant string, words []string, hits []Hit) error {
	if len(hits) == 0 {
		return nil
	}
	paths := make([]string, len(hits))
	for i, h := range hits {
		paths[i] = h.Path
	}
	bodies := map[string]string{}
	rows, err := tx.Query(ctx, `SELECT path, body FROM memory_docs WHERE tenant_id = $1 AND path = ANY ($2)`, tenant, paths)
	if err != nil {
		return err
	}
	for rows.Next() {
		var p string
		var body []byte
		if err := rows.Scan(&p, &body); err != nil {
			rows.Close()
			return err
		}
		bodies[p] = searchText(body)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	texts := make([]string, len(hits))
	for i, h := range hits {
		texts[i] = bodies[h.Path]
	}
	rows, err = tx.Query(ctx, `SELECT ts_headline('simple', t, plainto_tsquery('simple', $2),
			'StartSel="", StopSel="", MaxWords=24, MinWords=12, ShortWord=0, MaxFragments=1, FragmentDelimiter=" … "')
		FROM unnest($1::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n`, texts, strings.Join(words, " "))
	if err != nil {
		return err
	}
	defer rows.Close()
	for i := 0; rows.Next(); i++ {
		if err := rows.Scan(&hits[i].Snippet); err != nil {
			return err
		}
	}
	return rows.Err()
}

// searchText is what the index and snippets read of a body: PostgreSQL
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
