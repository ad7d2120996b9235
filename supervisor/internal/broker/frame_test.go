package broker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func frame(body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return append(b, body...)
}

func TestReadFrame(t *testing.T) {
	// Two frames back to back, the first over the cap: it is discarded
	// exactly, and the second reads cleanly after it.
	stream := append(frame(bytes.Repeat([]byte("a"), 100)), frame([]byte(`{"ok":1}`))...)
	r := bytes.NewReader(stream)
	_, err := ReadFrame(r, 10)
	var tl *FrameTooLargeError
	if !errors.Is(err, ErrTooLarge) || !errors.As(err, &tl) || tl.Err != nil || tl.Length != 100 {
		t.Fatalf("oversized frame: %v", err)
	}
	body, err := ReadFrame(r, 10)
	if err != nil || string(body) != `{"ok":1}` {
		t.Fatalf("next frame: %q %v", body, err)
	}
	if _, err := ReadFrame(r, 10); !errors.Is(err, io.EOF) {
		t.Fatalf("clean end: %v, want io.EOF", err)
	}

	// Zero length is an empty body.
	if b, err := ReadFrame(bytes.NewReader(frame(nil)), 10); err != nil || len(b) != 0 {
		t.Fatalf("empty frame: %q %v", b, err)
	}
	// Cut inside the header or the body: ErrUnexpectedEOF.
	for _, s := range [][]byte{{0, 0}, frame([]byte("abcdef"))[:7]} {
		if _, err := ReadFrame(bytes.NewReader(s), 10); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("%q: %v, want ErrUnexpectedEOF", s, err)
		}
	}
	// 0xFFFFFFFF with no body: too large, and the discard failure is
	// reported (the stream is lost).
	_, err = ReadFrame(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 'x'}), MaxRequest)
	if !errors.As(err, &tl) || tl.Err == nil || tl.Length != 0xffffffff {
		t.Fatalf("4 GiB prefix: %v", err)
	}
	// A slow reader delivering a byte at a time still assembles the body.
	big := bytes.Repeat([]byte("z"), 200<<10)
	if b, err := ReadFrame(iotest.OneByteReader(bytes.NewReader(frame(big))), MaxRequest); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("one byte at a time: %v", err)
	}
}

// A length prefix is a promise, not bytes: a huge prefix followed by a few
// bytes allocates about the bytes, not the prefix.
func TestReadFrameDoesNotTrustTheLength(t *testing.T) {
	stream := append(binary.BigEndian.AppendUint32(nil, MaxRequest), "tiny"...)
	r := &countingReader{r: bytes.NewReader(stream)}
	if _, err := ReadFrame(r, MaxRequest); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("%v", err)
	}
	if got := r.maxBuf; got > readChunk {
		t.Fatalf("read into a %d-byte buffer for 4 bytes of body", got)
	}
}

type countingReader struct {
	r      io.Reader
	maxBuf int
}

func (c *countingReader) Read(p []byte) (int, error) {
	c.maxBuf = max(c.maxBuf, len(p))
	return c.r.Read(p)
}

func TestWriteFrame(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, []byte(`{"a":1}`), 100); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), frame([]byte(`{"a":1}`))) {
		t.Fatalf("%q", buf.Bytes())
	}
	buf.Reset()
	if err := WriteFrame(&buf, []byte(strings.Repeat("x", 101)), 100); !errors.Is(err, ErrTooLarge) || buf.Len() != 0 {
		t.Fatalf("over the cap: %v, wrote %d bytes", err, buf.Len())
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(frame([]byte(`{"jsonrpc":"2.0"}`)), 64)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, 64)
	f.Add(append(frame(bytes.Repeat([]byte("a"), 70)), frame([]byte("b"))...), 64)
	f.Add([]byte{0, 0, 0}, 0)
	f.Add(frame(nil), 0)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		max = max & 0xffff
		r := bytes.NewReader(data)
		for {
			before := r.Len()
			body, err := ReadFrame(r, max)
			consumed := before - r.Len()
			var tl *FrameTooLargeError
			switch {
			case err == nil:
				n := int(binary.BigEndian.Uint32(data[len(data)-before:]))
				if len(body) != n || n > max || consumed != 4+n {
					t.Fatalf("body %d bytes, prefix %d, max %d, consumed %d", len(body), n, max, consumed)
				}
				if !bytes.Equal(body, data[len(data)-before+4:len(data)-before+4+n]) {
					t.Fatal("body differs from the stream")
				}
			case errors.As(err, &tl):
				if !errors.Is(err, ErrTooLarge) || int64(tl.Length) <= int64(max) {
					t.Fatalf("too large: %v (max %d)", err, max)
				}
				if tl.Err == nil && consumed != 4+int(tl.Length) {
					t.Fatalf("discarded %d bytes for a %d-byte frame", consumed-4, tl.Length)
				}
				if tl.Err != nil {
					return // stream lost, all of it consumed
				}
			case errors.Is(err, io.EOF):
				if consumed != 0 || before != 0 {
					t.Fatalf("EOF with %d bytes left", before)
				}
				return
			case errors.Is(err, io.ErrUnexpectedEOF):
				return
			default:
				t.Fatalf("unexpected error %v", err)
			}
		}
	})
}
