// Signed checkpoints: an Ed25519 key attests the chain head, in a row of the
// chain (audit.checkpoint), in the anchor file and, when a sink is set, in a
// record outside the state dir.

package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// KindCheckpoint is a signed checkpoint: the key whose public half it
// carries attests that the chain through head_seq ends in head_row_hash.
// Rewriting any row up to head_seq (and re-chaining every row after it)
// then needs the private key. It belongs to no invocation, so it carries
// none of Common's keys.
const KindCheckpoint Kind = "audit.checkpoint"

// checkpointContext prefixes every signed message, so a checkpoint signature
// can never be replayed as a signature over anything else.
const checkpointContext = "cyberos audit checkpoint v1\n"

// CheckpointMessage is what a checkpoint (row or anchor) signs: the context
// line, then seq and row_hash on lines of their own.
func CheckpointMessage(seq int64, rowHash string) []byte {
	return []byte(checkpointContext + strconv.FormatInt(seq, 10) + "\n" + rowHash + "\n")
}

// Signer signs checkpoints with an Ed25519 key.
type Signer struct {
	key ed25519.PrivateKey
}

// NewSigner returns a signer for key.
func NewSigner(key ed25519.PrivateKey) *Signer { return &Signer{key: key} }

// PublicKey is the hex of the key's public half, as checkpoints carry it.
func (s *Signer) PublicKey() string { return hex.EncodeToString(s.key.Public().(ed25519.PublicKey)) }

// Sign returns the hex signature of the checkpoint (seq, rowHash).
func (s *Signer) Sign(seq int64, rowHash string) string {
	return hex.EncodeToString(ed25519.Sign(s.key, CheckpointMessage(seq, rowHash)))
}

// Checkpoint is a signed chain head.
type Checkpoint struct {
	Seq       int64  `json:"head_seq"`
	RowHash   string `json:"head_row_hash"`
	PublicKey string `json:"public_key"`
	Signature string `json:"signature"`
}

// Check reports whether c's signature is the one its public key makes over
// its head, and, when want is not empty, that the key is want.
func (c Checkpoint) Check(want string) error {
	pub, err := hex.DecodeString(c.PublicKey)
	if err != nil || len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("public_key is not a hex Ed25519 public key")
	}
	if want != "" && !strings.EqualFold(want, c.PublicKey) {
		return fmt.Errorf("signed by key %.16s…, not the pinned key %.16s…", c.PublicKey, want)
	}
	sig, err := hex.DecodeString(c.Signature)
	if err != nil || len(sig) != ed25519.SignatureSize {
		return fmt.Errorf("signature is not a hex Ed25519 signature")
	}
	if !ed25519.Verify(pub, CheckpointMessage(c.Seq, c.RowHash), sig) {
		return fmt.Errorf("signature does not verify over seq %d, row_hash %.12s…", c.Seq, c.RowHash)
	}
	return nil
}

// CheckpointRow is the draft of a checkpoint row for the head (seq, rowHash).
func (s *Signer) CheckpointRow(seq int64, rowHash string) Draft {
	p := newBarePayload(KindCheckpoint)
	p.count("head_seq", seq)
	p.hash("head_row_hash", rowHash)
	p.hash("public_key", s.PublicKey())
	p.str("signature", s.Sign(seq, rowHash))
	return p.draft()
}

// KeyID is a short name for a hex public key: its SHA-256's first 16 hex
// digits.
func KeyID(publicKey string) string {
	sum := sha256.Sum256([]byte(strings.ToLower(publicKey)))
	return hex.EncodeToString(sum[:8])
}
