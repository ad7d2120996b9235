package memory

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Search runs a full-text query over the tenant's documents whose canonical
// path matches one of scopes and none of excludes (the caller's
// disallowed patterns), best match first (bm25), at most limit hits
// (limit is clamped to 1..MaxLimit). The query is plain words: every word must
// occur (AND); FTS5 operators, quotes, prefixes, column filters and NEAR are
// not syntax here, their punctuation separates words and keywords like OR are
// ordinary words. A query with no words is ErrInvalid; no usable scope is
// ErrScope. Withheld (compensation) bodies are never indexed, so they are
// never found.
//
// The tenant, scope and withheld filters are all in the WHERE clause, which
// SQL applies before ORDER BY and LIMIT: out-of-scope documents cannot push
// in-scope ones out of the result, however well they rank.
//
// Known limit: bm25's term statistics (document count, term frequencies
// across documents, average length) come from the whole index, every tenant
// included, so scores and the order of multi-word results shift slightly
// with other tenants' content. No other tenant's path, body or hash is ever
// returned; a per-tenant index would remove the statistical side channel.
func (s *Store) Search(ctx context.Context, tenant, query string, scopes, excludes []string, limit int) ([]Hit, error) {
	if err := checkID("tenant", tenant, true); err != nil {
		return nil, err
	}
	words, err := queryWords(query)
	if err != nil {
		return nil, err
	}
	globs := compileScopes(scopes)
	if len(globs) == 0 {
		return nil, fmt.Errorf("%w: no memory scopes allowed", ErrScope)
	}
	// An exclusion that does not compile would show what it hides: refuse.
	excl := compileScopes(excludes)
	if len(excl) != len(excludes) {
		return nil, fmt.Errorf("%w: an excluded scope is not a valid memory glob", ErrScope)
	}
	return s.b.search(ctx, tenant, words, globs, excl, min(max(limit, 1), MaxLimit))
}

func (b *sqliteDB) search(ctx context.Context, tenant string, words, globs, excl []string, limit int) ([]Hit, error) {
	rows, err := b.db.QueryContext(ctx, `
		SELECT d.path, -bm25(docs_fts), snippet(docs_fts, 0, '', '', '…', 24), d.content_hash
		FROM docs_fts JOIN docs AS d ON d.id = docs_fts.rowid
		WHERE docs_fts MATCH ?1
		  AND d.tenant_id = ?2
		  AND d.body_withheld = 0
		  AND `+scopeFunc+`(d.path, ?3) = 1
		  AND (?5 = '' OR `+scopeFunc+`(d.path, ?5) = 0)
		ORDER BY bm25(docs_fts), d.path
		LIMIT ?4`,
		ftsMatch(words), tenant, strings.Join(globs, "\n"), limit, strings.Join(excl, "\n"))
	if err != nil {
		return nil, dbErr(ctx, "search", err)
	}
	defer rows.Close()
	hits := []Hit{}
	for rows.Next() {
		var h Hit
		if err := rows.Scan(&h.Path, &h.Score, &h.Snippet, &h.ContentHash); err != nil {
			return nil, dbErr(ctx, "search", err)
		}
		hits = append(hits, h)
	}
	if err := rows.Err(); err != nil {
		return nil, dbErr(ctx, "search", err)
	}
	return hits, nil
}

// queryWords turns user input into the words a search must all find.
// Words are runs of letters, digits and private-use characters (the
// unicode61 tokenizer's token characters); everything else separates them,
// so no input is ever read as query syntax by either backend.
func queryWords(q string) ([]string, error) {
	switch {
	case len(q) > MaxQueryBytes:
		return nil, fmt.Errorf("%w: query is longer than %d bytes", ErrInvalid, MaxQueryBytes)
	case !utf8.ValidString(q):
		return nil, fmt.Errorf("%w: query is not valid UTF-8", ErrInvalid)
	}
	words := strings.FieldsFunc(q, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsNumber(r) && !unicode.Is(unicode.Co, r)
	})
	switch {
	case len(words) == 0:
		return nil, fmt.Errorf("%w: query has no words", ErrInvalid)
	case len(words) > MaxQueryTerms:
		return nil, fmt.Errorf("%w: query has more than %d words", ErrInvalid, MaxQueryTerms)
	}
	return words, nil
}

// ftsMatch is the FTS5 MATCH expression "all of these words": each word is
// written as an FTS5 string ("word"), so it is never read as an operator
// (AND, OR, NOT, NEAR), a column filter or a prefix query, and since a word
// holds no '"' the quoting cannot be broken.
func ftsMatch(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = `"` + w + `"`
	}
	return strings.Join(q, " AND ")
}
