package auditstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/audit"
)

// fillDisk writes a file in dir until the filesystem is full.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "filler"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for size := len(buf); size > 0; {
		if _, err := f.Write(buf[:size]); err != nil {
			size /= 2
		}
	}
}

func verifyOK(t *testing.T, s *Store) {
	t.Helper()
	rep, err := s.Verify(context.Background())
	if err != nil || !rep.OK {
		t.Fatalf("verify: %+v %v", rep.Problems, err)
	}
}

// TestReserveFullDisk: on a full disk, a reservation taken by one store
// keeps its journal space from plain rows of another store on the same
// state dir (refused with ErrNoSpace and ENOSPC), while the reserved
// invocation's timeout and completed rows land, also when they share a
// batch with a refused plain row.
func TestReserveFullDisk(t *testing.T) {
	dir := mountTmpfs(t, "20m") // room for a preallocated chunk and its headroom
	holder := openStore(t, dir)
	other := openStore(t, dir)
	emitAll(t, other, audit.NoConnect(common("warm"), 1)) // the journal has its chunk
	fillDisk(t, dir)

	release, err := holder.Reserve("inv-a")
	if err != nil {
		t.Fatalf("Reserve with the journal's chunk free: %v", err)
	}
	defer release()
	if _, err := os.Stat(filepath.Join(dir, ReserveDirName, "inv-a")); err != nil {
		t.Fatal(err)
	}
	emitAll(t, holder, invocation("inv-a")[0]) // started, as the supervisor does
	// Big rows, then small ones, until even a small one is refused.
	var acked int
	for _, n := range []int{16 << 10, 100} {
		reason := strings.Repeat("x", n)
		for i := range 100000 {
			_, err = other.Emit(context.Background(), audit.ToolDenied(common("noisy"), "Bash", reason, zeroHash(i)))
			if err != nil {
				break
			}
			acked++
		}
		if !errors.Is(err, ErrNoSpace) || !errors.Is(err, ErrUnavailable) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("after %d plain rows: Emit = %v, want ErrNoSpace wrapping ErrUnavailable and ENOSPC", acked, err)
		}
	}
	t.Logf("plain rows refused after %d: %v", acked, err)

	// A plain row and the timeout row in one batch: the plain one is
	// refused, the timeout row is written.
	holder.lazyHold = time.Hour
	wait, err := holder.Enqueue(context.Background(), audit.ToolDenied(common("inv-a"), "Bash", "late", zeroHash(1)))
	if err != nil {
		t.Fatal(err)
	}
	timeout, err := holder.Emit(context.Background(), audit.Timeout(common("inv-a"), 1000, "SIGKILL"))
	if err != nil {
		t.Fatalf("timeout row of a reserved invocation on a full disk: %v", err)
	}
	if r, err := wait(); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("plain row batched with the timeout row = seq %d %v, want ErrNoSpace", r.Seq, err)
	}
	completed, err := holder.Emit(context.Background(), audit.InvokedCompleted(common("inv-a"), audit.OutcomeTimeout, 1000, "", "deadline exceeded"))
	if err != nil {
		t.Fatalf("completed row of a reserved invocation on a full disk: %v", err)
	}
	if completed.Seq != timeout.Seq+1 {
		t.Fatalf("completed seq %d follows timeout seq %d", completed.Seq, timeout.Seq)
	}
	release()
	release() // idempotent
	if _, err := os.Stat(filepath.Join(dir, ReserveDirName, "inv-a")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("reservation file after release: %v", err)
	}
	// No room for another reservation: refused before dispatch.
	if _, err := holder.Reserve("inv-b"); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Reserve on a full disk = %v, want ErrNoSpace", err)
	}
	os.Remove(filepath.Join(dir, "filler"))
	release, err = holder.Reserve("inv-b")
	if err != nil {
		t.Fatalf("Reserve after space was freed: %v", err)
	}
	release()
	emitAll(t, other, audit.NoConnect(common("after"), 1))
	holder.Close()
	other.Close()
	remount(t, dir, 0, "size=48m") // room for the index, a copy of the rows
	s := openStore(t, dir)
	verifyOK(t, s)
	rows, err := s.Rows(context.Background(), Filter{InvocationID: "inv-a"})
	if err != nil || len(rows) != 3 || rows[1].Kind != audit.KindTimeout || rows[2].Kind != audit.KindInvokedCompleted {
		t.Fatalf("inv-a's rows: %d, %v", len(rows), err)
	}
}

// TestReserveCountedAcrossStores: reservations of two stores on one state
// dir are counted by both, and the journal's free tail covers them all.
func TestReserveCountedAcrossStores(t *testing.T) {
	dir := t.TempDir()
	a, b := openStore(t, dir), openStore(t, dir)
	var releases []func()
	for i, s := range []*Store{a, a, b} {
		r, err := s.Reserve(fmt.Sprintf("inv-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	if _, err := b.Reserve("inv-0"); err == nil {
		t.Fatal("a second reservation under one id was taken")
	}
	for _, s := range []*Store{a, b} {
		if n, err := s.resv.cached(); err != nil || n != 3 {
			t.Fatalf("count = %d, %v; want 3", n, err)
		}
	}
	fi, err := os.Stat(filepath.Join(dir, JournalName))
	if err != nil {
		t.Fatal(err)
	}
	emitAll(t, b, invocation("inv-2")...)
	end, err := a.j.durableEnd()
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size()-end < 3*TerminalReserve {
		t.Fatalf("journal tail %d bytes, want >= %d", fi.Size()-end, 3*TerminalReserve)
	}
	releases[0]()
	if n, err := b.resv.recount(); err != nil || n != 2 {
		t.Fatalf("recount after one release = %d, %v; want 2 (the others still stand)", n, err)
	}
	for _, r := range releases {
		r()
	}
	verifyOK(t, a)
}

// TestReserveLeftoverCleaned: a reservation file whose holder died (no
// statedir.Flock on it) is removed at the next Open; a live one is kept.
func TestReserveLeftoverCleaned(t *testing.T) {
	dir := t.TempDir()
	live := openStore(t, dir)
	release, err := live.Reserve("live")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	dead := filepath.Join(dir, ReserveDirName, "crashed")
	if err := os.WriteFile(dead, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, dir)
	if _, err := os.Stat(dead); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover reservation after Open: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ReserveDirName, "live")); err != nil {
		t.Fatalf("live reservation after Open: %v", err)
	}
	if n, err := s.resv.cached(); err != nil || n != 1 {
		t.Fatalf("count = %d, %v; want 1", n, err)
	}
	for _, id := range []string{"", ".count", "../x", "a/b"} {
		if _, err := s.Reserve(id); !errors.Is(err, audit.ErrInvalidRow) {
			t.Fatalf("Reserve(%q) = %v, want ErrInvalidRow", id, err)
		}
	}
	emitAll(t, s, invocation("x")...)
	verifyOK(t, s)
}
