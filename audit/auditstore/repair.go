package auditstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// RepairResult says what Repair did.
type RepairResult struct {
	Action string   // "none", "nothing rebuilt", "rebuilt row by row: …" (and the anchor's reset)
	Rows   int      // rows in the repaired store
	Moved  []string // the files replaced, where they are kept
	Report Report   // VerifyDir after the repair
}

// Repair checks the store in stateDir and, when it does not verify,
// rebuilds it row by row (repairRows): each row is taken from the copy,
// journal line or index row, that verifies (its hash, its link to the row
// before, a checkpoint's signature), so a row damaged in one file is
// restored from the other, whichever it is. The files replaced are kept in
// <stateDir>/audit-damaged-<UTC time>/. Rows that verify in neither file
// refuse the repair: nothing is changed and the error lists them. Rows lost
// past the anchor (AnchorName) cannot be repaired: with acceptLoss the
// anchor is moved aside and set to the repaired chain's head, recording
// that the loss was accepted. The daemon must be stopped. It holds every
// row in memory.
func Repair(ctx context.Context, stateDir string, acceptLoss bool) (RepairResult, error) {
	return RepairSigned(ctx, stateDir, acceptLoss, nil)
}

// RepairSigned is Repair signing the anchor it resets with signer (nil: an
// unsigned anchor).
func RepairSigned(ctx context.Context, stateDir string, acceptLoss bool, signer *audit.Signer) (RepairResult, error) {
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
	res := RepairResult{}
	action, kept, err := repairRows(ctx, dir, time.Now().UTC().Format("20060102T150405Z"))
	res.Action, res.Moved = action, kept
	if err != nil {
		return res, err
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
func repairAnchor(ctx context.Context, dir string, res RepairResult, rep Report, signer *audit.Signer) (RepairResult, error) {
	moved, err := moveAside(dir, AnchorName, time.Now().UTC().Format("20060102T150405Z"))
	res.Moved = append(res.Moved, moved...)
	if err != nil {
		return res, err
	}
	if err := statedir.AdvanceAnchor(dir, rep.LastSeq, rep.LastHash, signer); err != nil {
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
		if !p.Lost() {
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

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
