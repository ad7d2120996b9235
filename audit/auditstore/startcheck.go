// The start-up check: before a store takes its first invocation, the rows
// no signature covers yet are verified in both copies, and the last
// checkpoint is verified; the whole chain is the scrub's (Store.Scrub).

package auditstore

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// StartCheck is what the start-up check verified.
type StartCheck struct {
	// Checkpoint is the head_seq of the last checkpoint row (0: none); the
	// rows after it were verified.
	Checkpoint int64
	// Verified is the head an earlier start-up check verified, when it is
	// past Checkpoint and still in the chain (0: none).
	Verified int64
	// Rows is how many rows were verified (journal against index, hashes,
	// links): the tail after Checkpoint, or after Verified.
	Rows int64
	// Head is the last row verified: the chain's head.
	Head audit.Row
	// Problems are the damaged rows found (empty: the store is sound).
	Problems []Problem
}

// maxStartProblems bounds the problems a start-up check collects: the first
// few name the damage; `audit verify` lists all of it.
const maxStartProblems = 16

// checkSinceCheckpoint verifies, with the journal locked and applied up to
// its end (Open), the last checkpoint row (its own hash and link, its
// signature, and that its head is the index's row), the signed anchor, and
// every row after that head, in both copies (a checkpoint among them is
// checked as the last one is): each index row's hash recomputes and links
// to the one before, and the journal's lines after the head are, in order,
// exactly the index's rows. Its cost grows with that tail, not with the chain. An error
// is a failure to read (not damage: that is in Problems).
func (s *Store) checkSinceCheckpoint(ctx context.Context, end int64) (StartCheck, error) {
	var sc StartCheck
	if err := s.probeIndexes(ctx); err != nil {
		return sc, err
	}
	prev, lastCP, err := s.checkLastCheckpoint(ctx, &sc)
	if err != nil {
		return sc, err
	}
	s.checkAnchorSignature(&sc)
	if prev, err = s.verifiedHead(ctx, &sc, prev); err != nil {
		return sc, err
	}
	return sc, s.checkRowsAfter(ctx, &sc, end, prev, lastCP)
}

// add records p, up to maxStartProblems.
func (sc *StartCheck) add(p Problem) {
	if len(sc.Problems) < maxStartProblems {
		sc.Problems = append(sc.Problems, p)
	}
}

// probeIndexes does one lookup through each secondary index: a garbage
// page on the way to its leaves is refused here, not left for the
// applier's next insert to trip over. Pages further down are
// quick_check's (WithIndexCheck) and the scrub's.
func (s *Store) probeIndexes(ctx context.Context) error {
	for _, probe := range []string{
		`SELECT count(*) FROM audit_rows INDEXED BY audit_rows_invocation WHERE invocation_id = ''`,
		`SELECT count(*) FROM audit_rows INDEXED BY audit_rows_kind WHERE kind = ''`,
		`SELECT count(*) FROM open_invocations INDEXED BY open_invocations_id WHERE invocation_id = ''`,
	} {
		if err := s.wconn.QueryRowContext(ctx, probe).Scan(new(int64)); err != nil {
			return err
		}
	}
	return nil
}

// checkLastCheckpoint checks the last checkpoint row: its own hash and
// link, its signature, and that its head is the index's row. It returns
// that head, the row the tail's first row links to (nil: genesis, or no
// sound checkpoint), and the checkpoint row's seq (-1: none).
func (s *Store) checkLastCheckpoint(ctx context.Context, sc *StartCheck) (prev *audit.Row, lastCP int64, err error) {
	lastCP = -1
	cps, err := s.query(ctx, `SELECT `+statedir.RowColumns+` FROM audit_rows WHERE kind = ? ORDER BY seq DESC LIMIT 1`, string(audit.KindCheckpoint))
	if err != nil || len(cps) != 1 {
		return nil, lastCP, err
	}
	c := cps[0]
	lastCP = c.Seq
	before, err := s.query(ctx, `SELECT `+statedir.RowColumns+` FROM audit_rows WHERE seq = ?`, c.Seq-1)
	if err != nil {
		return nil, lastCP, err
	}
	var bp *audit.Row
	if len(before) == 1 {
		bp = &before[0]
	}
	reasons, payloadOK := audit.RowProblems(bp, c)
	var head *audit.Row
	if payloadOK && len(reasons) == 0 {
		if head, reasons, err = s.signedHead(ctx, c); err != nil {
			return nil, lastCP, err
		}
	}
	for _, r := range reasons {
		sc.add(Problem{Seq: c.Seq, RowID: c.RowID, File: FileName, Reason: r})
	}
	if len(reasons) == 0 {
		sc.Checkpoint, prev = head.Seq, head
	}
	return prev, lastCP, nil
}

// checkAnchorSignature checks the signed anchor's signature (its head is
// checked against the chain by Open).
func (s *Store) checkAnchorSignature(sc *StartCheck) {
	if a, ok, err := statedir.ReadAnchor(filepath.Dir(s.path)); err == nil && ok && a.Signature != "" {
		if err := a.Checkpoint().Check(""); err != nil {
			sc.add(Problem{Seq: a.Seq, File: AnchorName, Field: "signature", Reason: err.Error()})
		}
	}
}

// verifiedHead returns the later head an earlier start-up check verified
// (verifiedMark), when it is past the checkpoint and still in the chain:
// it bounds the tail further. Otherwise it returns prev.
func (s *Store) verifiedHead(ctx context.Context, sc *StartCheck, prev *audit.Row) (*audit.Row, error) {
	m, ok := readVerifiedMark(filepath.Dir(s.path))
	if !ok || m.Seq <= sc.Checkpoint {
		return prev, nil
	}
	at, err := s.query(ctx, `SELECT `+statedir.RowColumns+` FROM audit_rows WHERE seq = ?`, m.Seq)
	if err != nil {
		return prev, err
	}
	if len(at) == 1 && at[0].RowHash == m.RowHash {
		sc.Verified, prev = m.Seq, &at[0]
	}
	return prev, nil
}

// checkRowsAfter verifies every index row after the checkpoint's (or the
// verified) head, linking the first to prev, and compares the journal's
// lines after that head with them, in order (compareLine). Checkpoint rows
// other than the last (seq lastCP) have their signatures checked here.
func (s *Store) checkRowsAfter(ctx context.Context, sc *StartCheck, end int64, prev *audit.Row, lastCP int64) error {
	after := max(sc.Checkpoint, sc.Verified)
	from, err := statedir.LineAfterSeq(s.j.r, end, after)
	if err != nil {
		return err
	}
	jr := bufio.NewScanner(io.NewSectionReader(s.j.r, from, end-from))
	jr.Buffer(make([]byte, 0, 64<<10), audit.MaxLineBytes)
	line := 0
	nextJournal := func() (audit.Row, bool, error) {
		if !jr.Scan() {
			return audit.Row{}, false, jr.Err()
		}
		line++
		r, err := audit.DecodeRow(jr.Bytes())
		return r, true, err
	}

	rs, err := s.wconn.QueryContext(ctx, `SELECT `+statedir.RowColumns+` FROM audit_rows WHERE seq > ? ORDER BY seq`, after)
	if err != nil {
		return err
	}
	defer rs.Close()
	idx := statedir.NewIndexCursor(rs)
	// Index rows older than the journal's first line come from a store
	// made before the journal: they have no second copy.
	jrow, jok, jerr := nextJournal()
	for idx.Next(); idx.OK(); idx.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		irow := idx.Row()
		sc.Rows++
		if !audit.RowSound(prev, irow) {
			reasons, _ := audit.RowProblems(prev, irow)
			if len(reasons) == 0 {
				reasons = []string{"row_hash does not recompute: the row was altered"}
			}
			sc.add(Problem{Seq: irow.Seq, RowID: irow.RowID, File: FileName, Reason: strings.Join(reasons, "; ")})
		}
		if irow.Kind == audit.KindCheckpoint && irow.Seq != lastCP {
			_, reasons, err := s.signedHead(ctx, irow)
			if err != nil {
				return err
			}
			for _, r := range reasons {
				sc.add(Problem{Seq: irow.Seq, RowID: irow.RowID, File: FileName, Reason: r})
			}
		}
		c := irow
		c.Payload = nil
		prev = &c
		sc.Head = c
		if from == 0 && (line == 0 || line == 1 && jok && jerr == nil && jrow.Seq > irow.Seq) {
			continue
		}
		sc.compareLine(irow, jrow, jok, jerr, line)
		if jok {
			jrow, jok, jerr = nextJournal()
		}
	}
	if idx.Err() != nil {
		if statedir.IsCorrupt(idx.Err()) {
			sc.add(Problem{File: FileName, Reason: fmt.Sprintf("the index cannot be read: %v", idx.Err())})
			return nil
		}
		return idx.Err()
	}
	if jok {
		sc.add(Problem{Seq: jrow.Seq, RowID: jrow.RowID, File: JournalName, Line: line,
			Reason: "in the journal past the index's last row"})
	}
	if err := jr.Err(); err != nil {
		return fmt.Errorf("read %s: %w", JournalName, err)
	}
	return nil
}

// compareLine compares the index's row irow with the journal's line that
// must hold it (jok false: the journal ended; jerr: the line is not a row).
func (sc *StartCheck) compareLine(irow, jrow audit.Row, jok bool, jerr error, line int) {
	switch {
	case !jok:
		sc.add(Problem{Seq: irow.Seq, RowID: irow.RowID, File: JournalName,
			Reason: "in the index but not in the journal (the journal ends before it)"})
	case jerr != nil:
		sc.add(Problem{Seq: irow.Seq, RowID: irow.RowID, File: JournalName, Line: line,
			Reason: fmt.Sprintf("not a valid row: %v", jerr)})
	case jrow.Seq != irow.Seq:
		sc.add(Problem{Seq: irow.Seq, RowID: irow.RowID, File: JournalName, Line: line,
			Reason: fmt.Sprintf("the journal holds seq %d where the index holds seq %d: rows missing, duplicated or out of order", jrow.Seq, irow.Seq)})
	default:
		if diff := RowDiff(jrow, irow); diff != "" {
			sc.add(Problem{Seq: irow.Seq, RowID: irow.RowID, File: JournalName, Line: line, Field: diff,
				Reason: fmt.Sprintf("the journal's copy and the index's differ in %s", diff)})
		}
	}
}

// signedHead checks checkpoint row c's payload: its signature verifies,
// and its head is an earlier row of the index with the signed row_hash. It
// returns that row, or why c fails; an error is a failure to read.
func (s *Store) signedHead(ctx context.Context, c audit.Row) (*audit.Row, []string, error) {
	var cp audit.Checkpoint
	if err := json.Unmarshal(c.Payload, &cp); err != nil {
		return nil, []string{fmt.Sprintf("checkpoint: %v", err)}, nil
	}
	if err := cp.Check(""); err != nil {
		return nil, []string{"checkpoint: " + err.Error()}, nil
	}
	head, err := s.query(ctx, `SELECT `+statedir.RowColumns+` FROM audit_rows WHERE seq = ?`, cp.Seq)
	switch {
	case err != nil:
		return nil, nil, err
	case cp.Seq >= c.Seq || len(head) == 0:
		return nil, []string{fmt.Sprintf("checkpoint: head_seq %d is not a row before it", cp.Seq)}, nil
	case head[0].RowHash != cp.RowHash:
		return nil, []string{fmt.Sprintf("checkpoint: seq %d's row_hash is not the signed one (%.12s…): the chain was rewritten", cp.Seq, cp.RowHash)}, nil
	}
	return &head[0], nil, nil
}

// verifiedName is the file in ReserveDirName recording the chain head the
// last clean start-up check verified, so the next one starts from there
// when no later checkpoint exists (a store only `skill run` writes has
// none). Like the checkpoints it bounds what a start reads again; the rows
// before it are the scrub's and `audit verify`'s. It is a cache: missing,
// unreadable or naming a row the index no longer holds with that hash, it
// is passed over.
const verifiedName = ".verified"

type verifiedMark struct {
	Seq     int64  `json:"seq"`
	RowHash string `json:"row_hash"`
}

func readVerifiedMark(stateDir string) (verifiedMark, bool) {
	var m verifiedMark
	b, err := os.ReadFile(filepath.Join(stateDir, ReserveDirName, verifiedName))
	if err != nil || json.Unmarshal(b, &m) != nil || m.Seq < 1 || !audit.IsHash(m.RowHash) {
		return verifiedMark{}, false
	}
	return m, true
}

// markVerified records h as verified (best effort: without it the next
// start reads the tail from the last checkpoint).
func markVerified(stateDir string, h audit.Row) {
	if h.Seq < 1 {
		return
	}
	b, _ := json.Marshal(verifiedMark{Seq: h.Seq, RowHash: h.RowHash})
	path := filepath.Join(stateDir, ReserveDirName, verifiedName)
	tmp := path + ".tmp"
	if os.WriteFile(tmp, append(b, '\n'), 0o600) == nil && os.Rename(tmp, path) != nil {
		_ = os.Remove(tmp)
	}
}

// damageError is the refusal a store with problems gives every new
// invocation: it names the first problems and the repair.
func damageError(dir, what string, problems []Problem) error {
	var b strings.Builder
	for i, p := range problems {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(problems)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		loc := p.File
		if p.Line > 0 {
			loc += fmt.Sprintf(" line %d", p.Line)
		}
		fmt.Fprintf(&b, "seq %d (row_id %s, %s): %s", p.Seq, p.RowID, loc, p.Reason)
	}
	return fmt.Errorf("%w: %s found the audit store in %s damaged: %s; no invocation is taken until it is repaired: %s",
		ErrNeedsRepair, what, dir, b.String(), statedir.RepairHint(dir))
}

// Damage is why the store takes no new invocation (nil: it takes them): the
// start-up check or a scrub found damaged rows. It wraps ErrNeedsRepair and
// names the repair command.
func (s *Store) Damage() error {
	if s == nil {
		return nil
	}
	if p := s.damage.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *Store) setDamage(err error) { s.damage.Store(&err) }

// SetDamaged makes the store refuse new invocations for damage found
// outside it, such as the fleet's witness refusing the journal; cause says
// what was found and how to repair it. Damage already recorded is kept.
func (s *Store) SetDamaged(cause error) {
	err := fmt.Errorf("%w: %w", ErrNeedsRepair, cause)
	s.damage.CompareAndSwap(nil, &err)
}

// Scrub verifies the whole store as `audit verify` does (VerifyDir: every
// row's hash and link in the journal, the index's copy of each, every
// checkpoint, the anchor), without stopping writers. Problems make the
// store refuse new invocations (Damage) until it is repaired; the report is
// returned either way.
func (s *Store) Scrub(ctx context.Context) (Report, error) {
	dir := filepath.Dir(s.path)
	rep, err := VerifyDir(ctx, dir)
	if err != nil {
		return rep, err
	}
	if !rep.OK {
		s.setDamage(damageError(dir, "the scrub", rep.Problems))
	}
	return rep, nil
}
