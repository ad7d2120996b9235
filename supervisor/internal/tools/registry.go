package tools

import (
	"errors"
	"fmt"
	"slices"

	"cyberos.dev/policy"
)

// ErrRegistry: a tool registry that does not hold exactly the native tools
// under their own names. The broker refuses to start with one.
var ErrRegistry = errors.New("tool registry is not the native tool set")

// Registry returns the native tools by name: one of each of
// policy.KnownTools.
func Registry() map[policy.Tool]Tool {
	all := []Tool{
		NewBash(), NewRead(), NewWrite(), NewEdit(), NewGlob(), NewGrep(),
		NewMemoryRead(), NewMemorySearch(), NewMemoryEmit(), NewHttpFetch(), NewHttpPost(),
	}
	m := make(map[policy.Tool]Tool, len(all))
	for _, t := range all {
		m[t.Name()] = t
	}
	return m
}

// CheckRegistry reports every way m differs from the native tool set: a
// policy.KnownTools entry missing, a name that is not a known tool, a nil
// tool, a tool whose Name() is not its key. Each problem wraps ErrRegistry.
func CheckRegistry(m map[policy.Tool]Tool) error {
	var errs []error
	for _, name := range policy.KnownTools {
		if _, ok := m[name]; !ok {
			errs = append(errs, fmt.Errorf("%w: %s is missing", ErrRegistry, name))
		}
	}
	names := make([]policy.Tool, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t := m[name]
		switch {
		case !name.Known():
			errs = append(errs, fmt.Errorf("%w: %q is not a native tool", ErrRegistry, name))
		case t == nil:
			errs = append(errs, fmt.Errorf("%w: %s has no implementation", ErrRegistry, name))
		case t.Name() != name:
			errs = append(errs, fmt.Errorf("%w: the tool registered as %s calls itself %q", ErrRegistry, name, t.Name()))
		}
	}
	return errors.Join(errs...)
}
