// Package seccomp reads and checks the seccomp profiles a sandbox loads
// (strict OCI JSON, cached by content hash) and compiles them: to the
// libcontainer config its init loads, and to the BPF Program cyberos-init
// loads before the skill runs. It also turns a profile into the filter a
// recording run uses. It installs nothing: cyberos-init and libcontainer's
// init do. The operator tools (lint, explain, diff, import, record) are
// package profiletool, which the sandbox does not link.
package seccomp

import "errors"

// Errors callers test with errors.Is.
var (
	// ErrProfile: the seccomp profile is missing or invalid. Its text, like
	// ErrNotCompiled's, predates this package and stays as operators know it.
	ErrProfile = errors.New("sandbox: bad seccomp profile")
	// ErrNotCompiled: the binary was built without the seccomp tag.
	ErrNotCompiled = errors.New("sandbox: seccomp support is not compiled in (build with CGO_ENABLED=1 -tags seccomp)")
)
