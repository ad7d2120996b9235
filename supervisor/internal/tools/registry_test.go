package tools

import (
	"errors"
	"strings"
	"testing"

	"cyberos.dev/policy"
)

func TestRegistryComplete(t *testing.T) {
	m := Registry()
	if err := CheckRegistry(m); err != nil {
		t.Fatal(err)
	}
	if len(m) != len(policy.KnownTools) {
		t.Errorf("%d tools, want %d", len(m), len(policy.KnownTools))
	}
	for name, tool := range m {
		if tool.Name() != name || tool.Description() == "" {
			t.Errorf("%s: Name() %s, Description %q", name, tool.Name(), tool.Description())
		}
	}
}

func TestCheckRegistry(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(map[policy.Tool]Tool)
		want   string
	}{
		{"missing", func(m map[policy.Tool]Tool) { delete(m, policy.ToolRead) }, "Read is missing"},
		{"unknown", func(m map[policy.Tool]Tool) { m["Shell"] = NewBash() }, `"Shell" is not a native tool`},
		{"misnamed", func(m map[policy.Tool]Tool) { m[policy.ToolRead] = NewWrite() }, `registered as Read calls itself "Write"`},
		{"nil", func(m map[policy.Tool]Tool) { m[policy.ToolGrep] = nil }, "Grep has no implementation"},
	} {
		m := Registry()
		c.change(m)
		err := CheckRegistry(m)
		if !errors.Is(err, ErrRegistry) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrRegistry with %q", c.name, err, c.want)
		}
	}
	if err := CheckRegistry(nil); !errors.Is(err, ErrRegistry) {
		t.Errorf("nil registry: %v", err)
	}
}
