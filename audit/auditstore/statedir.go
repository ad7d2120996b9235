package auditstore

import (
	"context"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// What the state dir's files are and how they are read and checked
// without a Store (package statedir, below the Store: the Store's scrub
// verifies through it), as the store's API.

// The state dir's files.
const (
	FileName    = statedir.FileName
	JournalName = statedir.JournalName
	AnchorName  = statedir.AnchorName
)

// The store's error classes (see statedir's).
var (
	ErrUnavailable = statedir.ErrUnavailable
	ErrClosed      = statedir.ErrClosed
	ErrNeedsRepair = statedir.ErrNeedsRepair
)

type (
	// Filter selects rows for Rows and Each.
	Filter = statedir.Filter
	// Reader reads a state dir's store without writing to it.
	Reader = statedir.Reader
	// Report is what a verification found.
	Report = statedir.Report
	// Problem names a row that fails verification and why.
	Problem = statedir.Problem
	// Verifier is Verify one row at a time.
	Verifier = statedir.Verifier
	// VerifyOptions are what an operator brings to VerifyDirWith.
	VerifyOptions = statedir.VerifyOptions
	// Anchor is a chain head recorded outside the journal.
	Anchor = statedir.Anchor
)

// OpenReader opens stateDir's store for reading (see statedir.OpenReader).
func OpenReader(stateDir string) (*Reader, error) { return statedir.OpenReader(stateDir) }

// VerifyDir checks the store in stateDir without writing to it (see
// statedir.VerifyDir).
func VerifyDir(ctx context.Context, stateDir string) (Report, error) {
	return statedir.VerifyDir(ctx, stateDir)
}

// VerifyDirWith is VerifyDir with what opts brings.
func VerifyDirWith(ctx context.Context, stateDir string, opts VerifyOptions) (Report, error) {
	return statedir.VerifyDirWith(ctx, stateDir, opts)
}

// Verify checks a complete chain, in order (see statedir.Verify).
func Verify(rows []audit.Row) Report { return statedir.Verify(rows) }

// NewVerifier returns a Verifier expecting the row with seq 1 first.
func NewVerifier() *Verifier { return statedir.NewVerifier() }

// RowDiff names the first field in which two copies of a row differ.
func RowDiff(a, b audit.Row) string { return statedir.RowDiff(a, b) }

// RepairCommand is the command that checks and repairs the store in dir.
func RepairCommand(dir string) string { return statedir.RepairCommand(dir) }

// FreeSpace is the space left on path's filesystem (see
// statedir.FreeSpace).
func FreeSpace(path string) (free, size int64, ok bool) { return statedir.FreeSpace(path) }

// LoadSigningKey reads (with create, makes) the Ed25519 signing key at
// path (see statedir.LoadSigningKey).
func LoadSigningKey(path string, create bool) (*audit.Signer, error) {
	return statedir.LoadSigningKey(path, create)
}

// ReadPublicKey reads a public key as `audit verify --pubkey` takes it.
func ReadPublicKey(path string) (string, error) { return statedir.ReadPublicKey(path) }
