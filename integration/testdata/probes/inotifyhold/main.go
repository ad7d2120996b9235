// Command inotifyhold creates inotify instances until the kernel refuses
// one or it holds 200, renames itself "inotify-held" (its comm, so the
// host sees it is holding them), holds them until SIGTERM, then prints
// {"held":N,"errno":"..."}.
package main

import (
	"encoding/json"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// init keeps main on the thread group leader, whose name /proc/PID/comm shows.
func init() { runtime.LockOSThread() }

func main() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	held, why := 0, ""
	for held < 200 {
		if _, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
			why = err.Error()
			break
		}
		held++
	}
	name := []byte("inotify-held\x00")
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&name[0])), 0, 0, 0)
	<-term
	json.NewEncoder(os.Stdout).Encode(map[string]any{"held": held, "errno": why})
}
