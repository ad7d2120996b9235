// Package audit is the row model of the hash-chained record of every skill
// invocation: the kinds, outcomes and rows (Row, and the Drafts pure
// builders make from typed values such as Common), carrying RFC 8785
// canonical-JSON SHA-256 hashes instead of raw args and results (HashJSON);
// a row's hash and the chain-link rules every verifier applies row by row
// (Row.ComputeHash, RowProblems); signed checkpoints (Signer, Checkpoint);
// and the JSON-lines form the journal holds, `audit export` writes and
// `audit verify --file` reads. It opens no file: package audit/auditstore
// keeps the rows.
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
