// Verifying a state dir: the journal's rows through a Verifier, each
// compared with the index's copy, then the anchor and the heads recorded
// outside the state dir.

package statedir

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"cyberos.dev/audit"
)

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

// VerifyWith is VerifyDirWith on an open Reader. Its phases, in order:
// open the index's rows (openIndex), the rows only the index holds from
// before the journal existed (legacyRows), the journal's rows each with
// its index copy (journalRows), the index's rows past the journal's end
// (indexTail), then the anchor (anchorProblems) and the heads recorded
// outside the state dir (headProblems).
func (r *Reader) VerifyWith(ctx context.Context, opts VerifyOptions) (Report, error) {
	c := &dirCheck{r: r, opts: opts, v: NewVerifier(), idx: &IndexCursor{}, headHash: make([]string, len(opts.Heads))}
	c.v.PinKey(opts.PublicKey)
	c.anchor, c.haveAnchor, c.anchorErr = ReadAnchor(r.dir)
	defer c.idx.close()
	c.openIndex(ctx)
	if err := c.legacyRows(); err != nil {
		return Report{}, err
	}
	if err := c.journalRows(ctx); err != nil {
		return Report{}, err
	}
	c.indexTail()
	c.anchorProblems()
	c.headProblems()
	return c.report(), nil
}

// dirCheck is one VerifyWith: the Verifier the chain's rows go through,
// the index's rows walked beside the journal's, and what the anchor and
// the external heads are checked against.
type dirCheck struct {
	r    *Reader
	opts VerifyOptions
	v    *Verifier
	idx  *IndexCursor

	anchor     Anchor
	haveAnchor bool
	anchorErr  error
	anchorHash string   // the chain's row_hash at the anchor's seq
	headHash   []string // the chain's row_hash at each of opts.Heads' seq

	notes  []string
	behind int // journal rows the index does not hold yet
}

// seen records row's hash where the anchor or an external head points.
func (c *dirCheck) seen(row audit.Row) {
	if c.haveAnchor && row.Seq == c.anchor.Seq {
		c.anchorHash = row.RowHash
	}
	for i, h := range c.opts.Heads {
		if row.Seq == h.Seq {
			c.headHash[i] = row.RowHash
		}
	}
}

// openIndex checks the index (quick_check) and starts the walk over its
// rows; an index that cannot be read is a problem, a missing one a note.
func (c *dirCheck) openIndex(ctx context.Context) {
	r := c.r
	if r.db != nil && r.dbErr == nil {
		var check string
		if err := r.db.QueryRowContext(ctx, `PRAGMA quick_check(1)`).Scan(&check); err != nil {
			r.dbErr = err
		} else if check != "ok" {
			r.dbErr = errors.New(check)
		}
	}
	if r.db != nil && r.dbErr == nil {
		rs, err := r.db.QueryContext(ctx, `SELECT `+RowColumns+` FROM audit_rows ORDER BY seq`)
		if err != nil {
			r.dbErr = err
		} else {
			c.idx.rs, c.idx.query = rs, rs
		}
	}
	if r.dbErr != nil {
		c.indexBroken(r.dbErr)
	}
	if r.db == nil && r.dbErr == nil {
		c.notes = append(c.notes, fmt.Sprintf("there is no index (%s): the next start builds it from the journal", FileName))
	}
	c.idx.Next() // the index's read snapshot starts here
}

// indexBroken records that the index cannot be read (any further) and
// stops the walk over its rows.
func (c *dirCheck) indexBroken(err error) {
	c.v.problems = append(c.v.problems, Problem{File: FileName,
		Reason: fmt.Sprintf("the index cannot be read: %v; %s", err, RepairHint(c.r.dir))})
	c.idx.rs = nil
}

// legacyRows checks the index rows older than the journal's first row:
// they come from a store made before the journal existed, are the only
// copy, and so start the chain.
func (c *dirCheck) legacyRows() error {
	r, v, idx := c.r, c.v, c.idx
	if err := r.readEnd(); err != nil {
		return err
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
	for ; idx.OK() && (legacy || idx.row.Seq < firstSeq); idx.Next() {
		n := len(v.problems)
		v.Add(idx.row)
		c.seen(idx.row)
		v.locate(n, FileName, 0)
	}
	return nil
}

// journalRows checks the journal's rows in order, each with the index's
// copy of it (journalRow).
func (c *dirCheck) journalRows(ctx context.Context) error {
	if c.r.j == nil {
		return nil
	}
	return c.r.journalLines(0, func(line int, jrow audit.Row, jerr error) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		c.journalRow(line, jrow, jerr)
		return nil
	})
}

// journalRow checks the journal's row at line (jerr: the line is not a
// row) and compares it with the index's copy: index rows the journal skips
// over, a row missing from the index, and copies that differ are problems,
// each naming the copy that is bad.
func (c *dirCheck) journalRow(line int, jrow audit.Row, jerr error) {
	v, idx := c.v, c.idx
	want := v.lastSeq() + 1
	if jerr == nil {
		want = jrow.Seq
	}
	for idx.OK() && idx.row.Seq < want {
		v.problems = append(v.problems, Problem{Seq: idx.row.Seq, RowID: idx.row.RowID, File: JournalName, Line: line,
			Reason: fmt.Sprintf("in the index but not in the journal (line %d holds seq %d)", line, want)})
		idx.Next()
	}
	var irow *audit.Row
	if idx.OK() && idx.row.Seq == want {
		cp := idx.row
		irow = &cp
		idx.Next()
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
		return
	}
	prev := v.prev
	n := len(v.problems)
	v.Add(jrow)
	c.seen(jrow)
	journalBad := len(v.problems) > n
	v.locate(n, JournalName, line)
	if irow == nil {
		switch {
		case idx.OK(): // the index holds later rows: this one was removed
			v.problems = append(v.problems, Problem{Seq: jrow.Seq, RowID: jrow.RowID, File: FileName,
				Reason: fmt.Sprintf("missing from the index (%s line %d has it, the index holds later rows)", JournalName, line)})
		case idx.rs != nil:
			c.behind++
		}
		return
	}
	c.compareCopies(prev, n, line, jrow, *irow, journalBad)
}

// compareCopies compares the journal's row at line with the index's copy
// irow. When they differ, the copy that does not verify (against prev, the
// row before) is the bad one; the problems the journal's copy caused (from
// index n on) say so.
func (c *dirCheck) compareCopies(prev *audit.Row, n, line int, jrow, irow audit.Row, journalBad bool) {
	v := c.v
	diff := RowDiff(jrow, irow)
	if diff == "" {
		return
	}
	indexBad := false
	if reasons, _ := audit.RowProblems(prev, irow); len(reasons) > 0 {
		indexBad = true
	}
	switch {
	case journalBad && !indexBad:
		for i := n; i < len(v.problems); i++ {
			v.problems[i].Field = diff
			v.problems[i].Reason += fmt.Sprintf("; its copy in %s verifies and differs in %s", FileName, diff)
		}
		v.setPrev(irow) // the next row links to the good copy: no second problem
	case journalBad:
		v.problems = append(v.problems, Problem{Seq: jrow.Seq, RowID: jrow.RowID, File: FileName, Field: diff,
			Reason: fmt.Sprintf("the index's copy does not verify either, and differs from %s line %d in %s", JournalName, line, diff)})
	default:
		v.problems = append(v.problems, Problem{Seq: jrow.Seq, RowID: jrow.RowID, File: FileName, Field: diff,
			Reason: fmt.Sprintf("the index's copy differs from %s line %d in %s: the index was altered", JournalName, line, diff)})
	}
}

// indexTail reports the index rows past the journal's end, and an index
// that failed during the walk.
func (c *dirCheck) indexTail() {
	v, idx := c.v, c.idx
	if idx.OK() {
		first, last, count := idx.row, idx.row, 0
		for ; idx.OK(); idx.Next() {
			last = idx.row
			count++
		}
		what := "the journal ends before this row"
		if c.r.j == nil {
			what = "the journal is missing"
		}
		v.problems = append(v.problems, Problem{Seq: first.Seq, RowID: first.RowID, File: JournalName,
			Reason: fmt.Sprintf("%s: %d rows from seq %d to the index's last, seq %d, are only in the index; %s",
				what, count, first.Seq, last.Seq, RepairHint(c.r.dir))})
	}
	if idx.err != nil {
		c.indexBroken(idx.err)
	}
}

// anchorProblems checks the chain against the anchor: it reaches the
// anchor's seq with the anchor's row_hash, and the anchor's signature.
func (c *dirCheck) anchorProblems() {
	v, anchor := c.v, c.anchor
	switch {
	case c.anchorErr != nil:
		v.problems = append(v.problems, Problem{File: AnchorName, Reason: c.anchorErr.Error()})
	case c.haveAnchor && v.lastSeq() < anchor.Seq:
		v.problems = append(v.problems, Problem{Seq: v.lastSeq() + 1, File: JournalName, lost: true,
			Reason: fmt.Sprintf(rowsLost+": the chain ends at seq %d, but %s records seq %d (at %s): rows %d..%d are missing",
				v.lastSeq(), AnchorName, anchor.Seq, anchor.TS, v.lastSeq()+1, anchor.Seq)})
	case c.haveAnchor && c.anchorHash != anchor.RowHash:
		v.problems = append(v.problems, Problem{Seq: anchor.Seq, File: JournalName, Field: "row_hash",
			Reason: fmt.Sprintf("the row_hash is not the one %s records (%.12s…, at %s): the chain was rewritten", AnchorName, anchor.RowHash, anchor.TS)})
	}
	if !c.haveAnchor || c.anchorErr != nil {
		return
	}
	switch {
	case anchor.Signature != "":
		if err := anchor.Checkpoint().Check(c.opts.PublicKey); err != nil {
			v.problems = append(v.problems, Problem{Seq: anchor.Seq, File: AnchorName, Field: "signature", Reason: err.Error()})
		}
	case c.opts.PublicKey != "":
		v.problems = append(v.problems, Problem{Seq: anchor.Seq, File: AnchorName, Field: "signature",
			Reason: "the anchor is not signed, but a public key is pinned"})
	}
}

// headProblems checks the chain against the heads recorded outside the
// state dir: it reaches each with the same row_hash.
func (c *dirCheck) headProblems() {
	v := c.v
	for i, h := range c.opts.Heads {
		switch {
		case v.lastSeq() < h.Seq:
			v.problems = append(v.problems, Problem{Seq: v.lastSeq() + 1, File: JournalName, lost: true,
				Reason: fmt.Sprintf(rowsLost+": the chain ends at seq %d, but a head recorded outside the state dir is seq %d: rows %d..%d are missing",
					v.lastSeq(), h.Seq, v.lastSeq()+1, h.Seq)})
		case c.headHash[i] != h.RowHash:
			v.problems = append(v.problems, Problem{Seq: h.Seq, File: JournalName, Field: "row_hash",
				Reason: fmt.Sprintf("the row_hash is not the one recorded outside the state dir (%.12s…): the chain was rewritten", h.RowHash)})
		}
	}
}

// report is the Verifier's report with the notes: rows no checkpoint
// covers yet, and journal rows the index has not applied yet.
func (c *dirCheck) report() Report {
	v := c.v
	if v.lastCP > 0 && v.lastSeq() > v.lastCPRow {
		c.notes = append(c.notes, fmt.Sprintf("rows %d..%d follow the last checkpoint (seq %d): no signature covers them yet", v.lastCP+1, v.lastSeq(), v.lastCP))
	}
	if c.behind > 0 {
		c.notes = append(c.notes, fmt.Sprintf("the index lacks the journal's last %d rows: not applied yet (the daemon's applier or the next start applies them)", c.behind))
	}
	rep := v.Report()
	rep.Notes = c.notes
	return rep
}

// IndexCursor walks the index's rows in seq order.
type IndexCursor struct {
	rs    *sql.Rows // nil: no (more) rows to walk
	query *sql.Rows // the query rs was, closed at the end
	row   audit.Row
	has   bool
	err   error
}

// NewIndexCursor walks rs, a query of RowColumns in seq order; call Next
// for the first row.
func NewIndexCursor(rs *sql.Rows) *IndexCursor { return &IndexCursor{rs: rs} }

// Row is the row the cursor is at (when OK).
func (c *IndexCursor) Row() audit.Row { return c.row }

// Err is why the walk stopped early (nil: it reached the end).
func (c *IndexCursor) Err() error { return c.err }

// Next moves to the next row.
func (c *IndexCursor) Next() {
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

// OK reports whether the cursor is at a row.
func (c *IndexCursor) OK() bool { return c.has }

// close ends the query the walk was started on, if any.
func (c *IndexCursor) close() {
	if c.query != nil {
		c.query.Close()
	}
}

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
