// Package seccomp reads, checks and compiles the seccomp profiles a sandbox
// loads, and holds the operator tools that lint, explain, diff, import and
// record them.
package seccomp

import "errors"

// Errors callers test with errors.Is.
var (
	// ErrProfile: the seccomp profile is missing or invalid. Its text, like
	// ErrNotCompiled's, predates this package and stays as operators know it.
	ErrProfile = errors.New("sandbox: bad seccomp profile")
	// ErrNotCompiled: the binary was built without the seccomp tag.
	ErrNotCompiled = errors.New("sandbox: seccomp support is not compiled in (build with CGO_ENABLED=1 -tags seccomp)")
	// ErrUnsupported: the operator tools need libseccomp, which only Linux has.
	ErrUnsupported = errors.New("seccomp: profile tools need libseccomp (Linux)")
)
