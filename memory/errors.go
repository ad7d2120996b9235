package memory

import "errors"

// Error classes callers test with errors.Is. Messages never carry host paths
// (an ErrUnavailable may carry errno or SQLite text for the operator's log);
// the broker maps each class to its JSON-RPC error once, at its boundary, and
// shows a skill the class, not the message.
var (
	// ErrUnavailable: the store cannot be opened, or cannot be used for now
	// (PostgreSQL away, locked for too long): a later call may succeed.
	ErrUnavailable = errors.New("memory store unavailable")

	// ErrFault: the store refused or failed the call in a way a retry will
	// not change (a corrupt database, a constraint, a full disk, a bug);
	// the operator has to look.
	ErrFault = errors.New("memory store fault")

	// ErrTimeout: the call took longer than Limits.StatementTimeout in the
	// store, or waited that long for one of its tenant's slots.
	ErrTimeout = errors.New("memory statement timeout")

	// ErrRateLimited: the tenant's Emits are over Limits.WritesPerSecond and
	// WriteBurst on this host.
	ErrRateLimited = errors.New("tenant memory write rate exceeded")

	// ErrScope: the canonical path is outside every allowed_memory_scopes glob,
	// or the caller has no usable scope at all.
	ErrScope = errors.New("memory path outside allowed scopes")

	// ErrNotFound: no document at that path for this tenant. Another tenant's
	// document at the same path is also "not found".
	ErrNotFound = errors.New("memory document not found")

	// ErrInvalid: a malformed request (a path that does not canonicalise, an
	// empty tenant, a query with no words, text that is not UTF-8...).
	ErrInvalid = errors.New("invalid memory request")

	// ErrTooLarge: a body over MaxBodyBytes; the message names the limit.
	ErrTooLarge = errors.New("memory document too large")
)
