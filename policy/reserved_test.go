package policy

import (
	"errors"
	"testing"
)

// TestReservedDirsBeatAllowedFiles: a path in or equal to a reserved
// directory is a file_violation even when x-allowed-files covers it; its
// neighbours stay allowed.
func TestReservedDirsBeatAllowedFiles(t *testing.T) {
	e := NewEnforcer(&Policy{
		AllowedTools: []ToolRule{{Tool: ToolRead}, {Tool: ToolWrite}},
		AllowedFiles: []string{"/var/lib/**"},
	}, EnforcerOptions{ReservedDirs: []string{"/var/lib/cyberos"}})
	for _, p := range []string{"/var/lib/cyberos", "/var/lib/cyberos/audit.db", "/var/lib/x/../cyberos/memory.db", "/var/lib//cyberos/./logs/a"} {
		_, err := e.CheckFile(ToolWrite, p)
		var d *Denial
		if !errors.As(err, &d) || d.Reason != ReasonFile {
			t.Errorf("CheckFile(%q) = %v, want a file_violation", p, err)
		}
	}
	for _, p := range []string{"/var/lib/cyberos2/x", "/var/lib/other/audit.db"} {
		if _, err := e.CheckFile(ToolRead, p); err != nil {
			t.Errorf("CheckFile(%q) = %v, want allowed", p, err)
		}
	}
}
