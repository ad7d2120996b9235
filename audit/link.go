// The chain-link rules: what one row must be on its own and to the row
// before it, the checks every verifier (of an export, a state dir, a
// witness copy) applies row by row.

package audit

import (
	"bytes"
	"fmt"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/oklog/ulid/v2"
)

// RowProblems checks one row on its own and its link to prev (nil: r must
// be the first row of the chain). payloadOK reports whether the payload is a
// valid canonical payload of r's kind.
func RowProblems(prev *Row, r Row) (_ []string, payloadOK bool) {
	var out []string
	switch {
	case prev == nil && r.Seq != 1:
		out = append(out, fmt.Sprintf("chain starts at seq %d, not 1 (a filtered or truncated export cannot be verified)", r.Seq))
	case prev == nil && r.PrevHash != GenesisHash:
		out = append(out, "prev_hash of seq 1 is not the genesis hash")
	case prev != nil && r.Seq != prev.Seq+1:
		out = append(out, fmt.Sprintf("seq %d follows seq %d: rows missing, duplicated or out of order", r.Seq, prev.Seq))
	}
	if prev != nil && r.PrevHash != prev.RowHash {
		out = append(out, fmt.Sprintf("prev_hash does not match row_hash of seq %d", prev.Seq))
	}
	if !IsHash(r.RowHash) {
		out = append(out, "row_hash is not 64 lowercase hex characters")
	}
	if !IsHash(r.PrevHash) {
		out = append(out, "prev_hash is not 64 lowercase hex characters")
	}
	if _, err := ulid.ParseStrict(r.RowID); err != nil {
		out = append(out, fmt.Sprintf("row_id %q is not a ULID", r.RowID))
	}
	if _, err := time.Parse(TimeFormat, r.TS); err != nil {
		out = append(out, fmt.Sprintf("ts %q is not %s", r.TS, TimeFormat))
	}
	payloadReason := payloadProblem(r)
	// With a canonical payload the writer's shortcut computes the same hash
	// as ComputeHash, at a fraction of the cost over a long chain.
	h, ok := "", false
	if payloadReason == "" {
		h, ok = r.writerHash()
	}
	var err error
	if !ok {
		h, err = r.ComputeHash()
	}
	if err != nil {
		out = append(out, fmt.Sprintf("row_hash cannot be computed: %v", err))
	} else if h != r.RowHash {
		out = append(out, "row_hash does not recompute: the row was altered")
	}
	if payloadReason != "" {
		return append(out, payloadReason), false
	}
	return out, true
}

// payloadProblem checks that the payload is its kind's payload, byte for
// byte in canonical form (a non-canonical spelling of the same JSON would
// hash the same, so it is checked separately).
func payloadProblem(r Row) string {
	canon, err := jcs.Transform(r.Payload)
	if err != nil {
		return fmt.Sprintf("payload is not valid JSON: %v", err)
	}
	if !bytes.Equal(canon, r.Payload) {
		return "payload is not in RFC 8785 canonical form: the row was altered"
	}
	if err := validatePayload(r.Kind, canon); err != nil {
		return err.Error()
	}
	return ""
}

// RowSound is the quick test of one row: it follows prev (seq and
// prev_hash; GenesisHash at seq 1) and its row_hash is the hash of its bytes
// as the writer made them (writerHash). The writer hashed a canonical
// payload of the row's kind, so a match stands for RowProblems' payload
// checks too, at a fraction of their cost; a row that fails is passed to
// RowProblems for its reasons.
func RowSound(prev *Row, r Row) bool {
	switch {
	case prev == nil && (r.Seq != 1 || r.PrevHash != GenesisHash):
		return false
	case prev != nil && (r.Seq != prev.Seq+1 || r.PrevHash != prev.RowHash):
		return false
	}
	h, ok := r.writerHash()
	return ok && h == r.RowHash && IsHash(r.RowHash)
}
