package tools

import (
	"context"
	"fmt"

	"cyberos.dev/policy"
)

// writeTool is Write {path, content} → {"path","bytes","content_hash"}.
type writeTool struct{}

// NewWrite returns the Write tool.
func NewWrite() Tool { return writeTool{} }

func (writeTool) Name() policy.Tool { return policy.ToolWrite }

func (writeTool) Description() string {
	return fmt.Sprintf(`Create or replace a file on the host, atomically. Args {"path","content"} `+
		`(absolute path within x-allowed-files; content at most %d MiB; the directory must exist); `+
		`result {"path","bytes","content_hash"}. A replaced file keeps its owner and permissions; `+
		`symlinks, hard links and non-regular files are refused.`, MaxFileWriteBytes>>20)
}

type writeArgs struct {
	Path    *string `json:"path"`
	Content *string `json:"content"`
}

type writeResult struct {
	Path        string `json:"path"`
	Bytes       int    `json:"bytes"`
	ContentHash string `json:"content_hash"`
}

func (w writeTool) Call(ctx context.Context, c *Call) (any, error) {
	e, err := fileEnv(c)
	if err != nil {
		return nil, err
	}
	var a writeArgs
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	switch {
	case a.Path == nil:
		return nil, skillError(ErrInvalidParams, "path is required")
	case a.Content == nil:
		return nil, skillError(ErrInvalidParams, "content is required")
	case len(*a.Content) > MaxFileWriteBytes:
		return nil, fmt.Errorf("%w: content is larger than %d bytes", ErrTooLarge, MaxFileWriteBytes)
	}
	p, err := checkFile(e, w.Name(), *a.Path)
	if err != nil {
		return nil, err
	}
	data := []byte(*a.Content)
	if err := writeHostFile(w.Name(), p, data); err != nil {
		return nil, err
	}
	return writeResult{Path: p, Bytes: len(data), ContentHash: contentHash(data)}, nil
}
