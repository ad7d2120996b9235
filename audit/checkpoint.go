// Signed checkpoints: an Ed25519 key attests the chain head, in a row of the
// chain (audit.checkpoint), in the anchor file and, when a sink is set, in a
// record outside the state dir.

package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// LoadSigningKey reads the PKCS #8 PEM Ed25519 key at path. With create set
// and no file there, it makes a new key (0600, its directory 0700 if new)
// and writes its public half beside it as path+".pub", which `audit verify
// --pubkey` takes.
func LoadSigningKey(path string, create bool) (*Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		return createSigningKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("audit signing key %s: not a PEM PRIVATE KEY", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("audit signing key %s: %w", path, err)
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("audit signing key %s: a %T, want Ed25519", path, k)
	}
	return NewSigner(ek), nil
}

func createSigningKey(path string) (*Signer, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	// O_EXCL: two processes creating the key at once cannot both win; the
	// loser reads the winner's key.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadSigningKey(path, false)
	}
	if err != nil {
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	err = pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	s := NewSigner(key)
	if err := os.WriteFile(path+".pub", []byte(s.PublicKey()+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("audit signing key: %w", err)
	}
	return s, nil
}

// ReadPublicKey reads a public key as `audit verify --pubkey` takes it: the
// hex line LoadSigningKey writes to KEY.pub, or the signing key itself.
func ReadPublicKey(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	if blk, _ := pem.Decode(b); blk != nil {
		s, err := LoadSigningKey(path, false)
		if err != nil {
			return "", err
		}
		return s.PublicKey(), nil
	}
	k := strings.TrimSpace(string(b))
	if raw, err := hex.DecodeString(k); err != nil || len(raw) != ed25519.PublicKeySize {
		return "", fmt.Errorf("%s: not a hex Ed25519 public key", path)
	}
	return strings.ToLower(k), nil
}

// Sink records a signed head somewhere the state dir's owner cannot rewrite
// (syslog, journald, a fleet store). It must not block for long: the
// applier calls it.
type Sink func(Checkpoint)
