package tools

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cyberos.dev/policy"
)

// A directory swapped for a symlink to the outside while the tools run (the
// race a check-then-open design loses): every call either works inside or is
// refused; none reads or writes the outside file.
func TestFileToolsSymlinkSwapRace(t *testing.T) {
	w := ftNew(t)
	if err := os.Mkdir(w.in("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	ftWrite(t, w.in("d/f"), "inside")
	ftWrite(t, filepath.Join(w.outside, "f"), "SECRET")
	ftSymlink(t, w.outside, w.in("swap"))

	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, w.in("d"), unix.AT_FDCWD, w.in("swap"), unix.RENAME_EXCHANGE); err != nil {
				t.Errorf("exchange: %v", err)
				return
			}
		}
	}()
	deadline := time.Now().Add(300 * time.Millisecond)
	reads := 0
	for i := 0; time.Now().Before(deadline); i++ {
		res, err := w.call(t, NewRead(), map[string]any{"path": w.in("d/f")})
		if err == nil {
			reads++
			if body := readOut(t, res).Body; body != "inside" && !strings.HasPrefix(body, "w") {
				t.Fatalf("Read returned %q", body)
			}
		} else {
			var d *policy.Denial
			if !errors.As(err, &d) && !errors.Is(err, ErrNotFound) {
				t.Fatalf("Read: %v", err)
			}
		}
		w.call(t, NewWrite(), map[string]any{"path": w.in("d/f"), "content": "w" + strconv.Itoa(i)})
		if res, err := w.call(t, NewGrep(), map[string]any{"pattern": "SECRET", "path": w.allowed}); err == nil && len(decodeAs[grepResult](t, res).Matches) > 0 {
			t.Fatalf("Grep found %v", res)
		}
	}
	close(stop)
	<-done
	if got := ftRead(t, filepath.Join(w.outside, "f")); got != "SECRET" {
		t.Errorf("the outside file was written: %q", got)
	}
	t.Logf("%d reads succeeded inside during the swaps", reads)
}
