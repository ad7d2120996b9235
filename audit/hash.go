// Package audit holds what the audit trail is made of. For now: the RFC 8785
// canonical-JSON SHA-256 hashes that rows carry instead of raw content.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/gowebpki/jcs"
)

// HashJSON returns the lowercase hex SHA-256 of the RFC 8785 canonical form
// of the JSON value in raw. Two JSON texts that differ only in key order,
// whitespace, number spelling or string escapes hash the same.
func HashJSON(raw []byte) (string, error) {
	canon, err := jcs.Transform(raw)
	if err != nil {
		return "", fmt.Errorf("canonical json: %w", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}
