package memory

import (
	"context"
	"fmt"
	"slices"
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
// ordinary words. Only the first IndexChars characters of a body are
// indexed, and a hit's snippet comes from its first SnippetChars, so a
// search's work does not grow with the size of the bodies. A query with no words is ErrInvalid; no usable scope is
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
	var hits []Hit
	err = s.do(ctx, tenant, "search", false, func(ctx context.Context) (err error) {
		hits, err = s.b.search(ctx, tenant, words, globs, excl, min(max(limit, 1), MaxLimit))
		return err
	})
	return hits, err
}

func (b *sqliteDB) search(ctx context.Context, tenant string, words, globs, excl []string, limit int) ([]Hit, error) {
	rows, err := b.db.QueryContext(ctx, `
		SELECT d.path, -bm25(docs_fts), substr(CAST(d.body AS BLOB), 1, ?6), d.content_hash
		FROM docs_fts JOIN docs AS d ON d.id = docs_fts.rowid
		WHERE docs_fts MATCH ?1
		  AND d.tenant_id = ?2
		  AND d.body_withheld = 0
		  AND `+scopeFunc+`(d.path, ?3) = 1
		  AND (?5 = '' OR `+scopeFunc+`(d.path, ?5) = 0)
		ORDER BY bm25(docs_fts), d.path
		LIMIT ?4`,
		ftsMatch(words), tenant, strings.Join(globs, "\n"), limit, strings.Join(excl, "\n"), utf8.UTFMax*SnippetChars)
	if err != nil {
		return nil, dbErr(ctx, "search", err)
	}
	defer rows.Close()
	hits := []Hit{}
	for rows.Next() {
		var h Hit
		var head []byte
		if err := rows.Scan(&h.Path, &h.Score, &head, &h.ContentHash); err != nil {
			return nil, dbErr(ctx, "search", err)
		}
		h.Snippet = snippet(head, words)
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
	words := strings.FieldsFunc(q, func(r rune) bool { return !isWordRune(r) })
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

// snippetWords is how many words a snippet shows.
const snippetWords = 24

// snippet is a plain-text excerpt of head, the first bytes of a body: up
// to snippetWords words from the first SnippetChars characters, around the
// first one that is one of words (any case), else from the start; runs of
// space and control characters become one space, and "…" marks text left
// out on either side. Both backends make their snippets here.
func snippet(head []byte, words []string) string {
	text := string(prefixChars(head, SnippetChars))
	type span struct{ start, end int }
	var toks []span
	match := -1
	for i := 0; i < len(text); {
		r, w := utf8.DecodeRuneInString(text[i:])
		if !isWordRune(r) {
			i += w
			continue
		}
		j := i + w
		for j < len(text) {
			r, w := utf8.DecodeRuneInString(text[j:])
			if !isWordRune(r) {
				break
			}
			j += w
		}
		if match < 0 && slices.ContainsFunc(words, func(q string) bool { return strings.EqualFold(q, text[i:j]) }) {
			match = len(toks)
		}
		toks = append(toks, span{i, j})
		i = j
	}
	if len(toks) == 0 {
		return ""
	}
	first := max(0, match-snippetWords/3)
	last := min(len(toks), first+snippetWords)
	first = max(0, last-snippetWords)
	out := strings.Join(strings.FieldsFunc(text[toks[first].start:toks[last-1].end], func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r)
	}), " ")
	if first > 0 {
		out = "…" + out
	}
	if last < len(toks) || len(text) < len(head) {
		out += "…"
	}
	return out
}

// isWordRune says whether r is part of a word: letters, digits and
// private-use characters, as the unicode61 tokenizer and queryWords read.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Co, r)
}
