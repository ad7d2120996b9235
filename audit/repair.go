package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// RepairResult says what Repair did.
type RepairResult struct {
	Action string // "none", "index rebuilt", "journal rebuilt"
	Rows   int    // rows in the repaired store
	Moved  []string
	Report Report // VerifyDir after the repair
}

// Repair checks the store in stateDir and, where one of its two files is a
// complete, verifying copy of the chain, rebuilds the other from it; the
// damaged file is kept beside it as <name>.damaged-<UTC time>. The journal
// is preferred: when it verifies on its own (hashes, links, seq from 1)
// the index is rebuilt from it. When the index verifies and holds more
// rows, of which the journal is an exact prefix (a journal deleted or cut
// short), the journal is rewritten from the index. Otherwise nothing is
// changed and the error names the first bad row. Rows lost past the anchor
// (AnchorName) cannot be repaired: with acceptLoss the anchor is moved
// aside and set to the repaired chain's head, recording that the loss was
// accepted. The daemon must be stopped. It holds every row in memory.
func Repair(ctx context.Context, stateDir string, acceptLoss bool) (RepairResult, error) {
	return RepairSigned(ctx, stateDir, acceptLoss, nil)
}

// RepairSigned is Repair signing the anchor it resets with signer (nil: an
// unsigned anchor).
func RepairSigned(ctx context.Context, stateDir string, acceptLoss bool, signer *Signer) (RepairResult, error) {
	dir, err := filepath.Abs(stateDir)
	if err != nil {
		return RepairResult{}, err
	}
	before, err := VerifyDir(ctx, dir)
	if err != nil {
		return RepairResult{}, err
	}
	if before.OK {
		return RepairResult{Action: "none", Rows: before.Rows, Report: before}, nil
	}
	if onlyAnchorProblems(before) {
		// Both files agree; only rows past the anchor are gone.
		res := RepairResult{Action: "nothing rebuilt"}
		if !acceptLoss {
			return res, fmt.Errorf("%s; the rows cannot be recovered: to accept the loss and go on, run it again with --accept-loss", firstProblem(before))
		}
		return repairAnchor(ctx, dir, res, before, signer)
	}
	jrows, jrep, jerr := readJournalRows(dir)
	irows, irep, ierr := readIndexRows(ctx, dir)
	stamp := time.Now().UTC().Format("20060102T150405Z")
	res := RepairResult{}
	switch {
	case ierr == nil && irep.OK && len(irows) > len(jrows) && (jerr != nil || isPrefix(jrows, irows)):
		// The journal lost rows the index still has: rewrite it.
		if jerr == nil && !jrep.OK {
			return res, fmt.Errorf("the journal does not verify (%s) and the index does not hold it: not repaired", firstProblem(jrep))
		}
		moved, err := rebuildJournal(dir, irows, stamp)
		res.Moved = moved
		if err != nil {
			return res, err
		}
		res.Action = "journal rebuilt from the index"
	case jerr == nil && jrep.OK && len(jrows) > 0 && jrows[0].Seq == 1:
		moved, err := moveAside(dir, FileName, stamp)
		res.Moved = moved
		if err != nil {
			return res, err
		}
		s, err := Open(dir)
		if err != nil {
			return res, fmt.Errorf("rebuild the index: %w", err)
		}
		if err := s.Close(); err != nil {
			return res, fmt.Errorf("rebuild the index: %w", err)
		}
		res.Action = "index rebuilt from the journal"
	default:
		why := []string{}
		if jerr != nil {
			why = append(why, fmt.Sprintf("journal: %v", jerr))
		} else if !jrep.OK {
			why = append(why, "journal: "+firstProblem(jrep))
		} else if len(jrows) == 0 {
			why = append(why, "journal: empty")
		}
		if ierr != nil {
			why = append(why, fmt.Sprintf("index: %v", ierr))
		} else if !irep.OK {
			why = append(why, "index: "+firstProblem(irep))
		}
		return res, fmt.Errorf("no verifying copy of the whole chain to repair from (%s): not repaired", strings.Join(why, "; "))
	}
	after, err := VerifyDir(ctx, dir)
	if err != nil {
		return res, err
	}
	if !after.OK && acceptLoss && onlyAnchorProblems(after) {
		action := res.Action
		res, err = repairAnchor(ctx, dir, res, after, signer)
		res.Action = action + "; " + res.Action
		return res, err
	}
	res.Report, res.Rows = after, after.Rows
	if !after.OK {
		return res, fmt.Errorf("after repair the store still does not verify: %s", firstProblem(after))
	}
	return res, nil
}

// repairAnchor accepts the loss of the rows past the anchor: the anchor is
// moved aside and set to the chain's head.
func repairAnchor(ctx context.Context, dir string, res RepairResult, rep Report, signer *Signer) (RepairResult, error) {
	moved, err := moveAside(dir, AnchorName, time.Now().UTC().Format("20060102T150405Z"))
	res.Moved = append(res.Moved, moved...)
	if err != nil {
		return res, err
	}
	if err := advanceAnchor(dir, head{rep.LastSeq, rep.LastHash}, signer); err != nil {
		return res, err
	}
	res.Action = fmt.Sprintf("the loss of the rows after seq %d is accepted and the anchor reset", rep.LastSeq)
	after, err := VerifyDir(ctx, dir)
	if err != nil {
		return res, err
	}
	res.Report, res.Rows = after, after.Rows
	if !after.OK {
		return res, fmt.Errorf("after repair the store still does not verify: %s", firstProblem(after))
	}
	return res, nil
}

// onlyAnchorProblems reports whether every problem is the anchor's.
func onlyAnchorProblems(rep Report) bool {
	for _, p := range rep.Problems {
		if !p.lost {
			return false
		}
	}
	return len(rep.Problems) > 0
}

func firstProblem(rep Report) string {
	if len(rep.Problems) == 0 {
		return "ok"
	}
	p := rep.Problems[0]
	return fmt.Sprintf("seq %d (row_id %s): %s", p.Seq, p.RowID, p.Reason)
}

func isPrefix(short, long []Row) bool {
	for i := range short {
		if rowDiff(short[i], long[i]) != "" {
			return false
		}
	}
	return true
}

// readJournalRows reads and verifies the journal on its own.
func readJournalRows(dir string) ([]Row, Report, error) {
	f, err := os.Open(filepath.Join(dir, JournalName))
	if err != nil {
		return nil, Report{}, err
	}
	defer f.Close()
	r := &Reader{dir: dir, j: f}
	if r.jend, _, err = findEnd(f, 0, make([]byte, 64<<10)); err != nil {
		return nil, Report{}, err
	}
	var rows []Row
	err = r.journalLines(0, func(line int, row Row, err error) error {
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return nil, Report{}, err
	}
	return rows, Verify(rows), nil
}

// readIndexRows reads and verifies the index on its own.
func readIndexRows(ctx context.Context, dir string) ([]Row, Report, error) {
	db, err := openIndexReadOnly(filepath.Join(dir, FileName))
	if err == nil && db == nil {
		err = errors.New("no index")
	}
	if err != nil {
		return nil, Report{}, err
	}
	defer db.Close()
	var check string
	if err := db.QueryRowContext(ctx, `PRAGMA quick_check(1)`).Scan(&check); err != nil {
		return nil, Report{}, err
	} else if check != "ok" {
		return nil, Report{}, errors.New(check)
	}
	var rows []Row
	err = (&Store{}).each(ctx, db, `SELECT `+rowColumns+` FROM audit_rows ORDER BY seq`, nil, func(r Row) error {
		rows = append(rows, r)
		return nil
	})
	if err != nil {
		return nil, Report{}, err
	}
	return rows, Verify(rows), nil
}

// moveAside renames name and its SQLite side files (-wal, -shm) in dir to
// name.damaged-stamp.
func moveAside(dir, name, stamp string) ([]string, error) {
	var moved []string
	for _, suffix := range []string{"", "-wal", "-shm"} {
		from := filepath.Join(dir, name+suffix)
		to := filepath.Join(dir, name+".damaged-"+stamp+suffix)
		if err := os.Rename(from, to); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return moved, err
		}
		moved = append(moved, to)
	}
	return moved, syncDir(dir)
}

// rebuildJournal writes rows as the journal (through a temporary file,
// renamed into place once durable; the old journal is moved aside) and
// records in the index that all of it is applied.
func rebuildJournal(dir string, rows []Row, stamp string) ([]string, error) {
	var buf []byte
	for _, r := range rows {
		buf = appendJournalLine(buf, r)
	}
	path := filepath.Join(dir, JournalName)
	tmp := path + ".repair"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return nil, fmt.Errorf("write %s: %w", tmp, err)
	}
	var moved []string
	if _, err := os.Stat(path); err == nil {
		to := path + ".damaged-" + stamp
		if err := os.Rename(path, to); err != nil {
			return nil, err
		}
		moved = append(moved, to)
	}
	if err := os.Rename(tmp, path); err != nil {
		return moved, err
	}
	if err := syncDir(dir); err != nil {
		return moved, err
	}
	uri := (&url.URL{Scheme: "file", Path: filepath.Join(dir, FileName)}).String() + "?_pragma=busy_timeout(30000)"
	db, err := sql.Open("sqlite", uri)
	if err != nil {
		return moved, err
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE journal_state SET applied = ?`, len(buf)); err != nil {
		return moved, fmt.Errorf("record the rebuilt journal in the index: %w", err)
	}
	return moved, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
