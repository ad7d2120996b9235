package memory

import (
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"

	"github.com/bmatcuk/doublestar/v4"
	"modernc.org/sqlite"

	"cyberos.dev/policy"
)

// scopeFunc is the SQL function Search filters with, so the scope check runs
// in the WHERE clause, before ORDER BY and LIMIT:
//
//	cyberos_memory_in_scope(path, scopes) → 1 | 0
//
// scopes is the caller's canonical globs joined by "\n" (a canonical path or
// glob never contains a control character, so the separator is unambiguous).
const scopeFunc = "cyberos_memory_in_scope"

// indexFunc is the SQL function that gives the part of a body the search
// index holds (indexPrefix); NULL stays NULL:
//
//	cyberos_memory_index_text(body) → text | NULL
const indexFunc = "cyberos_memory_index_text"

var (
	registerOnce sync.Once
	registerErr  error
)

// registerFuncs registers scopeFunc and indexFunc with the sqlite driver. Registration is
// process-wide and must precede the first connection.
func registerFuncs() error {
	registerOnce.Do(func() {
		registerErr = sqlite.RegisterDeterministicScalarFunction(scopeFunc, 2,
			func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
				path, ok1 := args[0].(string)
				joined, ok2 := args[1].(string)
				if !ok1 || !ok2 {
					return int64(0), nil
				}
				if matchAny(path, strings.Split(joined, "\n")) {
					return int64(1), nil
				}
				return int64(0), nil
			})
		if registerErr != nil {
			return
		}
		registerErr = sqlite.RegisterDeterministicScalarFunction(indexFunc, 1,
			func(_ *sqlite.FunctionContext, args []driver.Value) (driver.Value, error) {
				switch v := args[0].(type) {
				case string:
					return indexPrefix(v), nil
				case []byte:
					return string(indexPrefix(v)), nil
				}
				return nil, nil
			})
	})
	return registerErr
}

// canonicalPath canonicalises a document path (policy.CanonicalMemoryPath)
// and bounds its length. Failures are ErrInvalid.
func canonicalPath(p string) (string, error) {
	c, err := policy.CanonicalMemoryPath(p)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(c) > MaxPathBytes {
		return "", fmt.Errorf("%w: path is longer than %d bytes", ErrInvalid, MaxPathBytes)
	}
	return c, nil
}

// compileScopes returns the canonical, valid globs among scopes. A scope that
// does not canonicalise or is not a valid pattern is dropped: a bad scope
// never widens access, it only grants nothing. Scopes from a parsed
// policy.Policy are already canonical; canonicalising again is cheap and
// keeps this package safe for callers that pass raw strings.
func compileScopes(scopes []string) []string {
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		c, err := policy.CanonicalMemoryPath(s)
		if err != nil || !doublestar.ValidatePattern(c) || strings.Contains(c, "\n") {
			continue
		}
		out = append(out, c)
	}
	return out
}

// matchAny reports whether the canonical path matches one of the canonical
// globs: "*" stays within one segment, "**" spans any number of segments.
func matchAny(path string, globs []string) bool {
	for _, g := range globs {
		if ok, err := doublestar.Match(g, path); err == nil && ok {
			return true
		}
	}
	return false
}

// checkScope canonicalises p and checks it against scopes; it returns the
// canonical path, ErrInvalid or ErrScope.
func checkScope(p string, scopes []string) (string, error) {
	c, err := canonicalPath(p)
	if err != nil {
		return "", err
	}
	if !matchAny(c, compileScopes(scopes)) {
		return "", fmt.Errorf("%w: %q", ErrScope, c)
	}
	return c, nil
}
