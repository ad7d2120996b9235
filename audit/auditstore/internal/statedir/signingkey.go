package statedir

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"cyberos.dev/audit"
)

// LoadSigningKey reads the PKCS #8 PEM Ed25519 key at path. With create set
// and no file there, it makes a new key (0600, its directory 0700 if new)
// and writes its public half beside it as path+".pub", which `audit verify
// --pubkey` takes.
func LoadSigningKey(path string, create bool) (*audit.Signer, error) {
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
	return audit.NewSigner(ek), nil
}

func createSigningKey(path string) (*audit.Signer, error) {
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
	s := audit.NewSigner(key)
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
