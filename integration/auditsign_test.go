//go:build linux

package integration

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/internal/testutil"
)

// The audit chain's signed head, through the real daemon: every head the
// daemon signs is a checkpoint row in the chain, the anchor file and a
// syslog line outside the state dir, and `audit verify` holds the chain to
// all three.

// signedDaemonStore runs n invocations through a daemon whose audit.syslog
// is a datagram socket this test reads, stops it, and returns the env, the
// public key file and the last anchor=SEQ:HASH the syslog got.
func signedDaemonStore(t *testing.T, n int) (*env, string, string) {
	t.Helper()
	testutil.RequiresRoot(t)
	e := newEnv(t)
	e.skill("drill", "", "#!/bin/sh\necho '{\"n\":1}'\n")
	logSock := filepath.Join(e.base, "log.sock")
	ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: logSock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lines := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			k, _, err := ln.ReadFromUnix(buf)
			if err != nil {
				close(lines)
				return
			}
			lines <- string(buf[:k])
		}
	}()
	d := startDaemon(t, e, "audit:", "  syslog: "+logSock)
	for range n {
		if code, env, raw := d.invoke(map[string]any{"skill_id": "drill"}); code != 200 || env.Outcome != "success" {
			t.Fatalf("invoke: %d %s", code, raw)
		}
	}
	d.stop(slow(30 * time.Second))
	anchorRe := regexp.MustCompile(`cyberos-audit.*anchor=([0-9]+:[0-9a-f]{64}) public_key=([0-9a-f]{64}) signature=[0-9a-f]{128}`)
	var last, pub string
	for done := false; !done; {
		select {
		case l := <-lines:
			if m := anchorRe.FindStringSubmatch(l); m != nil {
				last, pub = m[1], m[2]
			}
		case <-time.After(slow(2 * time.Second)):
			done = true
		}
	}
	if last == "" {
		t.Fatal("the daemon sent no signed head to its syslog socket")
	}
	pubFile := filepath.Join(e.base, "etc", "audit-signing.key.pub")
	b, err := os.ReadFile(pubFile)
	if err != nil || strings.TrimSpace(string(b)) != pub {
		t.Fatalf("%s: %q (%v), want the key the syslog line names, %s", pubFile, b, err, pub)
	}
	return e, pubFile, last
}

// TestAuditSignedHeadThroughDaemon: the daemon's chain ends in a checkpoint
// row over its last invocation's rows, the syslog line names the chain's
// real head, and verify with the key pinned and that head passes.
func TestAuditSignedHeadThroughDaemon(t *testing.T) {
	e, pubFile, head := signedDaemonStore(t, 3)
	rows := e.auditRows()
	lastRow := rows[len(rows)-1]
	if lastRow.Kind != audit.KindCheckpoint {
		t.Fatalf("the chain ends in %s, want %s", lastRow.Kind, audit.KindCheckpoint)
	}
	if want := strings.Split(head, ":"); want[0] != itoa(lastRow.Seq) || want[1] != lastRow.RowHash {
		t.Errorf("syslog head %s, want the chain's head %d:%s", head, lastRow.Seq, lastRow.RowHash)
	}
	var cp audit.Checkpoint
	if err := json.Unmarshal(lastRow.Payload, &cp); err != nil || cp.Seq != lastRow.Seq-1 {
		t.Errorf("checkpoint %s signs seq %d, want %d", lastRow.Payload, cp.Seq, lastRow.Seq-1)
	}
	code, out := e.verify("--pubkey", pubFile, "--anchor", "anchor="+head)
	if code != 0 {
		t.Fatalf("verify exit %d\n%s", code, out)
	}
	mustContain(t, "verify", out, "SIGNED", "pinned with --pubkey", "ok: ")
}

// TestAuditRechainedRewriteIsCaught: an old row altered and every hash
// after it recomputed, the index and the anchor deleted: the chain's own
// hashes verify, but the daemon's checkpoint does not, with or without the
// key pinned; re-signed with another key, only the pinned check fails.
func TestAuditRechainedRewriteIsCaught(t *testing.T) {
	e, pubFile, _ := signedDaemonStore(t, 2)
	rows := e.auditRows()
	altered := -1
	for i, r := range rows {
		if r.Kind == audit.KindInvokedCompleted {
			rows[i].Payload = bytes.Replace(r.Payload, []byte(`"success"`), []byte(`"error"`), 1)
			altered = i
			break
		}
	}
	if altered < 0 {
		t.Fatal("no completed row to alter")
	}
	writeRechained(t, e, rows, altered)
	code, out := e.verify()
	if code != 1 {
		t.Errorf("verify of a re-chained rewrite: exit %d, want 1\n%s", code, out)
	}
	mustContain(t, "verify", out, "checkpoint", "the chain was rewritten")
	code, out = e.verify("--pubkey", pubFile)
	if code != 1 {
		t.Errorf("pinned verify of a re-chained rewrite: exit %d, want 1\n%s", code, out)
	}

	// The forger signs the rewritten head with a key of its own.
	evil, err := auditstore.LoadSigningKey(filepath.Join(t.TempDir(), "evil.key"), true)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if r.Kind == audit.KindCheckpoint {
			var cp audit.Checkpoint
			if err := json.Unmarshal(r.Payload, &cp); err != nil {
				t.Fatal(err)
			}
			rows[i].Payload = evil.CheckpointRow(cp.Seq, rows[cp.Seq-1].RowHash).Payload
			rechain(t, rows, i)
		}
	}
	writeRechained(t, e, rows, 0)
	if code, out := e.verify(); code != 0 || !strings.Contains(out, evil.PublicKey()) {
		t.Errorf("unpinned verify of a re-signed rewrite: exit %d, want 0 naming the other key\n%s", code, out)
	}
	code, out = e.verify("--pubkey", pubFile)
	if code != 1 {
		t.Errorf("pinned verify of a re-signed rewrite: exit %d, want 1\n%s", code, out)
	}
	mustContain(t, "pinned verify", out, "not the pinned key")
}

// TestAuditTailCutEverythingDeleted: the journal's tail cut and the index
// and the anchor deleted leave a chain that verifies on its own; the head
// the syslog recorded shows the rows lost.
func TestAuditTailCutEverythingDeleted(t *testing.T) {
	e, pubFile, head := signedDaemonStore(t, 3)
	rows := e.auditRows()
	writeRechained(t, e, rows[:4], len(rows))
	if code, out := e.verify(); code != 0 {
		t.Fatalf("without the syslog's head the cut chain verifies (exit %d)\n%s", code, out)
	}
	code, out := e.verify("--pubkey", pubFile, "--anchor", head)
	if code != 1 {
		t.Errorf("verify --anchor %s: exit %d, want 1\n%s", head, code, out)
	}
	mustContain(t, "verify", out, "rows lost", "rows 5..")
	if code, out := e.verify("--anchor", "12:zz"); code != 2 || !strings.Contains(out, "SEQ:ROW_HASH") {
		t.Errorf("a malformed --anchor: exit %d\n%s", code, out)
	}
}

// rechain recomputes every link and hash from row i on.
func rechain(t *testing.T, rows []audit.Row, i int) {
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
}

// writeRechained re-chains rows from i, makes them the whole journal, and
// deletes the index and the anchor.
func writeRechained(t *testing.T, e *env, rows []audit.Row, i int) {
	t.Helper()
	rechain(t, rows, min(i, len(rows)))
	var buf bytes.Buffer
	if err := audit.WriteJSONL(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.stateDir, "audit.jsonl"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"audit.db", "audit.db-wal", "audit.db-shm", "audit.anchor"} {
		os.Remove(filepath.Join(e.stateDir, name))
	}
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }
