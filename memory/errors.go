package memory

import "errors"

// Error classes callers test with errors.Is. Messages never carry host paths
// (an ErrUnavailable may carry errno or SQLite text for the operator's log);
// the broker maps each class to its JSON-RPC error once, at its boundary, and
// shows a skill the class, not the message.
var (
	// ErrUnavailable: the store cannot be opened or used (state dir unusable,
	// database corrupt, disk full, locked for too long).
	ErrUnavailable = errors.New("memory store unavailable")

	// ErrScope: the canonical path is outside every allowed_memory_scopes glob,
	// or the caller has no usable scope at all.
	ErrScope = errors.New("memory path outside allowed scopes")

	// ErrNotFound: no document at that path for this tenant. Another tenant's
	// document at the same path is also "not found".
	ErrNotFound = errors.New("memory document not found")

	// ErrInvalid: a malformed request (a path that does not canonicalise, an
	// empty tenant, a query with no words, text that is not UTF-8...).
	ErrInvalid = errors.New("invalid memory request")

	// ErrTooLarge: a body over MaxBodyBytes.
	ErrTooLarge = errors.New("memory document too large")
)
