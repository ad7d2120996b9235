// Row-by-row repair: each row of the chain is taken from whichever copy
// (journal line or index row) verifies there, and both files are rewritten
// from the result; rows that verify in no copy refuse the repair.

package auditstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// DamagedDirPrefix starts the name of the directory in the state dir where
// a repair keeps the files it replaces: DamagedDirPrefix + UTC time.
const DamagedDirPrefix = "audit-damaged-"

// copies are the rows each file holds, by seq: the journal may hold several
// lines of one seq (a row duplicated, or swapped into another's place), the
// index one.
type copies struct {
	journal  map[int64][]audit.Row
	badLines []int // journal lines (from 1) that are not valid rows
	index    map[int64]audit.Row
	indexErr error // why the index could not be read to its end (its rows before that are used)
	maxSeq   int64
}

// readCopies reads every row of both files that can be read. A missing
// file holds no rows.
func readCopies(ctx context.Context, dir string) (copies, error) {
	c := copies{journal: map[int64][]audit.Row{}, index: map[int64]audit.Row{}}
	if f, err := os.Open(filepath.Join(dir, JournalName)); err == nil {
		defer f.Close()
		err = statedir.EachJournalLine(f, func(line int, row audit.Row, err error) error {
			if err != nil {
				c.badLines = append(c.badLines, line)
				return nil
			}
			c.journal[row.Seq] = append(c.journal[row.Seq], row)
			c.maxSeq = max(c.maxSeq, row.Seq)
			return nil
		})
		if err != nil {
			return c, err
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return c, err
	}
	db, err := statedir.OpenIndexReadOnly(filepath.Join(dir, FileName))
	if err != nil {
		c.indexErr = err
		return c, nil
	}
	if db == nil {
		c.indexErr = errors.New("no index")
		return c, nil
	}
	defer db.Close()
	// Rows read before an error are kept: each is verified before use.
	c.indexErr = statedir.EachRow(ctx, db, `SELECT `+statedir.RowColumns+` FROM audit_rows ORDER BY seq`, nil, func(r audit.Row) error {
		c.index[r.Seq] = r
		c.maxSeq = max(c.maxSeq, r.Seq)
		return nil
	})
	if err := ctx.Err(); err != nil {
		return c, err
	}
	return c, nil
}

// candidates are the distinct copies of row seq, the journal's first.
func (c copies) candidates(seq int64) []audit.Row {
	out := slices.Clone(c.journal[seq])
	if r, ok := c.index[seq]; ok {
		out = append(out, r)
	}
	return slices.CompactFunc(out, func(a, b audit.Row) bool { return RowDiff(a, b) == "" })
}

// where names the files holding a copy equal to r.
func (c copies) where(r audit.Row) string {
	var in []string
	if slices.ContainsFunc(c.journal[r.Seq], func(j audit.Row) bool { return RowDiff(j, r) == "" }) {
		in = append(in, JournalName)
	}
	if i, ok := c.index[r.Seq]; ok && RowDiff(i, r) == "" {
		in = append(in, FileName)
	}
	return strings.Join(in, " and ")
}

// mergeCopies builds the chain seq 1, 2, … up to the last seq either file
// holds, taking each row from a copy that verifies: its hash recomputes,
// its payload is its kind's, it links to the row chosen before it, and a
// checkpoint's signature verifies over a head of the chain built so far.
// When two different copies verify, the one the next row links to is taken.
// The rows no copy of which verifies are returned as problems; the chain
// then goes on from a copy whose own hash holds, if any, so that later rows
// are judged on their own.
func mergeCopies(c copies) (chain []audit.Row, bad []Problem) {
	var prev *audit.Row
	hashAt := map[int64]string{}
	for seq := int64(1); seq <= c.maxSeq; seq++ {
		cands := c.candidates(seq)
		var good []audit.Row
		var why []string
		for _, r := range cands {
			reasons := rowVerifies(prev, r, hashAt)
			if len(reasons) == 0 {
				good = append(good, r)
			} else {
				why = append(why, fmt.Sprintf("the copy in %s: %s", c.where(r), strings.Join(reasons, "; ")))
			}
		}
		if len(good) > 1 {
			next := c.candidates(seq + 1)
			good = slices.DeleteFunc(good, func(r audit.Row) bool {
				return !slices.ContainsFunc(next, func(n audit.Row) bool { return n.PrevHash == r.RowHash })
			})
			if len(good) != 1 {
				why = append(why, "two different copies verify and the next row links to neither or both")
				good = nil
			}
		}
		if len(good) == 1 {
			chain = append(chain, good[0])
			r := good[0]
			prev, hashAt[seq] = &r, r.RowHash
			continue
		}
		p := Problem{Seq: seq, Reason: "in neither file"}
		if len(cands) > 0 {
			p.RowID = cands[0].RowID
			p.Reason = "verifies in no copy: " + strings.Join(why, "; ")
		}
		bad = append(bad, p)
		// Go on from a copy whose own hash holds, so the rows after it
		// are judged by their own copies, not by this row's damage.
		prev = nil
		for _, r := range cands {
			if h, err := r.ComputeHash(); err == nil && h == r.RowHash {
				prev = &r
				break
			}
		}
		if prev == nil {
			prev = &audit.Row{Seq: seq, RowHash: ""} // no link can be checked
		}
		prev.Seq = seq
	}
	return chain, bad
}

// rowVerifies is why r is not the chain's row after prev (nil: r must be
// seq 1); none when it is. A prev without a row_hash (a row no copy of
// which holds) leaves r's link unchecked.
func rowVerifies(prev *audit.Row, r audit.Row, hashAt map[int64]string) []string {
	p := prev
	if p != nil && p.RowHash == "" {
		p = &audit.Row{Seq: p.Seq, RowHash: r.PrevHash}
	}
	reasons, payloadOK := audit.RowProblems(p, r)
	if payloadOK && r.Kind == audit.KindCheckpoint {
		var cp audit.Checkpoint
		switch err := json.Unmarshal(r.Payload, &cp); {
		case err != nil:
			reasons = append(reasons, fmt.Sprintf("checkpoint: %v", err))
		case cp.Check("") != nil:
			reasons = append(reasons, "checkpoint: "+cp.Check("").Error())
		case cp.Seq >= r.Seq:
			reasons = append(reasons, fmt.Sprintf("checkpoint: head_seq %d is not before it", cp.Seq))
		case hashAt[cp.Seq] != cp.RowHash:
			reasons = append(reasons, fmt.Sprintf("checkpoint: the chain's row %d is not the signed one", cp.Seq))
		}
	}
	return reasons
}

// repairRows rebuilds the store in dir row by row (mergeCopies): when every
// row verifies in one copy or the other, the files are kept in a new
// directory DamagedDirPrefix+stamp, and the journal is rewritten from the
// merged chain and the index rebuilt from it. Otherwise nothing is changed
// and the error lists the rows that verify nowhere. The action says which
// rows came from which file.
func repairRows(ctx context.Context, dir, stamp string) (action string, kept []string, err error) {
	c, err := readCopies(ctx, dir)
	if err != nil {
		return "", nil, err
	}
	chain, bad := mergeCopies(c)
	if len(bad) == 0 && len(chain) > 0 {
		// What Verify checks beyond single rows (pairing) must hold too.
		if rep := Verify(chain); !rep.OK {
			bad = rep.Problems
		}
	}
	if len(chain) == 0 && len(bad) == 0 {
		return "", nil, fmt.Errorf("no verifying copy of any row (journal lines that are not rows: %v; index: %s): not repaired", c.badLines, fmt.Sprint(c.indexErr))
	}
	if len(bad) > 0 {
		var b strings.Builder
		for _, p := range bad {
			fmt.Fprintf(&b, "\n  seq %d (row_id %s): %s", p.Seq, p.RowID, p.Reason)
		}
		return "", nil, fmt.Errorf("%d rows verify in neither the journal nor the index: not repaired:%s", len(bad), b.String())
	}
	fromJournal, fromIndex := 0, 0
	for _, r := range chain {
		if j := c.journal[r.Seq]; len(j) == 1 && RowDiff(j[0], r) == "" {
			fromJournal++
		}
		if i, ok := c.index[r.Seq]; ok && RowDiff(i, r) == "" {
			fromIndex++
		}
	}
	kept, err = rewriteStore(dir, chain, stamp)
	if err != nil {
		return "", kept, err
	}
	action = fmt.Sprintf("rebuilt row by row: %d rows, %d of them sound in the journal, %d in the index", len(chain), fromJournal, fromIndex)
	return action, kept, nil
}

// rewriteStore keeps the journal, the index (with its -wal and -shm) and
// the anchor in a new directory DamagedDirPrefix+stamp in dir, writes
// chain as the journal (through a temporary file, synced before it
// replaces the old one), and makes a new index from it.
func rewriteStore(dir string, chain []audit.Row, stamp string) ([]string, error) {
	keep := filepath.Join(dir, DamagedDirPrefix+stamp)
	if err := os.Mkdir(keep, 0o700); err != nil {
		return nil, err
	}
	var kept []string
	var buf []byte
	for _, r := range chain {
		buf = audit.AppendJournalLine(buf, r)
	}
	path := filepath.Join(dir, JournalName)
	tmp := path + ".repair"
	if err := writeSynced(tmp, buf); err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := copyFile(filepath.Join(dir, AnchorName), filepath.Join(keep, AnchorName)); err == nil {
		kept = append(kept, filepath.Join(keep, AnchorName))
	} else if !errors.Is(err, os.ErrNotExist) {
		os.Remove(tmp)
		return kept, err
	}
	for _, name := range []string{JournalName, FileName, FileName + "-wal", FileName + "-shm"} {
		to := filepath.Join(keep, name)
		if err := os.Rename(filepath.Join(dir, name), to); err == nil {
			kept = append(kept, to)
		} else if !errors.Is(err, os.ErrNotExist) {
			os.Remove(tmp)
			return kept, err
		}
	}
	if err := os.Rename(tmp, path); err != nil {
		return kept, err
	}
	_ = os.Remove(filepath.Join(dir, ReserveDirName, verifiedName))
	if err := syncDir(dir); err != nil {
		return kept, err
	}
	s, err := Open(dir)
	if err != nil {
		return kept, fmt.Errorf("rebuild the index: %w", err)
	}
	if err := s.Close(); err != nil {
		return kept, fmt.Errorf("rebuild the index: %w", err)
	}
	return kept, nil
}

func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
