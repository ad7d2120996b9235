package tools

import (
	"context"
	"fmt"

	"cyberos.dev/policy"
)

// readTool is Read {path} → {"body","content_hash"}.
type readTool struct{}

// NewRead returns the Read tool.
func NewRead() Tool { return readTool{} }

func (readTool) Name() policy.Tool { return policy.ToolRead }

func (readTool) Description() string {
	return fmt.Sprintf(`Read a UTF-8 text file on the host. Args {"path"} (absolute, within x-allowed-files); `+
		`result {"body","content_hash"} (hex SHA-256 of the bytes). Symlinks, hard links and non-regular files are refused; `+
		`files over %d MiB, files whose result would be over %d MiB as JSON (control characters cost six bytes each) `+
		`and binary (non-UTF-8) files are errors.`, MaxFileReadBytes>>20, MaxResultBytes>>20)
}

type readArgs struct {
	Path *string `json:"path"`
}

// readResultLen is the length of Read's result for a body of escaped
// length bodyLen: {"body":…,"content_hash":"<64 hex>"}.
func readResultLen(bodyLen int) int { return len(`{"body":,"content_hash":""}`) + bodyLen + 64 }

// Call reserves the file's size and its result's worst-case encoding
// before reading, then gives back what the exact encoding does not need:
// a Read never holds more than the budget let it.
func (r readTool) Call(ctx context.Context, c *Call) (any, error) {
	e, err := fileEnv(c)
	if err != nil {
		return nil, err
	}
	var a readArgs
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	if a.Path == nil {
		return nil, skillError(ErrInvalidParams, "path is required")
	}
	p, err := checkFile(e, r.Name(), *a.Path)
	if err != nil {
		return nil, err
	}
	var held int64
	defer func() { c.release(held) }() // on every error; a result keeps what it uses
	b, err := readHostFile(r.Name(), p, MaxFileReadBytes, func(size int64) error {
		n := size + min(int64(readResultLen(int(maxEscapedLen(size)))), MaxResultBytes)
		if err := c.reserve(ctx, n); err != nil {
			return err
		}
		held = n
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !isText(b) {
		return nil, skillError(ErrFailed, "binary file")
	}
	size := readResultLen(escapedLen(b))
	if size > MaxResultBytes {
		return nil, skillError(ErrTooLarge, fmt.Sprintf("the file's result would be over %d MiB as JSON", MaxResultBytes>>20))
	}
	w := newCanonWriter(size)
	w.raw(`{"body":`)
	str(w, b)
	w.raw(`,"content_hash":"`)
	w.raw(contentHash(b))
	w.raw(`"}`)
	out, ok := w.done()
	if !ok {
		return nil, fmt.Errorf("%w: Read's result is not the size computed for it", ErrFailed)
	}
	// Keep the result's bytes until the response is written; the file's
	// bytes and the unused worst case go back now.
	held -= int64(size)
	return out, nil
}
