// Rows restored from a witness: the journal read on its own, and a cut
// tail appended back from a copy whose rows verify (fleet's PostgreSQL).

package auditstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// ErrNotATail: rows offered to RestoreTail do not continue the journal's
// chain (a gap, another chain, or a row whose hash does not recompute).
var ErrNotATail = errors.New("audit: the rows do not continue the journal's chain")

// RestoreTail appends rows to the journal in stateDir, byte for byte as
// the writer had written them, once each is shown to continue the chain:
// the first links to the journal's last row (or is seq 1 after the
// genesis), every row's hash recomputes from its fields and payload (in
// canonical form), and each links to the one before. Every byte of a line
// is covered by those checks, so a restored line is the line the writer
// wrote. It holds the journal's write lock while it checks and appends, so
// no writer can slip a row in between; the index catches up at the next
// Open. Run it with the daemon stopped.
func RestoreTail(ctx context.Context, stateDir string, rows []audit.Row) (err error) {
	if len(rows) == 0 {
		return nil
	}
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		return err
	}
	j, err := openJournal(filepath.Join(dir, JournalName))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer func() { err = errors.Join(err, j.close()) }()
	if err := statedir.Flock(j.w, statedir.LockExclusive); err != nil {
		return fmt.Errorf("%w: lock %s: %w", ErrUnavailable, JournalName, err)
	}
	defer statedir.Unlock(j.w)
	end, size, last, err := j.tail()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrUnavailable, JournalName, err)
	}
	prev := &audit.Row{Seq: 0, RowHash: audit.GenesisHash}
	if last != nil {
		r, err := audit.DecodeRow(last)
		if err != nil {
			return fmt.Errorf("%s's last line: %w", JournalName, err)
		}
		prev = &r
	}
	var buf []byte
	for _, r := range rows {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := prev
		if p.Seq == 0 {
			p = nil // r must be the chain's first row
		}
		if reasons, _ := audit.RowProblems(p, r); len(reasons) > 0 {
			return fmt.Errorf("%w: seq %d (row_id %s): %s", ErrNotATail, r.Seq, r.RowID, strings.Join(reasons, "; "))
		}
		buf = audit.AppendJournalLine(buf, r)
		prev = &r
	}
	if err := j.write(buf, end, size); err != nil {
		return fmt.Errorf("%w: append to %s: %w", ErrUnavailable, JournalName, err)
	}
	return nil
}
