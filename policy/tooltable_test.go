package policy

import "testing"

// TestToolTable: KnownTools, the Enforcer's rule index and kindOf come from
// the one toolTable, with one slot per tool and no name twice.
func TestToolTable(t *testing.T) {
	if numTools != len(KnownTools) {
		t.Fatalf("numTools %d, len(KnownTools) %d", numTools, len(KnownTools))
	}
	seen := map[Tool]bool{}
	for i, tool := range KnownTools {
		if seen[tool] {
			t.Errorf("%s declared twice", tool)
		}
		seen[tool] = true
		if got := toolIndex(tool); got != i {
			t.Errorf("toolIndex(%s) = %d, want %d", tool, got, i)
		}
		if got := kindOf(tool); got != toolTable[i].kind {
			t.Errorf("kindOf(%s) = %d, want %d", tool, got, toolTable[i].kind)
		}
	}
	for _, unknown := range []Tool{"", "bash", "Task", "Read "} {
		if got := toolIndex(unknown); got != -1 {
			t.Errorf("toolIndex(%q) = %d, want -1", unknown, got)
		}
	}
	// Every tool allowed at once: Tools() lists all of them in order.
	var all []ToolRule
	for _, tool := range KnownTools {
		all = append(all, ToolRule{Tool: tool})
	}
	got := NewEnforcer(&Policy{AllowedTools: all}, EnforcerOptions{}).Tools()
	if len(got) != len(KnownTools) {
		t.Fatalf("Tools() = %v, want %v", got, KnownTools)
	}
	for i := range got {
		if got[i] != KnownTools[i] {
			t.Errorf("Tools()[%d] = %s, want %s", i, got[i], KnownTools[i])
		}
	}
}
