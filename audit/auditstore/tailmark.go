//go:build unix

package auditstore

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// tailCheckedName is the file in ReserveDirName naming the journal whose
// whole preallocated tail an Open checked for what a crash left
// (journal.clearAfter), and the boot it did so in. Like the count file it
// is never fsynced: it is believed only in the boot that wrote it, and a
// machine crash, the one thing that leaves bytes there, ends that boot.
const tailCheckedName = ".tail-checked"

// tailMark names this boot and the journal file f (device and inode, so a
// journal replaced by another file is checked again); "" when the boot is
// unknown, which no mark matches.
func tailMark(f *os.File) string {
	boot := bootID()
	if boot == "" {
		return ""
	}
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("boot=%s dev=%d ino=%d\n", boot, st.Dev, st.Ino)
}

func tailCheckedPath(stateDir string) string {
	return filepath.Join(stateDir, ReserveDirName, tailCheckedName)
}

// tailChecked reports whether stateDir's mark is mark (journal locked).
func tailChecked(stateDir, mark string) bool {
	if mark == "" {
		return false
	}
	f, err := os.OpenFile(tailCheckedPath(stateDir), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return false
	}
	defer f.Close()
	buf := make([]byte, len(mark)+1)
	n, _ := io.ReadFull(f, buf)
	return string(buf[:n]) == mark
}

// markTailChecked records mark (journal locked). Best effort: without it
// the next Open reads the whole tail again.
func markTailChecked(stateDir, mark string) {
	if mark == "" {
		return
	}
	f, err := os.OpenFile(tailCheckedPath(stateDir), os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o600)
	if err != nil {
		return
	}
	_, _ = f.WriteString(mark)
	_ = f.Close()
}
