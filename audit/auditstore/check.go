package auditstore

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

// repairHint is the sentence errors that need a repair end with.
func repairHint(dir string) string {
	return "check and repair it with `" + RepairCommand(dir) + "` (with the daemon stopped)"
}

// isCorrupt reports whether err is SQLite's SQLITE_CORRUPT (11) or
// SQLITE_NOTADB (26): the index file is damaged.
func isCorrupt(err error) bool {
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
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%w: state dir %s: not a directory (%v)", ErrUnavailable, dir, err)
	}
	r := &Reader{dir: dir, applied: -1}
	// The index first: the journal's end read after it is at or past
	// every row the index holds (rows are applied only once durable).
	r.db, r.dbErr = openIndexReadOnly(filepath.Join(dir, FileName))
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
	if err := flock(r.j, lockShared); err != nil {
		return fmt.Errorf("%w: %s: lock: %w", ErrUnavailable, r.j.Name(), err)
	}
	defer unlock(r.j)
	end, _, err := findEnd(r.j, r.jend, make([]byte, 64<<10))
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, r.j.Name(), err)
	}
	r.jend = end
	return nil
}

// openIndexReadOnly opens the index read-only (nil, nil when there is
// none). Without a -wal file no connection has the index open (SQLite
// keeps the file while one does), so the main file is all there is and it
// is opened immutable: SQLite then creates no -shm or -wal file, which a
// read-only or full state dir could not take.
func openIndexReadOnly(path string) (*sql.DB, error) {
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
	return fmt.Errorf("%w: %s: cannot read the index: %v; %s", ErrNeedsRepair, filepath.Join(r.dir, FileName), err, repairHint(r.dir))
}

// Each calls fn for every row matching f in seq order, as Store.Each: the
// index's rows, then the journal's rows the index does not hold yet.
func (r *Reader) Each(ctx context.Context, f Filter, fn func(audit.Row) error) error {
	if r.dbErr != nil {
		return r.indexErr(r.dbErr)
	}
	if r.j == nil && r.db != nil && r.applied > 0 || r.applied > r.jend {
		return fmt.Errorf("%w: %s is missing or shorter (%d bytes) than the index has applied (%d bytes); %s",
			ErrNeedsRepair, filepath.Join(r.dir, JournalName), r.jend, r.applied, repairHint(r.dir))
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
		if err := r.db.QueryRowContext(ctx, headQuery).Scan(&last, new(string)); err != nil && !errors.Is(err, sql.ErrNoRows) {
			return r.indexErr(err)
		}
		s := &Store{}
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
		q := `SELECT ` + rowColumns + ` FROM audit_rows`
		if len(where) > 0 {
			q += ` WHERE ` + strings.Join(where, ` AND `)
		}
		err := s.each(ctx, r.db, q+` ORDER BY seq`, args, limited)
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

// VerifyDir checks the store in stateDir without writing to it. The
// journal, the durable record, is read line by line: every row's hash and
// link is recomputed from it (see Verify). Each of its rows is then
// compared with the index's copy, field by field, and the index is
// checked by SQLite (quick_check). Every problem names the row (seq,
// row_id), the file and line of the bad copy and, when the two copies
// differ, the field. The error is for a state dir that cannot be read at
// all.
func VerifyDir(ctx context.Context, stateDir string) (Report, error) {
	return VerifyDirWith(ctx, stateDir, VerifyOptions{})
}

// VerifyOptions are what an operator brings to a verification from outside
// the state dir.
type VerifyOptions struct {
	// PublicKey (hex) must have signed every checkpoint row and the anchor;
	// "" checks each signature against the key it carries.
	PublicKey string
	// Heads are chain heads recorded elsewhere (the sink's log lines): the
	// chain must reach each, with the same row_hash.
	Heads []audit.Checkpoint
}

// VerifyDirWith is VerifyDir with what opts brings.
func VerifyDirWith(ctx context.Context, stateDir string, opts VerifyOptions) (Report, error) {
	r, err := OpenReader(stateDir)
	if err != nil {
		return Report{}, err
	}
	defer r.Close()
	return r.VerifyWith(ctx, opts)
}

// Verify is VerifyDir on an open Reader.
func (r *Reader) Verify(ctx context.Context) (Report, error) {
	return r.VerifyWith(ctx, VerifyOptions{})
}

// VerifyWith is VerifyDirWith on an open Reader.
func (r *Reader) VerifyWith(ctx context.Context, opts VerifyOptions) (Report, error) {
	v := NewVerifier()
	v.PinKey(opts.PublicKey)
	var notes []string
	anchor, haveAnchor, anchorErr := readAnchor(r.dir)
	anchorHash := "" // the chain's row_hash at the anchor's seq
	headHash := make([]string, len(opts.Heads))
	seen := func(row audit.Row) {
		if haveAnchor && row.Seq == anchor.Seq {
			anchorHash = row.RowHash
		}
		for i, h := range opts.Heads {
			if row.Seq == h.Seq {
				headHash[i] = row.RowHash
			}
		}
	}
	idx := &indexCursor{}
	dbFile := FileName
	if r.db != nil && r.dbErr == nil {
		var check string
		if err := r.db.QueryRowContext(ctx, `PRAGMA quick_check(1)`).Scan(&check); err != nil {
			r.dbErr = err
		} else if check != "ok" {
			r.dbErr = errors.New(check)
		}
	}
	if r.db != nil && r.dbErr == nil {
		rs, err := r.db.QueryContext(ctx, `SELECT `+rowColumns+` FROM audit_rows ORDER BY seq`)
		if err != nil {
			r.dbErr = err
		} else {
			defer rs.Close()
			idx.rs = rs
		}
	}
	indexBroken := func(err error) {
		v.problems = append(v.problems, Problem{File: dbFile,
			Reason: fmt.Sprintf("the index cannot be read: %v; %s", err, repairHint(r.dir))})
		idx.rs = nil
	}
	if r.dbErr != nil {
		indexBroken(r.dbErr)
	}
	if r.db == nil && r.dbErr == nil {
		notes = append(notes, fmt.Sprintf("there is no index (%s): the next start builds it from the journal", FileName))
	}

	// Index rows older than the journal's first row come from a store made
	// before the journal existed: they are the only copy, so the chain
	// starts with them.
	idx.next() // the index's read snapshot starts here
	if err := r.readEnd(); err != nil {
		return Report{}, err
	}
	firstSeq := int64(-1)
	if r.j != nil {
		_ = r.journalLines(0, func(_ int, row audit.Row, err error) error {
			if err == nil {
				firstSeq = row.Seq
			}
			return errStop
		})
	}
	legacy := firstSeq < 0 && r.applied <= 0 // no journal line, and the index was never fed by one
	for ; idx.ok() && (legacy || idx.row.Seq < firstSeq); idx.next() {
		n := len(v.problems)
		v.Add(idx.row)
		seen(idx.row)
		v.locate(n, dbFile, 0)
	}

	behind := 0
	if r.j != nil {
		err := r.journalLines(0, func(line int, jrow audit.Row, jerr error) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			want := v.lastSeq() + 1
			if jerr == nil {
				want = jrow.Seq
			}
			// Index rows the journal skips over.
			for idx.ok() && idx.row.Seq < want {
				v.problems = append(v.problems, Problem{Seq: idx.row.Seq, RowID: idx.row.RowID, File: JournalName, Line: line,
					Reason: fmt.Sprintf("in the index but not in the journal (line %d holds seq %d)", line, want)})
				idx.next()
			}
			var irow *audit.Row
			if idx.ok() && idx.row.Seq == want {
				c := idx.row
				irow = &c
				idx.next()
			}
			if jerr != nil {
				p := Problem{Seq: want, File: JournalName, Line: line, Reason: fmt.Sprintf("not a valid row: %v", jerr)}
				if irow != nil {
					p.RowID = irow.RowID
					v.skip(*irow) // the chain goes on from the index's copy
				} else {
					v.rows++
				}
				v.problems = append(v.problems, p)
				return nil
			}
			prev := v.prev
			n := len(v.problems)
			v.Add(jrow)
			seen(jrow)
			journalBad := len(v.problems) > n
			v.locate(n, JournalName, line)
			if irow == nil {
				switch {
				case idx.ok(): // the index holds later rows: this one was removed
					v.problems = append(v.problems, Problem{Seq: jrow.Seq, RowID: jrow.RowID, File: dbFile,
						Reason: fmt.Sprintf("missing from the index (%s line %d has it, the index holds later rows)", JournalName, line)})
				case idx.rs != nil:
					behind++
				}
				return nil
			}
			diff := RowDiff(jrow, *irow)
			if diff == "" {
				return nil
			}
			indexBad := false
			if reasons, _ := audit.RowProblems(prev, *irow); len(reasons) > 0 {
				indexBad = true
			}
			switch {
			case journalBad && !indexBad:
				for i := n; i < len(v.problems); i++ {
					v.problems[i].Field = diff
					v.problems[i].Reason += fmt.Sprintf("; its copy in %s verifies and differs in %s", FileName, diff)
				}
				v.setPrev(*irow) // the next row links to the good copy: no second problem
			case journalBad:
				v.problems = append(v.problems, Problem{Seq: jrow.Seq, RowID: jrow.RowID, File: dbFile, Field: diff,
					Reason: fmt.Sprintf("the index's copy does not verify either, and differs from %s line %d in %s", JournalName, line, diff)})
			default:
				v.problems = append(v.problems, Problem{Seq: jrow.Seq, RowID: jrow.RowID, File: dbFile, Field: diff,
					Reason: fmt.Sprintf("the index's copy differs from %s line %d in %s: the index was altered", JournalName, line, diff)})
			}
			return nil
		})
		if err != nil {
			return Report{}, err
		}
	}
	// Index rows past the journal's end.
	if idx.ok() {
		first, last, count := idx.row, idx.row, 0
		for ; idx.ok(); idx.next() {
			last = idx.row
			count++
		}
		what := "the journal ends before this row"
		if r.j == nil {
			what = "the journal is missing"
		}
		v.problems = append(v.problems, Problem{Seq: first.Seq, RowID: first.RowID, File: JournalName,
			Reason: fmt.Sprintf("%s: %d rows from seq %d to the index's last, seq %d, are only in the index; %s",
				what, count, first.Seq, last.Seq, repairHint(r.dir))})
	}
	if idx.err != nil {
		indexBroken(idx.err)
	}
	switch {
	case anchorErr != nil:
		v.problems = append(v.problems, Problem{File: AnchorName, Reason: anchorErr.Error()})
	case haveAnchor && v.lastSeq() < anchor.Seq:
		v.problems = append(v.problems, Problem{Seq: v.lastSeq() + 1, File: JournalName, lost: true,
			Reason: fmt.Sprintf(rowsLost+": the chain ends at seq %d, but %s records seq %d (at %s): rows %d..%d are missing",
				v.lastSeq(), AnchorName, anchor.Seq, anchor.TS, v.lastSeq()+1, anchor.Seq)})
	case haveAnchor && anchorHash != anchor.RowHash:
		v.problems = append(v.problems, Problem{Seq: anchor.Seq, File: JournalName, Field: "row_hash",
			Reason: fmt.Sprintf("the row_hash is not the one %s records (%.12s…, at %s): the chain was rewritten", AnchorName, anchor.RowHash, anchor.TS)})
	}
	if haveAnchor && anchorErr == nil {
		switch {
		case anchor.Signature != "":
			if err := anchor.checkpoint().Check(opts.PublicKey); err != nil {
				v.problems = append(v.problems, Problem{Seq: anchor.Seq, File: AnchorName, Field: "signature", Reason: err.Error()})
			}
		case opts.PublicKey != "":
			v.problems = append(v.problems, Problem{Seq: anchor.Seq, File: AnchorName, Field: "signature",
				Reason: "the anchor is not signed, but a public key is pinned"})
		}
	}
	for i, h := range opts.Heads {
		switch {
		case v.lastSeq() < h.Seq:
			v.problems = append(v.problems, Problem{Seq: v.lastSeq() + 1, File: JournalName, lost: true,
				Reason: fmt.Sprintf(rowsLost+": the chain ends at seq %d, but a head recorded outside the state dir is seq %d: rows %d..%d are missing",
					v.lastSeq(), h.Seq, v.lastSeq()+1, h.Seq)})
		case headHash[i] != h.RowHash:
			v.problems = append(v.problems, Problem{Seq: h.Seq, File: JournalName, Field: "row_hash",
				Reason: fmt.Sprintf("the row_hash is not the one recorded outside the state dir (%.12s…): the chain was rewritten", h.RowHash)})
		}
	}
	if v.lastCP > 0 && v.lastSeq() > v.lastCPRow {
		notes = append(notes, fmt.Sprintf("rows %d..%d follow the last checkpoint (seq %d): no signature covers them yet", v.lastCP+1, v.lastSeq(), v.lastCP))
	}
	if behind > 0 {
		notes = append(notes, fmt.Sprintf("the index lacks the journal's last %d rows: not applied yet (the daemon's applier or the next start applies them)", behind))
	}
	rep := v.Report()
	rep.Notes = notes
	return rep, nil
}

// indexCursor walks the index's rows in seq order.
type indexCursor struct {
	rs  *sql.Rows
	row audit.Row
	has bool
	err error
}

func (c *indexCursor) next() {
	c.has = false
	if c.rs == nil || !c.rs.Next() {
		if c.rs != nil {
			c.err = c.rs.Err()
		}
		return
	}
	var kind string
	var payload []byte
	if err := c.rs.Scan(&c.row.Seq, &c.row.RowID, &kind, &c.row.TS, &c.row.PrevHash, &c.row.RowHash, &payload); err != nil {
		c.err = err
		return
	}
	c.row.Kind, c.row.Payload = audit.Kind(kind), payload
	c.has = true
}

func (c *indexCursor) ok() bool { return c.has }

// locate sets the file and line of the problems from index n on.
func (v *Verifier) locate(n int, file string, line int) {
	for i := n; i < len(v.problems); i++ {
		v.problems[i].File, v.problems[i].Line = file, line
	}
}

// skip takes r as the next row of the chain without checking it (its other
// copy was found bad and reported).
func (v *Verifier) skip(r audit.Row) {
	v.rows++
	v.setPrev(r)
}

// setPrev makes r the row the next one must link to, and one a later
// checkpoint may sign.
func (v *Verifier) setPrev(r audit.Row) {
	prev := r
	prev.Payload = nil // linking needs only seq and row_hash
	v.prev = &prev
	if v.recent == nil {
		v.recent = make([]seqHash, recentRows)
	}
	if r.Seq >= 0 {
		v.recent[uint64(r.Seq)%recentRows] = seqHash{r.Seq, r.RowHash}
	}
}

// lastSeq is the seq of the last row added (0 before the first).
func (v *Verifier) lastSeq() int64 {
	if v.prev == nil {
		return 0
	}
	return v.prev.Seq
}
