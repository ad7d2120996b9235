// Command deadline ignores SIGTERM (reporting on stderr when it arrives),
// leaves a setsid, double-forked, SIGTERM-ignoring grandchild behind, and
// never exits: only the deadline's cgroup kill can end it.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	start := time.Now()
	sh := exec.Command("/bin/sh", "-c", `setsid /bin/sh -c 'trap "" TERM; exec /bin/sleep 98765' </dev/null >/dev/null 2>&1 &`)
	if err := sh.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "spawn:", err)
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	fmt.Fprintln(os.Stderr, "ready")
	for range ch {
		fmt.Fprintf(os.Stderr, "SIGTERM after %d ms\n", time.Since(start).Milliseconds())
	}
}
