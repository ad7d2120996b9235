package auditstore

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
	"cyberos.dev/internal/testutil"
)

func newTestSigner(t *testing.T) *audit.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return audit.NewSigner(k)
}

// signedStore makes a closed store with a signer and a sink, holding two
// whole invocations, and returns its dir, the signer and what the sink got.
func signedStore(t *testing.T) (string, *audit.Signer, []audit.Checkpoint) {
	t.Helper()
	dir := t.TempDir()
	sg := newTestSigner(t)
	var mu sync.Mutex
	var got []audit.Checkpoint
	s, err := Open(dir, WithSigner(sg), WithSink(func(c audit.Checkpoint) { mu.Lock(); got = append(got, c); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	emitAll(t, s, append(invocation("inv-a"), invocation("inv-b")...)...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, sg, got
}

func rowsOf(t *testing.T, lines [][]byte) []audit.Row {
	t.Helper()
	var rows []audit.Row
	for _, l := range lines {
		r, err := audit.DecodeRow(l)
		if err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	return rows
}

// rechain recomputes every link and hash from row i on, as someone who can
// write the state dir but holds no key would after altering row i.
func rechain(t *testing.T, rows []audit.Row, i int) [][]byte {
	t.Helper()
	for j := i; j < len(rows); j++ {
		if j > 0 {
			rows[j].PrevHash = rows[j-1].RowHash
		}
		h, err := rows[j].ComputeHash()
		if err != nil {
			t.Fatal(err)
		}
		rows[j].RowHash = h
	}
	var lines [][]byte
	for _, r := range rows {
		lines = append(lines, bytes.TrimSuffix(audit.AppendJournalLine(nil, r), []byte("\n")))
	}
	return lines
}

func removeIndexAndAnchor(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{FileName, FileName + "-wal", FileName + "-shm", AnchorName} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !strings.Contains(err.Error(), "no such file") {
			t.Fatal(err)
		}
	}
}

// TestCloseSignsTheHead: a store with a signer ends its chain with a
// checkpoint row over the head before it, signs the anchor, sends the head
// to its sink, and the chain verifies with the key pinned.
func TestCloseSignsTheHead(t *testing.T) {
	dir, sg, sunk := signedStore(t)
	rows := rowsOf(t, journalLines(t, dir))
	last := rows[len(rows)-1]
	if last.Kind != audit.KindCheckpoint || last.Seq != 13 {
		t.Fatalf("last row is %s seq %d, want the checkpoint, seq 13", last.Kind, last.Seq)
	}
	if !bytes.Contains(last.Payload, []byte(`"head_seq":12`)) || !bytes.Contains(last.Payload, []byte(rows[11].RowHash)) {
		t.Fatalf("checkpoint payload %s does not sign seq 12 (%s)", last.Payload, rows[11].RowHash)
	}
	a, ok, err := statedir.ReadAnchor(dir)
	if err != nil || !ok || a.Seq != 13 || a.Signature == "" || a.Checkpoint().Check(sg.PublicKey()) != nil {
		t.Fatalf("anchor %+v (%v %v) is not a signed head at seq 13", a, ok, err)
	}
	if len(sunk) == 0 || sunk[len(sunk)-1].Seq != 13 || sunk[len(sunk)-1].RowHash != last.RowHash || sunk[len(sunk)-1].Check(sg.PublicKey()) != nil {
		t.Fatalf("sink got %+v, want the signed head at seq 13", sunk)
	}
	rep, err := VerifyDirWith(context.Background(), dir, VerifyOptions{PublicKey: sg.PublicKey(), Heads: sunk})
	if err != nil || !rep.OK || rep.Checkpoints != 1 || rep.LastCheckpoint != 12 || len(rep.SigningKeys) != 1 || rep.SigningKeys[0] != sg.PublicKey() {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	// A second Close of a store that wrote nothing adds no checkpoint.
	s := openStore(t, dir, WithSigner(sg))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := len(journalLines(t, dir)); n != 13 {
		t.Fatalf("an idle store's Close wrote rows: %d lines, want 13", n)
	}
}

// TestCheckpointCatchesRechainedRewrite: altering an old row and
// recomputing every hash after it (index and anchor deleted) leaves a chain
// whose hashes all verify; the checkpoint signed over the old head does
// not, and names the rewrite.
func TestCheckpointCatchesRechainedRewrite(t *testing.T) {
	dir, sg, _ := signedStore(t)
	rows := rowsOf(t, journalLines(t, dir))
	rows[2].Payload = bytes.Replace(rows[2].Payload, []byte("MemoryRead"), []byte("MemoryEmit"), 1)
	writeJournal(t, dir, rechain(t, rows, 2))
	removeIndexAndAnchor(t, dir)
	if rep := Verify(rowsOf(t, journalLines(t, dir))[:12]); !rep.OK {
		t.Fatalf("the re-chained rows should verify on their own hashes: %+v", rep.Problems)
	}
	for _, pin := range []string{"", sg.PublicKey()} {
		rep, err := VerifyDirWith(context.Background(), dir, VerifyOptions{PublicKey: pin})
		if err != nil {
			t.Fatal(err)
		}
		p := firstBad(t, rep)
		if p.Seq != 13 || !strings.Contains(p.Reason, "the chain was rewritten") {
			t.Errorf("pin %q: first problem %+v, want the checkpoint at seq 13 naming a rewrite", pin, p)
		}
	}
}

// TestCheckpointForgedWithOtherKey: a rewrite re-signed with the attacker's
// own key verifies only when no key is pinned; the report names the key,
// and with the real key pinned it fails.
func TestCheckpointForgedWithOtherKey(t *testing.T) {
	dir, sg, _ := signedStore(t)
	rows := rowsOf(t, journalLines(t, dir))
	rows[2].Payload = bytes.Replace(rows[2].Payload, []byte("MemoryRead"), []byte("MemoryEmit"), 1)
	rechain(t, rows[:12], 2)
	evil := newTestSigner(t)
	d := evil.CheckpointRow(12, rows[11].RowHash)
	canon, err := d.Canonical()
	if err != nil {
		t.Fatal(err)
	}
	rows[12].Payload = canon
	writeJournal(t, dir, rechain(t, rows, 12))
	removeIndexAndAnchor(t, dir)

	rep, err := VerifyDirWith(context.Background(), dir, VerifyOptions{})
	if err != nil || !rep.OK || len(rep.SigningKeys) != 1 || rep.SigningKeys[0] != evil.PublicKey() {
		t.Fatalf("unpinned: %+v %v; want ok, signed by the other key", rep, err)
	}
	rep, err = VerifyDirWith(context.Background(), dir, VerifyOptions{PublicKey: sg.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	if p := firstBad(t, rep); p.Seq != 13 || !strings.Contains(p.Reason, "not the pinned key") {
		t.Errorf("pinned: first problem %+v, want seq 13 signed by another key", p)
	}
}

// TestExternalHeadCatchesTailLoss: with the journal's tail cut and the index
// and the anchor deleted, only a head recorded outside the state dir (the
// sink's) shows the loss.
func TestExternalHeadCatchesTailLoss(t *testing.T) {
	dir, sg, sunk := signedStore(t)
	lines := journalLines(t, dir)
	writeJournal(t, dir, lines[:9])
	removeIndexAndAnchor(t, dir)
	if rep := verifyDir(t, dir); !rep.OK {
		t.Fatalf("without an outside record the cut chain verifies: %+v", rep.Problems)
	}
	rep, err := VerifyDirWith(context.Background(), dir, VerifyOptions{PublicKey: sg.PublicKey(), Heads: sunk[len(sunk)-1:]})
	if err != nil {
		t.Fatal(err)
	}
	if p := firstBad(t, rep); p.Seq != 10 || !strings.Contains(p.Reason, "rows 10..13 are missing") {
		t.Errorf("first problem %+v, want rows 10..13 missing", p)
	}
}

// TestPinnedKeyNeedsSignedAnchor: an anchor replaced by an unsigned (or
// differently signed) one is named when the key is pinned.
func TestPinnedKeyNeedsSignedAnchor(t *testing.T) {
	dir, sg, _ := signedStore(t)
	a, _, _ := statedir.ReadAnchor(dir)
	if err := os.Remove(filepath.Join(dir, AnchorName)); err != nil {
		t.Fatal(err)
	}
	if err := statedir.AdvanceAnchor(dir, a.Seq, a.RowHash, nil); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyDirWith(context.Background(), dir, VerifyOptions{PublicKey: sg.PublicKey()})
	if err != nil {
		t.Fatal(err)
	}
	if p := firstBad(t, rep); p.File != AnchorName || !strings.Contains(p.Reason, "not signed") {
		t.Errorf("first problem %+v, want the unsigned anchor", p)
	}
	os.Remove(filepath.Join(dir, AnchorName))
	if err := statedir.AdvanceAnchor(dir, a.Seq, a.RowHash, newTestSigner(t)); err != nil {
		t.Fatal(err)
	}
	rep, _ = VerifyDirWith(context.Background(), dir, VerifyOptions{PublicKey: sg.PublicKey()})
	if p := firstBad(t, rep); p.File != AnchorName || !strings.Contains(p.Reason, "not the pinned key") {
		t.Errorf("first problem %+v, want the anchor signed by another key", p)
	}
}

// TestCheckpointRowValidation: the kind's payload is closed and typed like
// every other kind's, and carries no invocation keys.
func TestCheckpointRowValidation(t *testing.T) {
	sg := newTestSigner(t)
	if err := sg.CheckpointRow(5, zeroHash(5)).Validate(); err != nil {
		t.Fatalf("a signer's row: %v", err)
	}
	good := string(sg.CheckpointRow(5, zeroHash(5)).Payload)
	for name, payload := range map[string]string{
		"short signature":   strings.Replace(good, `"signature":"`, `"signature":"ab`, 1)[:len(good)-10] + `"}`,
		"invocation key":    strings.Replace(good, `{`, `{"invocation_id":"x",`, 1),
		"missing head":      strings.Replace(good, `"head_seq":5,`, ``, 1),
		"uppercase key hex": strings.Replace(good, `"public_key":"`, `"public_key":"A`, 1)[:len(good)] + `"}`,
	} {
		if err := (audit.Draft{Kind: audit.KindCheckpoint, Payload: []byte(payload)}).Validate(); err == nil {
			t.Errorf("%s: %s accepted", name, payload)
		}
	}
	if sg.CheckpointRow(-1, zeroHash(1)).Validate() == nil || sg.CheckpointRow(1, "xyz").Validate() == nil {
		t.Error("a checkpoint of a bad head was accepted")
	}
}

// TestSigningKeyFiles: the key is created once (0600, its public half
// beside it), read back the same, and a file that is not a key is named.
func TestSigningKeyFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys", "audit-signing.key")
	if _, err := LoadSigningKey(path, false); err == nil {
		t.Fatal("a missing key loaded without create")
	}
	a, err := LoadSigningKey(path, true)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadSigningKey(path, true)
	if err != nil || b.PublicKey() != a.PublicKey() {
		t.Fatalf("second load: %v, key changed: %v", err, b != nil && b.PublicKey() != a.PublicKey())
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key mode: %v %v", fi, err)
	}
	for _, p := range []string{path, path + ".pub"} {
		if pub, err := ReadPublicKey(p); err != nil || pub != a.PublicKey() {
			t.Errorf("ReadPublicKey(%s) = %q, %v", p, pub, err)
		}
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("not a key\n"), 0o600)
	if _, err := LoadSigningKey(bad, true); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad key: %v", err)
	}
	if _, err := ReadPublicKey(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad public key: %v", err)
	}
}

// TestApplierCheckpointsWhileRowsFlow: while rows are written the applier
// signs the head every anchorEvery, in the chain and in the anchor, without
// waiting for Close.
func TestApplierCheckpointsWhileRowsFlow(t *testing.T) {
	old := anchorEvery
	anchorEvery = 20 * time.Millisecond
	t.Cleanup(func() { anchorEvery = old })
	dir := t.TempDir()
	sg := newTestSigner(t)
	s := openStore(t, dir, WithSigner(sg))
	// Rows flow, an invocation a poll, until two checkpoint rows and a
	// signed anchor are there.
	i := 0
	testutil.WaitFor(t, 10*time.Second, func() bool {
		emitAll(t, s, invocation(fmt.Sprintf("inv-%d", i))...)
		i++
		n := 0
		for _, r := range rowsOf(t, journalLines(t, dir)) {
			if r.Kind == audit.KindCheckpoint {
				n++
			}
		}
		a, ok, _ := statedir.ReadAnchor(dir)
		return n >= 2 && ok && a.Signature != ""
	})
	rep, err := VerifyDirWith(context.Background(), dir, VerifyOptions{PublicKey: sg.PublicKey()})
	if err != nil || !rep.OK || rep.Checkpoints < 2 {
		t.Fatalf("verify while open: %+v %v", rep, err)
	}
}
