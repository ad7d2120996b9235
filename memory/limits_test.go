package memory

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// uniqueWords is n bytes of distinct words (base-36 counters after a
// prefix), the body PostgreSQL once refused as too long for a tsvector.
func uniqueWords(prefix string, n int) string {
	var b strings.Builder
	for i := 0; ; i++ {
		w := prefix + strconv.FormatInt(int64(i), 36) + " "
		if b.Len()+len(w) > n {
			break
		}
		b.WriteString(w)
	}
	return b.String() + strings.Repeat("z", n-b.Len())
}

// One contract on both backends: a body of MaxBodyBytes is stored and
// found whatever its words (PostgreSQL refused ~1 MB of distinct words
// with "string is too long for tsvector", reported as "unavailable; try
// again later"); one byte more is ErrTooLarge naming the limit; search
// indexes the first IndexChars characters on both.
func TestBodyLimitSameOnBothBackends(t *testing.T) {
	bodies := map[string]string{
		"distinct words": uniqueWords("λ", MaxBodyBytes),
		// Compound words are indexed whole and in parts, and these
		// letters lengthen when lower-cased: the most lexeme bytes per
		// body byte PostgreSQL's parser makes.
		"compound words": uniqueWords("ȺȺȺȺ-ȾȾȾȾ-𐐀𐐀-", MaxBodyBytes),
	}
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for name, body := range bodies {
			if len(body) != MaxBodyBytes {
				t.Fatalf("%s: %d bytes", name, len(body))
			}
			d, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "notes/" + strings.Fields(name)[0], Body: body, Scopes: all})
			if err != nil {
				t.Errorf("%s: a body of %d bytes (MaxBodyBytes): %v", name, len(body), err)
				continue
			}
			if got, err := s.Read(ctx, tenantA, d.Path, all); err != nil || got.Body != body {
				t.Errorf("%s: read back: %v", name, err)
			}
		}
		// The first word is found; a word past the first IndexChars
		// characters is not, on either backend.
		if hits, err := s.Search(ctx, tenantA, "λ0", all, nil, 10); err != nil || fmt.Sprint(paths(hits)) != "[notes/distinct]" {
			t.Errorf("the first word: %v, %v", paths(hits), err)
		}
		far := "λ" + strconv.FormatInt(int64(IndexChars), 36) // past IndexChars characters (each word is 3+ of them)
		if !strings.Contains(bodies["distinct words"], " "+far+" ") {
			t.Fatalf("%s is not in the body", far)
		}
		if hits, err := s.Search(ctx, tenantA, far, all, nil, 10); err != nil || len(hits) != 0 {
			t.Errorf("a word past IndexChars: %v, %v; want no hit", paths(hits), err)
		}

		_, err := s.Emit(ctx, Entry{Tenant: tenantA, Path: "notes/over", Body: strings.Repeat("a", MaxBodyBytes+1), Scopes: all})
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), strconv.Itoa(MaxBodyBytes)) {
			t.Errorf("a body of MaxBodyBytes+1: %v, want ErrTooLarge naming %d", err, MaxBodyBytes)
		}
		for _, q := range []string{strings.Repeat("a", MaxQueryBytes+1), strings.Repeat("a ", MaxQueryTerms+1)} {
			if _, err := s.Search(ctx, tenantA, q, all, nil, 10); !errors.Is(err, ErrInvalid) ||
				!(strings.Contains(err.Error(), strconv.Itoa(MaxQueryBytes)) || strings.Contains(err.Error(), strconv.Itoa(MaxQueryTerms))) {
				t.Errorf("a query over its limits: %v, want ErrInvalid naming the limit", err)
			}
		}
	})
}

// A store that refuses a write for good (here a trigger the operator's
// schema left) is ErrFault, not ErrUnavailable: a retry will not help.
func TestPermanentStoreErrorIsFault(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		switch b := s.b.(type) {
		case *sqliteDB:
			if _, err := b.db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON docs BEGIN SELECT RAISE(ABORT, 'refused'); END`); err != nil {
				t.Fatal(err)
			}
		case *pgDB:
			emit(t, s, tenantB, "notes/first", "migrates the schema")
			db, _ := pgSuper.Load(s)
			pgServer.For(t).Psql(db.(string), `CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'refused'; END$$;
				CREATE TRIGGER refuse BEFORE INSERT ON memory_docs FOR EACH ROW EXECUTE FUNCTION refuse();`)
		}
		_, err := s.Emit(context.Background(), Entry{Tenant: tenantA, Path: "notes/x", Body: "x", Scopes: all})
		if !errors.Is(err, ErrFault) || errors.Is(err, ErrUnavailable) {
			t.Errorf("a write the store refuses: %v, want ErrFault and not ErrUnavailable", err)
		}
	})
}

// PostgreSQL away is still ErrUnavailable ("try again later"), not a
// fault: nothing listens on the port.
func TestPostgresAwayIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@"+addr+"/x?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := OpenPostgres(pool, nil)
	_, err = s.Emit(context.Background(), Entry{Tenant: tenantA, Path: "notes/x", Body: "x", Scopes: all})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrFault) {
		t.Errorf("PostgreSQL away: %v, want ErrUnavailable", err)
	}
}

// A pooled connection the server ended (as a restart does) is ErrUnavailable
// too, not a fault.
func TestPostgresConnectionEndedIsUnavailable(t *testing.T) {
	s := newPGStore(t)
	emit(t, s, tenantA, "notes/x", "x")
	db, _ := pgSuper.Load(s)
	pgServer.For(t).Psql("postgres", `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = '`+db.(string)+`'`)
	_, err := s.Read(context.Background(), tenantA, "notes/x", all)
	t.Logf("read after the server ended the connection: %v", err)
	if err != nil && (!errors.Is(err, ErrUnavailable) || errors.Is(err, ErrFault)) {
		t.Errorf("a read on a connection the server ended: %v, want ErrUnavailable (or success on a new one)", err)
	}
}
