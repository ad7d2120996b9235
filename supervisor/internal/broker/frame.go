package broker

import (
	"errors"
	"fmt"
	"io"
	"net"

	"cyberos.dev/wire"
)

// Frame caps (DESIGN.md "Frames"), as package wire declares them.
const (
	// MaxRequest is the largest request body the broker reads. A longer
	// frame is discarded unread and answered with request_too_large.
	MaxRequest = wire.MaxRequest
	// MaxResponse is the largest response body the broker writes. A longer
	// response is replaced by a response_too_large error.
	MaxResponse = wire.MaxResponse
)

// ErrTooLarge is the class of a frame over its cap; test with errors.Is.
var ErrTooLarge = errors.New("frame too large")

// FrameTooLargeError is what ReadFrame returns for a length prefix over the
// cap. When Err is nil the body was read and discarded, the stream is still
// in step and the connection can go on; otherwise discarding failed (the
// peer stopped sending, the deadline passed) and the stream is lost.
type FrameTooLargeError struct {
	Length uint32 // the length prefix
	Max    int    // the cap it exceeded
	Err    error  // why the body could not be discarded, or nil
}

func (e *FrameTooLargeError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("frame of %d bytes over the %d-byte cap, not discarded: %v", e.Length, e.Max, e.Err)
	}
	return fmt.Sprintf("frame of %d bytes over the %d-byte cap, discarded", e.Length, e.Max)
}

// Is makes errors.Is(err, ErrTooLarge) hold.
func (e *FrameTooLargeError) Is(target error) bool { return target == ErrTooLarge }

// Unwrap returns the discard failure, if any.
func (e *FrameTooLargeError) Unwrap() error { return e.Err }

// readChunk bounds what one read step allocates: a length prefix is a
// promise, not bytes, so the body buffer grows only as bytes arrive.
const readChunk = 64 << 10

// ReadFrame reads one frame: a 4-byte big-endian length, then that many
// bytes of body. A length over max is never allocated: the body is copied
// to io.Discard and a *FrameTooLargeError is returned (errors.Is ErrTooLarge).
// Deadlines are the caller's (the broker arms one per frame). A stream that
// ends cleanly before a frame starts returns io.EOF; one that ends inside a
// frame returns io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, max int) ([]byte, error) {
	var hdr [wire.HeaderLen]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	n := wire.BodyLen(hdr[:])
	if uint64(n) > uint64(max) {
		tl := &FrameTooLargeError{Length: n, Max: max}
		if _, err := io.CopyN(io.Discard, r, int64(n)); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			tl.Err = err
		}
		return nil, tl
	}
	body := make([]byte, 0, min(int(n), readChunk))
	for len(body) < int(n) {
		if len(body) == cap(body) {
			body = append(body, make([]byte, min(int(n)-len(body), cap(body)))...)[:len(body)]
		}
		m, err := r.Read(body[len(body):min(int(n), cap(body))])
		body = body[:len(body)+m]
		if err != nil && len(body) < int(n) {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	return body, nil
}

// WriteFrame writes body as one frame in a single write (a writev on a
// socket). A body over max is not written: the error wraps ErrTooLarge and
// the caller sends something smaller (the broker's response_too_large cut).
func WriteFrame(w io.Writer, body []byte, max int) error {
	return writeFrameParts(w, [][]byte{body}, max)
}

// writeFrameParts is WriteFrame of the concatenation of parts, written
// with one writev, without copying them into one buffer.
func writeFrameParts(w io.Writer, parts [][]byte, max int) error {
	n := uint64(0)
	for _, p := range parts {
		n += uint64(len(p))
	}
	if n > uint64(max) || n > 1<<32-1 {
		return &FrameTooLargeError{Length: uint32(min(n, 1<<32-1)), Max: max}
	}
	var hdr [wire.HeaderLen]byte
	wire.PutHeader(hdr[:], uint32(n))
	bufs := append(net.Buffers{hdr[:]}, parts...)
	_, err := bufs.WriteTo(w)
	return err
}
