package statedir

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"cyberos.dev/audit"
)

// ErrNeedsRepair: the state dir's journal and index disagree, or one of
// them is damaged or missing, so the store must not take rows until an
// operator has run the repair command (RepairCommand). It wraps
// ErrUnavailable.
var ErrNeedsRepair = fmt.Errorf("%w: needs repair", ErrUnavailable)

// RepairCommand is the command that checks and repairs the store in dir.
func RepairCommand(dir string) string { return "cyberos audit repair --state-dir " + dir }

// RepairHint is the sentence errors that need a repair end with.
func RepairHint(dir string) string {
	return "check and repair it with `" + RepairCommand(dir) + "` (with the daemon stopped)"
}

// IsCorrupt reports whether err is SQLite's SQLITE_CORRUPT (11) or
// SQLITE_NOTADB (26): the index file is damaged.
func IsCorrupt(err error) bool {
	var coder interface{ Code() int }
	if errors.As(err, &coder) {
		c := coder.Code() & 0xff
		return c == 11 || c == 26
	}
	return false
}

// Reader reads a state dir's store without writing to it: no file is
// created or changed, so it works on a read-only or full state dir (audit
// verify and export). The index is opened read-only; the journal is read
// up to its durable end.
type Reader struct {
	dir     string
	db      *sql.DB  // nil: there is no index
	dbErr   error    // why the index cannot be read
	j       *os.File // nil: there is no journal
	jend    int64    // the journal's durable end
	applied int64    // journal bytes the index says it holds (-1: unknown)
}

// OpenReader opens stateDir's store for reading. A missing or unreadable
// file is not an error here: Verify reports it, Each fails naming it.
func OpenReader(stateDir string) (*Reader, error) {
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w: state dir %s: not a directory (%w)", ErrUnavailable, dir, err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("%w: state dir %s: not a directory", ErrUnavailable, dir)
	}
	r := &Reader{dir: dir, applied: -1}
	// The index first: the journal's end read after it is at or past
	// every row the index holds (rows are applied only once durable).
	r.db, r.dbErr = OpenIndexReadOnly(filepath.Join(dir, FileName))
	if r.db != nil {
		if err := r.db.QueryRow(`SELECT applied FROM journal_state`).Scan(&r.applied); err != nil {
			r.dbErr, r.applied = err, -1
		}
	}
	jpath := filepath.Join(dir, JournalName)
	if f, err := os.Open(jpath); err == nil {
		r.j = f
		if err := r.readEnd(); err != nil {
			r.Close()
			return nil, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		r.Close()
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if r.db == nil && r.j == nil && r.dbErr == nil {
		return nil, fmt.Errorf("%w: no audit store in %s (neither %s nor %s)", ErrUnavailable, dir, JournalName, FileName)
	}
	return r, nil
}

// readEnd reads the journal's durable end (under a shared lock: no writer
// is mid-append).
func (r *Reader) readEnd() error {
	if r.j == nil {
		return nil
	}
	if err := Flock(r.j, LockShared); err != nil {
		return fmt.Errorf("%w: %s: lock: %w", ErrUnavailable, r.j.Name(), err)
	}
	defer Unlock(r.j)
	end, _, err := FindEnd(r.j, r.jend, make([]byte, 64<<10))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, r.j.Name(), err)
	}
	r.jend = end
	return nil
}

// OpenIndexReadOnly opens the index read-only (nil, nil when there is
// none). Without a -wal file no connection has the index open (SQLite
// keeps the file while one does), so the main file is all there is and it
// is opened immutable: SQLite then creates no -shm or -wal file, which a
// read-only or full state dir could not take.
func OpenIndexReadOnly(path string) (*sql.DB, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	q := "mode=ro"
	if _, err := os.Stat(path + "-wal"); errors.Is(err, os.ErrNotExist) {
		q += "&immutable=1"
	}
	uri := (&url.URL{Scheme: "file", Path: path}).String() + "?" + q + "&_pragma=busy_timeout(30000)&_pragma=query_only(1)"
	db, err := sql.Open("sqlite", uri)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	var version int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// Close releases the files.
func (r *Reader) Close() error {
	var errs []error
	if r.db != nil {
		errs = append(errs, r.db.Close())
	}
	if r.j != nil {
		errs = append(errs, r.j.Close())
	}
	return errors.Join(errs...)
}

// indexErr describes an unreadable index and names the repair.
func (r *Reader) indexErr(err error) error {
	return fmt.Errorf("%w: %s: cannot read the index: %w; %s", ErrNeedsRepair, filepath.Join(r.dir, FileName), err, RepairHint(r.dir))
}

// Each calls fn for every row matching f in seq order, as Store.Each: the
// index's rows, then the journal's rows the index does not hold yet.
func (r *Reader) Each(ctx context.Context, f Filter, fn func(audit.Row) error) error {
	if r.dbErr != nil {
		return r.indexErr(r.dbErr)
	}
	if r.j == nil && r.db != nil && r.applied > 0 || r.applied > r.jend {
		return fmt.Errorf("%w: %s is missing or shorter (%d bytes) than the index has applied (%d bytes); %s",
			ErrNeedsRepair, filepath.Join(r.dir, JournalName), r.jend, r.applied, RepairHint(r.dir))
	}
	var last int64
	n := 0
	limited := func(row audit.Row) error {
		if f.Limit > 0 && n >= f.Limit {
			return errStop
		}
		n++
		return fn(row)
	}
	if r.db != nil {
		// The head first: the rows above it come from the journal.
		if err := r.db.QueryRowContext(ctx, HeadQuery).Scan(&last, new(string)); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return r.indexErr(err)
		}
		where := []string{`seq <= ?`}
		args := []any{last}
		if f.InvocationID != "" {
			where, args = append(where, `invocation_id = ?`), append(args, f.InvocationID)
		}
		if f.Kind != "" {
			where, args = append(where, `kind = ?`), append(args, string(f.Kind))
		}
		if f.AfterSeq > 0 {
			where, args = append(where, `seq > ?`), append(args, f.AfterSeq)
		}
		q := `SELECT ` + RowColumns + ` FROM audit_rows`
		if len(where) > 0 {
			q += ` WHERE ` + strings.Join(where, ` AND `)
		}
		err := EachRow(ctx, r.db, q+` ORDER BY seq`, args, limited)
		if errors.Is(err, errStop) {
			return nil
		}
		if err != nil {
			return r.indexErr(err)
		}
	}
	if r.j == nil {
		return nil
	}
	if err := r.readEnd(); err != nil { // rows durable since the index was read
		return err
	}
	from := max(r.applied, 0)
	err := r.journalLines(from, func(line int, row audit.Row, err error) error {
		if err != nil {
			return fmt.Errorf("%s at byte %d: %w", JournalName, from, err)
		}
		if row.Seq <= last || row.Seq <= f.AfterSeq || f.Kind != "" && row.Kind != f.Kind {
			return nil
		}
		if f.InvocationID != "" {
			var ids struct {
				InvocationID string `json:"invocation_id"`
			}
			if json.Unmarshal(row.Payload, &ids) != nil || ids.InvocationID != f.InvocationID {
				return nil
			}
		}
		return limited(row)
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

var errStop = errors.New("stop")

// rowsLost starts the reason of a chain that ends before its anchor.
const rowsLost = "rows lost"

// EachJournalLine is journalLines over the whole journal f, up to its end
// (its first NUL byte), without a lock: for a repair, with the daemon
// stopped.
func EachJournalLine(f *os.File, fn func(line int, row audit.Row, err error) error) error {
	r := &Reader{j: f}
	var err error
	if r.jend, _, err = FindEnd(f, 0, make([]byte, 64<<10)); err != nil {
		return err
	}
	return r.journalLines(0, fn)
}

// journalLines calls fn with each whole line of the journal from byte
// offset from to its durable end, decoded, and its line number counted
// from from (1 is the first line read).
func (r *Reader) journalLines(from int64, fn func(line int, row audit.Row, err error) error) error {
	sc := bufio.NewScanner(io.NewSectionReader(r.j, from, r.jend-from))
	sc.Buffer(make([]byte, 0, 64<<10), audit.MaxLineBytes)
	line := 0
	for sc.Scan() {
		line++
		row, err := audit.DecodeRow(sc.Bytes())
		if err := fn(line, row, err); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: read %s: line %d: %w", ErrUnavailable, JournalName, line+1, err)
	}
	return nil
}

// EachJournalRow calls fn with every row of the journal (not the index), in
// file order, up to its durable end. A line that does not decode stops
// the walk with an error naming its line. No journal: no rows.
func (r *Reader) EachJournalRow(ctx context.Context, fn func(audit.Row) error) error {
	if r.j == nil {
		return nil
	}
	return r.journalLines(0, func(line int, row audit.Row, err error) error {
		if err != nil {
			return fmt.Errorf("%s line %d: %w", JournalName, line, err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(row)
	})
}
