// Package audit is the durable, hash-chained record of every skill
// invocation: the rows (built by pure functions from typed values, carrying
// RFC 8785 canonical-JSON SHA-256 hashes instead of raw args and results),
// the Store (a journal each row is appended and fdatasynced to before Emit
// returns, concurrent emitters sharing one append, and a SQLite index every
// read uses), the chain and pairing check (Verify), and the JSON-lines form
// `audit export` writes and `audit verify --file` reads.
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
