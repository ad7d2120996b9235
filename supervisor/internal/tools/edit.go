package tools

import (
	"bytes"
	"context"
	"fmt"

	"cyberos.dev/policy"
)

// editTool is Edit {path, old_string, new_string}: one exact, unique
// replacement → {"path","replacements","content_hash"}.
type editTool struct{}

// NewEdit returns the Edit tool.
func NewEdit() Tool { return editTool{} }

func (editTool) Name() policy.Tool { return policy.ToolEdit }

func (editTool) Description() string {
	return fmt.Sprintf(`Replace one exact occurrence of old_string with new_string in a UTF-8 text file on the host, atomically. `+
		`Args {"path","old_string","new_string"}; old_string must occur exactly once and differ from new_string; `+
		`strings at most %d MiB, files at most %d MiB. Result {"path","replacements":1,"content_hash"} (of the new content).`,
		MaxFileWriteBytes>>20, MaxFileReadBytes>>20)
}

type editArgs struct {
	Path      *string `json:"path"`
	OldString *string `json:"old_string"`
	NewString *string `json:"new_string"`
}

type editResult struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
	ContentHash  string `json:"content_hash"`
}

func (ed editTool) Call(ctx context.Context, c *Call) (any, error) {
	e, err := fileEnv(c)
	if err != nil {
		return nil, err
	}
	var a editArgs
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	switch {
	case a.Path == nil:
		return nil, skillError(ErrInvalidParams, "path is required")
	case a.OldString == nil:
		return nil, skillError(ErrInvalidParams, "old_string is required")
	case a.NewString == nil:
		return nil, skillError(ErrInvalidParams, "new_string is required")
	case *a.OldString == "":
		return nil, skillError(ErrInvalidParams, "old_string must not be empty")
	case *a.OldString == *a.NewString:
		return nil, skillError(ErrInvalidParams, "new_string must differ from old_string")
	case len(*a.OldString) > MaxFileWriteBytes || len(*a.NewString) > MaxFileWriteBytes:
		return nil, fmt.Errorf("%w: old_string and new_string are limited to %d bytes each", ErrTooLarge, MaxFileWriteBytes)
	}
	p, err := checkFile(e, ed.Name(), *a.Path)
	if err != nil {
		return nil, err
	}
	oldS, newS := []byte(*a.OldString), []byte(*a.NewString)
	// The file and its edited copy are held at once: reserved before
	// reading, given back when the call returns (its result is small).
	var held int64
	defer func() { c.release(held) }()
	reserve := func(size int64) error {
		n := 2*size + int64(len(newS))
		if err := c.reserve(ctx, n); err != nil {
			return err
		}
		held = n
		return nil
	}
	data, err := editHostFile(ed.Name(), p, MaxFileReadBytes, reserve, func(b []byte) ([]byte, error) {
		if !isText(b) {
			return nil, skillError(ErrFailed, "binary file")
		}
		i, err := uniqueIndex(b, oldS)
		if err != nil {
			return nil, err
		}
		if int64(len(b)-len(oldS)+len(newS)) > MaxFileReadBytes {
			return nil, fmt.Errorf("%w: the edited file would be larger than %d bytes", ErrTooLarge, MaxFileReadBytes)
		}
		out := make([]byte, 0, len(b)-len(oldS)+len(newS))
		out = append(append(append(out, b[:i]...), newS...), b[i+len(oldS):]...)
		return out, nil
	})
	if err != nil {
		return nil, err
	}
	return editResult{Path: p, Replacements: 1, ContentHash: contentHash(data)}, nil
}

// uniqueIndex returns the index of the one occurrence of old in b. Overlapping
// occurrences count too ("aa" occurs twice in "aaa"): either could be meant.
func uniqueIndex(b, old []byte) (int, error) {
	switch n := bytes.Count(b, old); {
	case n == 0:
		return 0, skillError(ErrFailed, "old_string not found")
	case n > 1:
		return 0, fmt.Errorf("%w: old_string is not unique (%d matches)", ErrFailed, n)
	}
	i := bytes.Index(b, old)
	if bytes.Contains(b[i+1:], old) {
		return 0, skillError(ErrFailed, "old_string is not unique (overlapping matches)")
	}
	return i, nil
}
