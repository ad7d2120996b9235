package auditstore

import (
	"os"
	"strings"
)

// bootID returns the kernel's random id of this boot ("" if unreadable).
// A variable so that tests can simulate a reboot.
var bootID = func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
