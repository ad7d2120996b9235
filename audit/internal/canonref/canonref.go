// Package canonref holds the reference encoder the audit row builders are
// measured and tested against: encoding/json, then RFC 8785's jcs.Transform.
// It is a seam for the audit packages' tests and benchmarks only (Go's
// internal rule keeps it there).
package canonref

import (
	"encoding/json"

	"github.com/gowebpki/jcs"
)

// Builders, when set (benchmarks and tests only), makes the audit row
// builders encode their members through it instead of their own encoder:
// the reference that encoder must beat end to end.
var Builders func(members map[string]any) ([]byte, error)

// JCS is the library's way to a payload's canonical bytes: encoding/json,
// then jcs.Transform.
func JCS(members map[string]any) ([]byte, error) {
	raw, err := json.Marshal(members)
	if err != nil {
		return nil, err
	}
	return jcs.Transform(raw)
}
