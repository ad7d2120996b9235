// Package statedir is an audit state dir's files as read and checked
// without a Store: their names, the journal's end and locks, the index's
// rows read-only, the anchor, the signing key files; Reader, and the
// verifiers (Verifier for a chain's rows, VerifyDir for a state dir). The Store (package auditstore)
// is built on it and re-exports what its callers use; its scrub verifies
// through VerifyDir. This file holds the names, the journal's end and the
// index's rows.
package statedir

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"

	"cyberos.dev/audit"
)

// JournalName is the store's append-only journal inside the state dir: the
// rows as JSON lines (the `audit export` format), written and fsynced before
// any Emit returns. It is the durable record; audit.db is the index built
// from it (see Store).
const JournalName = "audit.jsonl"

// FileName is the store's file inside the state dir.
const FileName = "audit.db"

const RowColumns = `seq, row_id, kind, ts, prev_hash, row_hash, payload`

const HeadQuery = `SELECT seq, row_hash FROM audit_rows ORDER BY seq DESC LIMIT 1`

// FindEnd returns the journal's end (its first NUL byte, or its size) and
// its size, searching from hint, an end seen earlier under a lock: ends
// only move forward past whole lines, so hint is a lower bound when it still
// follows a newline.
func FindEnd(f *os.File, hint int64, buf []byte) (end, size int64, err error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	size = fi.Size()
	end, err = FindEndIn(f, hint, size, buf)
	return end, size, err
}

// FindEndIn is FindEnd for a known size.
func FindEndIn(f *os.File, hint, size int64, buf []byte) (end int64, err error) {
	if hint > size || hint < 0 {
		hint = 0
	}
	start := int64(0)
	if hint > 0 {
		// The byte before hint and what follows it, in one read: usually
		// the end is right at hint.
		n, err := f.ReadAt(buf[:min(513, size-hint+1)], hint-1)
		if n > 0 && buf[0] == '\n' {
			if i := bytes.IndexByte(buf[1:n], 0); i >= 0 {
				return hint + int64(i), nil
			}
			if err != nil && err != io.EOF {
				return 0, err
			}
			start = hint - 1 + int64(n)
		}
	}
	for off, want := start, int64(512); off < size; want = int64(len(buf)) {
		n, err := f.ReadAt(buf[:min(want, size-off)], off)
		if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
			return off + int64(i), nil
		}
		off += int64(n)
		if err != nil {
			if err == io.EOF {
				break
			}
			return 0, err
		}
	}
	return size, nil
}

// Filter selects rows for Rows and Each. Zero fields select everything.
type Filter struct {
	InvocationID string
	Kind         audit.Kind
	AfterSeq     int64 // rows with seq > AfterSeq
	Limit        int   // at most this many rows; 0 = no limit
}

// RowDiff names the first field in which two copies of a row differ ("" when
// they are the same row): the journal and the index, or a host and its
// fleet's PostgreSQL.
func RowDiff(a, b audit.Row) string {
	switch {
	case a.Seq != b.Seq:
		return fmt.Sprintf("seq %d vs %d", a.Seq, b.Seq)
	case a.RowID != b.RowID:
		return "row_id"
	case a.Kind != b.Kind:
		return "kind"
	case a.TS != b.TS:
		return "ts"
	case a.PrevHash != b.PrevHash:
		return "prev_hash"
	case a.RowHash != b.RowHash:
		return "row_hash"
	case !bytes.Equal(a.Payload, b.Payload):
		return "payload"
	}
	return ""
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func EachRow(ctx context.Context, qr querier, q string, args []any, fn func(audit.Row) error) error {
	rs, err := qr.QueryContext(ctx, q, args...)
	if err != nil {
		return readErr(ctx, err)
	}
	defer rs.Close()
	for rs.Next() {
		var r audit.Row
		var kind string
		var payload []byte
		if err := rs.Scan(&r.Seq, &r.RowID, &kind, &r.TS, &r.PrevHash, &r.RowHash, &payload); err != nil {
			return readErr(ctx, err)
		}
		r.Kind, r.Payload = audit.Kind(kind), payload
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := rs.Err(); err != nil {
		return readErr(ctx, err)
	}
	return nil
}

// readErr wraps a read failure in ErrUnavailable unless it is the caller's
// own context ending.
func readErr(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return fmt.Errorf("%w: read: %w", ErrUnavailable, err)
}

// LineAfterSeq returns the offset in the journal f (whole lines below end)
// of the first line after the last line whose seq is at most seq, reading
// backwards from end: a cost proportional to the lines after it. Lines that
// do not decode are passed over (the forward check reports them). 0 when no
// line is at or below seq.
func LineAfterSeq(f *os.File, end, seq int64) (int64, error) {
	if seq <= 0 {
		return 0, nil
	}
	const block = 256 << 10
	var carry []byte // the start of the line that continues past the block read last
	pos := end
	for pos > 0 {
		n := min(int64(block), pos)
		pos -= n
		buf := make([]byte, n, int(n)+len(carry))
		if _, err := f.ReadAt(buf, pos); err != nil {
			return 0, err
		}
		buf = append(buf, carry...)
		// Lines ending in buf, last first; the first, unless pos is 0, may
		// start before buf.
		stop := len(buf)
		for {
			i := bytes.LastIndexByte(buf[:max(stop-1, 0)], '\n')
			if i < 0 {
				break
			}
			if r, err := audit.DecodeRow(bytes.TrimSuffix(buf[i+1:stop], []byte("\n"))); err == nil && r.Seq <= seq {
				return pos + int64(stop), nil
			}
			stop = i + 1
		}
		if pos == 0 {
			if r, err := audit.DecodeRow(bytes.TrimSuffix(buf[:stop], []byte("\n"))); err == nil && r.Seq <= seq {
				return int64(stop), nil
			}
			return 0, nil
		}
		carry = append([]byte(nil), buf[:stop]...)
		if len(carry) > audit.MaxLineBytes+1 {
			return 0, fmt.Errorf("%s: a line before byte %d is longer than %d bytes", JournalName, pos+int64(len(carry)), audit.MaxLineBytes)
		}
	}
	return 0, nil
}
