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

// TestToolEffects: every tool declares its effect (a new tool must choose),
// and exactly the read-only ones are effect-free: a tool that acts on the
// world keeps its started row durable before it runs.
func TestToolEffects(t *testing.T) {
	for _, e := range toolTable {
		if e.effect != effectNone && e.effect != effectOutside {
			t.Errorf("%s has no effect classification in toolTable", e.tool)
		}
	}
	effectFree := map[Tool]bool{ToolRead: true, ToolGlob: true, ToolGrep: true, ToolMemoryRead: true, ToolMemorySearch: true}
	for _, tool := range []Tool{ToolBash, ToolWrite, ToolEdit, ToolMemoryEmit, ToolHttpFetch, ToolHttpPost} {
		if EffectFree(tool) {
			t.Errorf("EffectFree(%s) = true: it acts outside the supervisor", tool)
		}
	}
	for _, tool := range KnownTools {
		if got := EffectFree(tool); got != effectFree[tool] {
			t.Errorf("EffectFree(%s) = %v, want %v", tool, got, effectFree[tool])
		}
	}
	for _, unknown := range []Tool{"", "read", "Task"} {
		if EffectFree(unknown) {
			t.Errorf("EffectFree(%q) = true for a tool outside the table", unknown)
		}
	}
}
