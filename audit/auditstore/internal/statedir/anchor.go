package statedir

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"cyberos.dev/audit"
)

// AnchorName is the file in the state dir that records a chain head the
// journal has reached: cutting the journal's tail (and deleting the index)
// leaves a shorter chain that verifies on its own, but not one that reaches
// the anchor. The store moves it forward at every clean Close and, while
// rows are written, every anchorEvery.
const AnchorName = "audit.anchor"

// Anchor is a chain head recorded outside the journal.
type Anchor struct {
	Seq     int64  `json:"seq"`
	RowHash string `json:"row_hash"`
	TS      string `json:"ts"` // when it was recorded
	// PublicKey and Signature sign (Seq, RowHash) as a checkpoint does,
	// when the store has a signer; anchors written without one lack them.
	PublicKey string `json:"public_key,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// Checkpoint is a's signed head, for Checkpoint.Check.
func (a Anchor) Checkpoint() audit.Checkpoint {
	return audit.Checkpoint{Seq: a.Seq, RowHash: a.RowHash, PublicKey: a.PublicKey, Signature: a.Signature}
}

// ReadAnchor returns the anchor in dir (ok false when there is none).
func ReadAnchor(dir string) (a Anchor, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, AnchorName))
	if errors.Is(err, fs.ErrNotExist) {
		return Anchor{}, false, nil
	}
	if err != nil {
		return Anchor{}, false, err
	}
	if err := json.Unmarshal(b, &a); err != nil {
		return Anchor{}, false, fmt.Errorf("%s: not an anchor (%w)", AnchorName, err)
	}
	if a.Seq < 1 || !audit.IsHash(a.RowHash) {
		return Anchor{}, false, fmt.Errorf("%s: not an anchor (no positive seq and hex row_hash)", AnchorName)
	}
	return a, true, nil
}

// AdvanceAnchor records the head (seq, rowHash) as the anchor unless the anchor is already at or
// past it: it only moves forward. Writers of every process serialise on a
// lock on the state dir; the file is replaced whole (written, synced,
// renamed), so a crash leaves the old anchor or the new one. With a signer
// the anchor is signed.
func AdvanceAnchor(dir string, seq int64, rowHash string, signer *audit.Signer) error {
	if seq < 1 {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := Flock(d, LockExclusive); err != nil {
		return err
	}
	defer Unlock(d)
	if cur, ok, err := ReadAnchor(dir); err == nil && ok && cur.Seq >= seq {
		return nil
	}
	a := Anchor{Seq: seq, RowHash: rowHash, TS: time.Now().UTC().Format(audit.TimeFormat)}
	if signer != nil {
		a.PublicKey, a.Signature = signer.PublicKey(), signer.Sign(seq, rowHash)
	}
	b, _ := json.Marshal(a)
	tmp := filepath.Join(dir, AnchorName+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = Datasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, AnchorName))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return d.Sync()
}

// CheckAnchor compares the chain's last row (seq, hash at the anchor's seq
// when the chain reaches it) with the anchor in dir.
func CheckAnchor(dir string, lastSeq int64, hashAt func(seq int64) (string, error)) error {
	a, ok, err := ReadAnchor(dir)
	if err != nil || !ok {
		return err
	}
	if lastSeq < a.Seq {
		return fmt.Errorf("%w: "+rowsLost+": the chain ends at seq %d, but %s records seq %d (at %s): rows %d..%d are missing",
			ErrNeedsRepair, lastSeq, AnchorName, a.Seq, a.TS, lastSeq+1, a.Seq)
	}
	h, err := hashAt(a.Seq)
	if err != nil {
		return err
	}
	if h != a.RowHash {
		return fmt.Errorf("%w: seq %d's row_hash %.12s… is not the one %s records (%.12s…, at %s): the chain was rewritten",
			ErrNeedsRepair, a.Seq, h, AnchorName, a.RowHash, a.TS)
	}
	return nil
}
