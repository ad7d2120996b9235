package memory

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

const (
	tenantA = "7d3c5a0e-0000-4000-8000-00000000000a"
	tenantB = "7d3c5a0e-0000-4000-8000-00000000000b"
)

var all = []string{"**"}

func newStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func emit(t *testing.T, s *Store, tenant, path, body string) Doc {
	t.Helper()
	d, err := s.Emit(context.Background(), Entry{
		Tenant: tenant, Path: path, Body: body, Scopes: all,
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", InvocationID: "inv-1", SkillID: "memory-capture",
	})
	if err != nil {
		t.Fatalf("Emit(%s, %q): %v", tenant, path, err)
	}
	return d
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func paths(hits []Hit) []string {
	var out []string
	for _, h := range hits {
		out = append(out, h.Path)
	}
	return out
}

func TestReadEmitRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		body := "first line\nsecond line, ünïcode and a \x00 nul"
		got, err := s.Emit(ctx, Entry{
			Tenant: tenantA, Path: "/notes//./x.md", Body: body, Scopes: []string{"notes/*"},
			TraceID: "trace-1", InvocationID: "inv-1", SkillID: "skill-1",
		})
		if err != nil {
			t.Fatal(err)
		}
		if got.Path != "notes/x.md" || got.Body != body || got.ContentHash != sha(body) || got.BodyWithheld {
			t.Fatalf("Emit returned %+v", got)
		}
		rd, err := s.Read(ctx, tenantA, "notes/x.md", []string{"notes/*"})
		if err != nil {
			t.Fatal(err)
		}
		if rd != got {
			t.Fatalf("Read = %+v\nEmit = %+v", rd, got)
		}
		if rd.TraceID != "trace-1" || rd.InvocationID != "inv-1" || rd.SkillID != "skill-1" || rd.UpdatedAt.IsZero() {
			t.Fatalf("metadata not kept: %+v", rd)
		}

		// Overwrite replaces body, hash and metadata.
		got2, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "notes/x.md", Body: "v2", Scopes: all,
			TraceID: "trace-2", InvocationID: "inv-2", SkillID: "skill-2"})
		if err != nil {
			t.Fatal(err)
		}
		rd, err = s.Read(ctx, tenantA, "notes/x.md", all)
		if err != nil {
			t.Fatal(err)
		}
		if rd != got2 || rd.Body != "v2" || rd.ContentHash != sha("v2") || rd.TraceID != "trace-2" {
			t.Fatalf("after overwrite Read = %+v", rd)
		}

		// The empty body is a document too.
		e := emit(t, s, tenantA, "notes/empty", "")
		if e.ContentHash != sha("") {
			t.Fatalf("empty body hash %s", e.ContentHash)
		}
	})
}

func TestScopes(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		for _, p := range []string{"notes", "notes/a", "notes/a/b", "secret", "notesX/a", "people/founders/comp"} {
			emit(t, s, tenantA, p, "body of "+p)
		}
		cases := []struct {
			scopes []string
			path   string
			want   error // nil: readable
		}{
			{[]string{"notes/*"}, "notes/a", nil},
			{[]string{"notes/*"}, "notes/a/b", ErrScope},
			{[]string{"notes/**"}, "notes/a", nil},
			{[]string{"notes/**"}, "notes/a/b", nil},
			{[]string{"notes/**"}, "notes", nil}, // doublestar: "dir/**" also matches dir
			{[]string{"notes/*"}, "notes", ErrScope},
			{[]string{"notes/{a,z}"}, "notes/a", nil},
			{[]string{"*"}, "notes/a", ErrScope},
			{[]string{"notes/*"}, "notesX/a", ErrScope},
			{[]string{"notes/**"}, "notes/../secret", ErrScope},
			{[]string{"notes/**"}, "notes/a/../../secret", ErrScope},
			{[]string{"notes/**"}, "notes/./a/../../people/founders/comp", ErrScope},
			{[]string{"secret"}, "notes/../secret", nil},
			{[]string{"notes/*"}, "/notes/a", nil},
			{[]string{"notes/*"}, "//notes//a", nil},
			{[]string{"notes/*"}, "notes/./a/", nil},
			{[]string{"/notes/*"}, "notes/a", nil},             // scopes are canonicalised too
			{[]string{"notes/x/../*"}, "notes/a", nil},         // ...both sides
			{[]string{"notes/*", "secret"}, "secret", nil},     // any scope may match
			{[]string{"../notes/*"}, "notes/a", ErrScope},      // a bad scope grants nothing
			{[]string{"notes/["}, "notes/a", ErrScope},         // nor does an invalid pattern
			{nil, "notes/a", ErrScope},                         // no scopes: nothing allowed
			{[]string{}, "notes/a", ErrScope},                  //
			{[]string{"**"}, "../secret", ErrInvalid},          // climbs above the root
			{[]string{"**"}, "notes/../../secret", ErrInvalid}, //
			{[]string{"**"}, "/", ErrInvalid},                  // empty after canonicalisation
			{[]string{"**"}, "notes/\x01", ErrInvalid},         // control character
			{[]string{"**"}, "notes/\xff", ErrInvalid},         // not UTF-8
			{[]string{"**"}, strings.Repeat("a/", 600), ErrInvalid},
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%v/%s", c.scopes, c.path), func(t *testing.T) {
				_, err := s.Read(context.Background(), tenantA, c.path, c.scopes)
				if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
					t.Fatalf("Read: got %v, want %v", err, c.want)
				}
				// Emit applies the same check.
				_, err = s.Emit(context.Background(), Entry{Tenant: tenantA, Path: c.path, Body: "x", Scopes: c.scopes})
				if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
					t.Fatalf("Emit: got %v, want %v", err, c.want)
				}
			})
		}
	})
}

func TestScopeDeniedEmitStoresNothing(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		_, err := s.Emit(context.Background(), Entry{Tenant: tenantA, Path: "notes/a/b", Body: "nope", Scopes: []string{"notes/*"}})
		if !errors.Is(err, ErrScope) {
			t.Fatalf("got %v", err)
		}
		if _, err := s.Read(context.Background(), tenantA, "notes/a/b", all); !errors.Is(err, ErrNotFound) {
			t.Fatalf("refused emit was stored: %v", err)
		}
	})
}

func TestScopeCheckedBeforeExistence(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		emit(t, s, tenantA, "secret/x", "s")
		ctx := context.Background()
		if _, err := s.Read(ctx, tenantA, "secret/x", []string{"notes/**"}); !errors.Is(err, ErrScope) {
			t.Fatalf("existing out-of-scope doc: %v", err)
		}
		if _, err := s.Read(ctx, tenantA, "secret/missing", []string{"notes/**"}); !errors.Is(err, ErrScope) {
			t.Fatalf("missing out-of-scope doc: %v", err)
		}
		if _, err := s.Read(ctx, tenantA, "notes/missing", []string{"notes/**"}); !errors.Is(err, ErrNotFound) {
			t.Fatalf("missing in-scope doc: %v", err)
		}
	})
}

func TestTenantIsolation(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		a := emit(t, s, tenantA, "notes/plan", "quarterly acquisition plan")

		// Read: another tenant's document is simply not there.
		if _, err := s.Read(ctx, tenantB, "notes/plan", all); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrScope) {
			t.Fatalf("tenant B read A's doc: %v", err)
		}
		// Search: B finds nothing of A's.
		hits, err := s.Search(ctx, tenantB, "acquisition", all, nil, 100)
		if err != nil || len(hits) != 0 {
			t.Fatalf("tenant B search: %v %v", hits, err)
		}
		// Emit at the same path by B makes B's own document; A's is untouched.
		b, err := s.Emit(ctx, Entry{Tenant: tenantB, Path: "notes/plan", Body: "b's plan", Scopes: all, SkillID: "other"})
		if err != nil {
			t.Fatal(err)
		}
		ra, err := s.Read(ctx, tenantA, "notes/plan", all)
		if err != nil || ra != a {
			t.Fatalf("A's doc changed by B's emit: %+v %v", ra, err)
		}
		rb, err := s.Read(ctx, tenantB, "notes/plan", all)
		if err != nil || rb != b {
			t.Fatalf("B's doc: %+v %v", rb, err)
		}
		hits, err = s.Search(ctx, tenantA, "plan", all, nil, 100)
		if err != nil || len(hits) != 1 || hits[0].ContentHash != a.ContentHash {
			t.Fatalf("tenant A search: %+v %v", hits, err)
		}
		// Tenant ids are compared exactly.
		if _, err := s.Read(ctx, strings.ToUpper(tenantA), "notes/plan", all); !errors.Is(err, ErrNotFound) {
			t.Fatalf("case-folded tenant: %v", err)
		}
	})
}

func TestSearchRanking(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		once := emit(t, s, tenantA, "notes/once", "alpha beta gamma delta epsilon")
		twice := emit(t, s, tenantA, "notes/twice", "alpha beta alpha delta epsilon")
		emit(t, s, tenantA, "notes/none", "omega beta gamma delta epsilon")
		hits, err := s.Search(context.Background(), tenantA, "Alpha", all, nil, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := paths(hits); !slices.Equal(got, []string{"notes/twice", "notes/once"}) {
			t.Fatalf("order %v", got)
		}
		if !(hits[0].Score > hits[1].Score && hits[1].Score > 0) {
			t.Fatalf("scores %v, %v", hits[0].Score, hits[1].Score)
		}
		if hits[0].ContentHash != twice.ContentHash || hits[1].ContentHash != once.ContentHash {
			t.Fatal("content hashes")
		}
		if !strings.Contains(hits[0].Snippet, "alpha") {
			t.Fatalf("snippet %q", hits[0].Snippet)
		}
		// AND of words.
		hits, err = s.Search(context.Background(), tenantA, "alpha gamma", all, nil, 10)
		if err != nil || !slices.Equal(paths(hits), []string{"notes/once"}) {
			t.Fatalf("AND: %v %v", paths(hits), err)
		}
	})
}

func TestSearchScopeFilterBeforeLimit(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		// Many out-of-scope docs that rank far better than the one in scope.
		for i := range 40 {
			emit(t, s, tenantA, fmt.Sprintf("secret/%02d", i), "needle needle needle needle needle")
			emit(t, s, tenantA, fmt.Sprintf("notes/deep/%02d", i), "needle needle needle needle needle")
			emit(t, s, tenantB, fmt.Sprintf("notes/%02d", i), "needle needle needle needle needle")
		}
		emit(t, s, tenantA, "notes/mine", "a long document that mentions the needle only once among many other words")
		for _, limit := range []int{1, 5, 100} {
			hits, err := s.Search(context.Background(), tenantA, "needle", []string{"notes/*"}, nil, limit)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(paths(hits), []string{"notes/mine"}) {
				t.Fatalf("limit %d: %v", limit, paths(hits))
			}
		}
		hits, err := s.Search(context.Background(), tenantA, "needle", []string{"notes/**"}, nil, 100)
		if err != nil || len(hits) != 41 {
			t.Fatalf("notes/**: %d hits, %v", len(hits), err)
		}
		for _, h := range hits {
			if !strings.HasPrefix(h.Path, "notes/") {
				t.Fatalf("out of scope hit %q", h.Path)
			}
		}
		if _, err := s.Search(context.Background(), tenantA, "needle", nil, nil, 10); !errors.Is(err, ErrScope) {
			t.Fatalf("no scopes: %v", err)
		}
		if _, err := s.Search(context.Background(), tenantA, "needle", []string{"../x"}, nil, 10); !errors.Is(err, ErrScope) {
			t.Fatalf("only bad scopes: %v", err)
		}
	})
}

// TestSearchExcludesBeforeLimit: excluded paths (a skill's disallowed
// patterns) never come back, and are left out before the limit, so the
// allowed document still does even when many excluded ones rank above it;
// an exclusion that is not a valid glob refuses the search.
func TestSearchExcludesBeforeLimit(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		for i := range 40 {
			emit(t, s, tenantA, fmt.Sprintf("notes/private/%02d", i), "needle needle needle needle needle")
		}
		emit(t, s, tenantA, "notes/mine", "a long document that mentions the needle only once among many other words")
		for _, limit := range []int{1, 5} {
			hits, err := s.Search(context.Background(), tenantA, "needle", []string{"notes/**"}, []string{"notes/private/**"}, limit)
			if err != nil || !slices.Equal(paths(hits), []string{"notes/mine"}) {
				t.Fatalf("limit %d: %v %v", limit, paths(hits), err)
			}
		}
		if _, err := s.Search(context.Background(), tenantA, "needle", []string{"notes/**"}, []string{"../x"}, 5); !errors.Is(err, ErrScope) {
			t.Fatalf("an invalid exclusion: %v, want ErrScope", err)
		}
	})
}

func TestSearchQuerySyntaxIsInert(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		emit(t, s, tenantA, "notes/ab", "alpha beta")
		emit(t, s, tenantA, "notes/a", "alpha only here")
		emit(t, s, tenantA, "notes/alphabet", "alphabet soup")
		emit(t, s, tenantA, "notes/secret", "secret payroll")
		emit(t, s, tenantA, "hidden/x", "alpha beta secret") // out of scope
		scopes := []string{"notes/*"}

		cases := map[string][]string{ // query → exactly these paths
			`alpha`:                  {"notes/a", "notes/ab"},
			`alpha"`:                 {"notes/a", "notes/ab"},
			`"alpha`:                 {"notes/a", "notes/ab"},
			`"alpha" OR "secret"`:    {}, // OR is a word; no doc has all three
			`alpha OR secret`:        {},
			`alph*`:                  {}, // no prefix queries
			`alpha*`:                 {"notes/a", "notes/ab"},
			`NEAR(alpha beta)`:       {}, // "near" is a word
			`NEAR(`:                  {},
			`alpha -beta`:            {"notes/ab"}, // "-" is not NOT
			`alpha NOT beta`:         {},
			`body:alpha`:             {},
			`{body}:alpha`:           {},
			`alpha:`:                 {"notes/a", "notes/ab"},
			`*`:                      nil, // no words: ErrInvalid
			`"`:                      nil,
			`-`:                      nil,
			`:`:                      nil,
			`NEAR(` + `"`:            {},
			`^alpha`:                 {"notes/a", "notes/ab"},
			`alpha AND`:              {},
			`beta) OR (secret`:       {},
			`'; DROP TABLE docs; --`: {},
			`alpha' OR '1'='1`:       {},
			`ALPHA BETA`:             {"notes/ab"},
			"alpha\u00a0beta":        {"notes/ab"},
			`secret`:                 {"notes/secret"},
			`a"b`:                    {},
			`""alpha""`:              {"notes/a", "notes/ab"},
		}
		for q, want := range cases {
			t.Run(q, func(t *testing.T) {
				hits, err := s.Search(context.Background(), tenantA, q, scopes, nil, 100)
				if want == nil {
					if !errors.Is(err, ErrInvalid) {
						t.Fatalf("got %v, want ErrInvalid", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("error: %v", err)
				}
				got := paths(hits)
				slices.Sort(got)
				if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("got %v, want %v", got, want)
				}
			})
		}
		// The store still works and its index is intact.
		sqliteIntegrity(t, s)
	})
}

func TestSearchInvalid(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		emit(t, s, tenantA, "notes/a", "alpha")
		for name, q := range map[string]string{
			"empty":      "",
			"spaces":     "  \t\n ",
			"punct":      `"*-:()^{}`,
			"not utf8":   "alpha \xff",
			"too long":   strings.Repeat("a", MaxQueryBytes+1),
			"many words": strings.Repeat("w ", MaxQueryTerms+1),
		} {
			if _, err := s.Search(context.Background(), tenantA, q, all, nil, 10); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: got %v, want ErrInvalid", name, err)
			}
		}
		if _, err := s.Search(context.Background(), "", "alpha", all, nil, 10); !errors.Is(err, ErrInvalid) {
			t.Errorf("empty tenant: %v", err)
		}
	})
}

func TestSearchLimitClamp(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		for i := range 120 {
			emit(t, s, tenantA, fmt.Sprintf("notes/%03d", i), "common word")
		}
		for limit, want := range map[int]int{-5: 1, 0: 1, 1: 1, 7: 7, 100: 100, 101: 100, 1 << 30: 100} {
			hits, err := s.Search(context.Background(), tenantA, "common", all, nil, limit)
			if err != nil || len(hits) != want {
				t.Errorf("limit %d: %d hits (want %d), %v", limit, len(hits), want, err)
			}
		}
	})
}

// dbBytes checkpoints the WAL into the main file and returns the bytes of
// every file the store has on disk.
func dbBytes(t *testing.T, s *Store, dir string) []byte {
	t.Helper()
	if _, err := sq(s).Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
		b, err := os.ReadFile(filepath.Join(dir, FileName+suffix))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	return all
}

func TestCompensationBodyNeverStored(t *testing.T) {
	s, dir := newStore(t)
	ctx := context.Background()
	const secret = "Founder salary zanzibarquux 987654321 tangerinewombat"
	d, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "people/founders/compensation", Body: secret,
		Compensation: true, Scopes: []string{"people/**"}, TraceID: "t", InvocationID: "i", SkillID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Body != "" || !d.BodyWithheld || d.ContentHash != sha(secret) {
		t.Fatalf("Emit returned %+v", d)
	}
	rd, err := s.Read(ctx, tenantA, "people/founders/compensation", all)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Body != "" || !rd.BodyWithheld || rd.ContentHash != sha(secret) || rd.TraceID != "t" || rd.SkillID != "s" {
		t.Fatalf("Read %+v", rd)
	}
	for _, q := range []string{"tangerinewombat", "zanzibarquux", "987654321", "founder salary"} {
		hits, err := s.Search(ctx, tenantA, q, all, nil, 100)
		if err != nil || len(hits) != 0 {
			t.Fatalf("search %q found the withheld body: %v %v", q, hits, err)
		}
	}
	// Positive control: a plain body is found by the same scan.
	emit(t, s, tenantA, "notes/control", "visiblecanary")
	raw := dbBytes(t, s, dir)
	if !bytes.Contains(raw, []byte("visiblecanary")) {
		t.Fatal("the scan does not see stored bodies")
	}
	for _, w := range []string{"tangerinewombat", "zanzibarquux", "987654321"} {
		if bytes.Contains(bytes.ToLower(raw), []byte(w)) {
			t.Fatalf("%q found in the database files", w)
		}
	}
	if !bytes.Contains(raw, []byte(sha(secret))) {
		t.Fatal("content hash not in the database file (is the scan reading the right file?)")
	}
}

func TestCompensationOverwrite(t *testing.T) {
	s, dir := newStore(t)
	ctx := context.Background()
	// A plain body later replaced by a compensation emit: gone from the table,
	// the index and (secure_delete) the file.
	emit(t, s, tenantA, "people/x", "marmaladeflamingo earlier plain text")
	if _, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "people/x", Body: "pineapplegiraffe", Compensation: true, Scopes: all}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"marmaladeflamingo", "pineapplegiraffe"} {
		if hits, err := s.Search(ctx, tenantA, q, all, nil, 10); err != nil || len(hits) != 0 {
			t.Fatalf("search %q: %v %v", q, hits, err)
		}
	}
	raw := bytes.ToLower(dbBytes(t, s, dir))
	for _, w := range []string{"marmaladeflamingo", "pineapplegiraffe"} {
		if bytes.Contains(raw, []byte(w)) {
			t.Fatalf("%q still in the database files", w)
		}
	}
	// And back: a plain emit over a withheld doc is stored and searchable.
	emit(t, s, tenantA, "people/x", "kiwi plain again")
	rd, err := s.Read(ctx, tenantA, "people/x", all)
	if err != nil || rd.BodyWithheld || rd.Body != "kiwi plain again" {
		t.Fatalf("Read %+v %v", rd, err)
	}
	if hits, err := s.Search(ctx, tenantA, "kiwi", all, nil, 10); err != nil || len(hits) != 1 {
		t.Fatalf("search kiwi: %v %v", hits, err)
	}
	if _, err := sq(s).Exec(`INSERT INTO docs_fts (docs_fts) VALUES ('integrity-check')`); err != nil {
		t.Fatal(err)
	}
}

func TestBodyLimits(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		big := strings.Repeat("x", MaxBodyBytes+1)
		if _, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "notes/big", Body: big, Scopes: all}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("over cap: %v", err)
		}
		if _, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "notes/big", Body: big, Compensation: true, Scopes: all}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("over cap, compensation: %v", err)
		}
		if _, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "notes/big", Body: big[1:], Scopes: all}); err != nil {
			t.Fatalf("at cap: %v", err)
		}
		if _, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "notes/bad", Body: "a\xffb", Scopes: all}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("invalid utf-8: %v", err)
		}
		for name, e := range map[string]Entry{
			"empty tenant":   {Path: "notes/a", Scopes: all},
			"control tenant": {Tenant: "a\nb", Path: "notes/a", Scopes: all},
			"long trace":     {Tenant: tenantA, Path: "notes/a", Scopes: all, TraceID: strings.Repeat("t", MaxIDBytes+1)},
			"control skill":  {Tenant: tenantA, Path: "notes/a", Scopes: all, SkillID: "s\x00"},
		} {
			if _, err := s.Emit(ctx, e); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v", name, err)
			}
		}
		if _, err := s.Read(ctx, "", "notes/a", all); !errors.Is(err, ErrInvalid) {
			t.Errorf("read, empty tenant: %v", err)
		}
	})
}

func TestConcurrentEmitAndSearch(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		const workers, each = 50, 5
		var wg sync.WaitGroup
		errs := make(chan error, workers*each*3)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tenant := []string{tenantA, tenantB}[w%2]
				for i := range each {
					p := fmt.Sprintf("notes/w%02d/%d", w, i)
					if _, err := s.Emit(ctx, Entry{Tenant: tenant, Path: p, Body: fmt.Sprintf("shared token w%02d", w), Scopes: all}); err != nil {
						errs <- fmt.Errorf("emit %s: %w", p, err)
					}
					hits, err := s.Search(ctx, tenant, "shared token", all, nil, 100)
					if err != nil {
						errs <- fmt.Errorf("search: %w", err)
					}
					for _, h := range hits {
						var hw int
						fmt.Sscanf(h.Path, "notes/w%02d/", &hw)
						if hw%2 != w%2 {
							errs <- fmt.Errorf("tenant %s saw %s", tenant, h.Path)
						}
					}
					if _, err := s.Read(ctx, tenant, p, all); err != nil {
						errs <- fmt.Errorf("read %s: %w", p, err)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := countDocs(t, s); n != workers*each {
			t.Fatalf("%d docs, want %d", n, workers*each)
		}
		hits, err := s.Search(ctx, tenantB, "w07", all, nil, 100) // odd workers write as tenant B
		if err != nil || len(hits) != each {
			t.Fatalf("w07: %d hits, %v", len(hits), err)
		}
		sqliteIntegrity(t, s)
	})
}

func TestReopenKeepsData(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	d := emit(t, s, tenantA, "notes/keep", "persistent pineapple")
	w, err := s.Emit(context.Background(), Entry{Tenant: tenantA, Path: "notes/comp", Body: "withheld", Compensation: true, Scopes: all})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if rd, err := s.Read(context.Background(), tenantA, "notes/keep", all); err != nil || rd != d {
		t.Fatalf("after reopen: %+v %v", rd, err)
	}
	if rd, err := s.Read(context.Background(), tenantA, "notes/comp", all); err != nil || rd != w {
		t.Fatalf("withheld after reopen: %+v %v", rd, err)
	}
	if hits, err := s.Search(context.Background(), tenantA, "pineapple", all, nil, 10); err != nil || len(hits) != 1 {
		t.Fatalf("search after reopen: %v %v", hits, err)
	}
}

func TestOpenFileModesAndPragmas(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "nested")
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	emit(t, s, tenantA, "notes/a", "x")
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v %v", fi.Mode(), err)
	}
	for _, f := range []string{FileName, FileName + "-wal"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s mode %v %v", f, fi, err)
		}
	}
	var mode string
	var sync int
	if err := sq(s).QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode %q %v", mode, err)
	}
	if err := sq(s).QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Fatalf("synchronous %d %v", sync, err)
	}

	// An existing, too-open file is tightened.
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, FileName), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(dir2)
	if err != nil {
		t.Fatal(err)
	}
	s2.Close()
	if fi, _ := os.Stat(filepath.Join(dir2, FileName)); fi.Mode().Perm() != 0o600 {
		t.Fatalf("existing file mode %v", fi.Mode())
	}
}

func TestOpenUnusable(t *testing.T) {
	check := func(t *testing.T, dir string) {
		t.Helper()
		s, err := Open(dir)
		if err == nil {
			s.Close()
			t.Fatal("Open succeeded")
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("not ErrUnavailable: %v", err)
		}
		if strings.Contains(err.Error(), dir) || strings.Contains(err.Error(), os.TempDir()) {
			t.Fatalf("error carries a host path: %v", err)
		}
	}
	t.Run("corrupt", func(t *testing.T) {
		dir := t.TempDir()
		os.WriteFile(filepath.Join(dir, FileName), bytes.Repeat([]byte("not a database "), 512), 0o600)
		check(t, dir)
	})
	t.Run("symlink", func(t *testing.T) {
		dir := t.TempDir()
		target := filepath.Join(t.TempDir(), "elsewhere.db")
		os.WriteFile(target, nil, 0o600)
		if err := os.Symlink(target, filepath.Join(dir, FileName)); err != nil {
			t.Fatal(err)
		}
		check(t, dir)
	})
	t.Run("dir is a file", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "file")
		os.WriteFile(f, []byte("x"), 0o600)
		check(t, f)
	})
	t.Run("db is a dir", func(t *testing.T) {
		dir := t.TempDir()
		os.Mkdir(filepath.Join(dir, FileName), 0o700)
		check(t, dir)
	})
	t.Run("newer schema", func(t *testing.T) {
		dir := t.TempDir()
		s, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		sq(s).Exec(`PRAGMA user_version = 99`)
		s.Close()
		check(t, dir)
	})
	t.Run("empty", func(t *testing.T) {
		if _, err := Open(""); !errors.Is(err, ErrUnavailable) {
			t.Fatal(err)
		}
	})
}

func TestCanceledContext(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		emit(t, s, tenantA, "notes/a", "alpha")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Read(ctx, tenantA, "notes/a", all); !errors.Is(err, context.Canceled) {
			t.Errorf("read: %v", err)
		}
		if _, err := s.Search(ctx, tenantA, "alpha", all, nil, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("search: %v", err)
		}
		if _, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "notes/b", Body: "b", Scopes: all}); !errors.Is(err, context.Canceled) {
			t.Errorf("emit: %v", err)
		}
	})
}

// TestConcurrentFirstOpen: many opens of one fresh state dir at once (as
// parallel `skill run` processes do) all succeed.
func TestConcurrentFirstOpen(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := Open(dir)
			if err != nil {
				errs <- err
				return
			}
			s.Close()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
