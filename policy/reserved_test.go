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

// TestSkillFileAndReservedPaths: a file named SKILL.md, in any case, is a
// file_violation wherever it lies and however the path is spelt
// ("a/../b/SKILL.md" is b's), and Reserved reports what CheckFile refuses
// as reserved.
func TestSkillFileAndReservedPaths(t *testing.T) {
	e := NewEnforcer(&Policy{
		AllowedTools: []ToolRule{{Tool: ToolRead}, {Tool: ToolWrite}, {Tool: ToolGlob}},
		AllowedFiles: []string{"/tmp/x/**"},
	}, EnforcerOptions{ReservedDirs: []string{"/tmp/x/skills"}})
	for _, p := range []string{"/tmp/x/SKILL.md", "/tmp/x/other/a/SKILL.md", "/tmp/x/other/a/../b/SKILL.md",
		"/tmp/x/other//b/./SKILL.md", "/tmp/x/skills/a/../b/main", "/tmp/x/skills", "/tmp/x/other/../skills/a",
		// Case variants: a casefold directory takes each for SKILL.md.
		"/tmp/x/SKILL.MD", "/tmp/x/skill.md", "/tmp/x/Skill.Md", "/tmp/x/\u017fkill.md", "/tmp/x/S\u212aILL.md"} {
		for _, tool := range []Tool{ToolRead, ToolWrite, ToolGlob} {
			_, err := e.CheckFile(tool, p)
			var d *Denial
			if !errors.As(err, &d) || d.Reason != ReasonFile {
				t.Errorf("CheckFile(%s, %q) = %v, want a file_violation", tool, p, err)
			}
		}
		if !e.Reserved(p) {
			t.Errorf("Reserved(%q) = false", p)
		}
	}
	for _, p := range []string{"/tmp/x/SKILL.md.bak", "/tmp/x/my-skill.md", "/tmp/x/skill.md/a", "/tmp/x/skillsx/a", "/tmp/x/other/main"} {
		if _, err := e.CheckFile(ToolWrite, p); err != nil {
			t.Errorf("CheckFile(%q) = %v, want allowed", p, err)
		}
		if e.Reserved(p) {
			t.Errorf("Reserved(%q) = true", p)
		}
	}
}
