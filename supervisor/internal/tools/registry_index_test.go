package tools

import (
	"slices"
	"testing"

	"cyberos.dev/policy"
)

// TestRegistryToolsHaveAnIndexAndAPolicyName: every tool the broker serves
// is a policy name and has a rule slot in the Enforcer (an allowed bare
// rule makes it callable and listed), and every policy name is served. A
// tool added to the registry without policy's table, or the reverse,
// fails here.
func TestRegistryToolsHaveAnIndexAndAPolicyName(t *testing.T) {
	reg := Registry()
	for name := range reg {
		if !name.Known() {
			t.Errorf("registry tool %s has no policy name (add it to policy's toolTable)", name)
			continue
		}
		e := policy.NewEnforcer(&policy.Policy{AllowedTools: []policy.ToolRule{{Tool: name}}}, policy.EnforcerOptions{})
		if err := e.CheckTool(name); err != nil {
			t.Errorf("registry tool %s has no Enforcer index: allowed bare, CheckTool says %v", name, err)
		}
		if got := e.Tools(); !slices.Equal(got, []policy.Tool{name}) {
			t.Errorf("allowed only %s, Enforcer.Tools() = %v", name, got)
		}
	}
	for _, name := range policy.KnownTools {
		if _, ok := reg[name]; !ok {
			t.Errorf("policy tool %s is not in the registry", name)
		}
	}
}
