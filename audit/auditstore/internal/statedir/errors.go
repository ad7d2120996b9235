package statedir

import (
	"errors"
	"fmt"
)

// Error classes of the package. Test with errors.Is; every error the store
// returns for a reason other than the caller's own context wraps one of them.
var (
	// ErrUnavailable: the store cannot take or keep rows (state dir missing,
	// unwritable, full, corrupt; commit failed). A caller about to dispatch a
	// skill must refuse (DESIGN.md step 2: 503, exit 3).
	ErrUnavailable = errors.New("audit store unavailable")

	// ErrClosed: Emit after Close. It wraps ErrUnavailable, so callers that
	// only check ErrUnavailable refuse dispatch as they should.
	ErrClosed = fmt.Errorf("audit store closed: %w", ErrUnavailable)
)
