package tools

import (
	"context"
	"fmt"

	"github.com/cyberos/supervisor/policy"
)

// readTool is Read {path} → {"body","content_hash"}.
type readTool struct{}

// NewRead returns the Read tool.
func NewRead() Tool { return readTool{} }

func (readTool) Name() policy.Tool { return policy.ToolRead }

func (readTool) Description() string {
	return fmt.Sprintf(`Read a UTF-8 text file on the host. Args {"path"} (absolute, within x-allowed-files); `+
		`result {"body","content_hash"} (hex SHA-256 of the bytes). Symlinks, hard links and non-regular files are refused; `+
		`files over %d MiB and binary (non-UTF-8) files are errors.`, MaxFileReadBytes>>20)
}

type readArgs struct {
	Path *string `json:"path"`
}

type readResult struct {
	Body        string `json:"body"`
	ContentHash string `json:"content_hash"`
}

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
	b, err := readHostFile(r.Name(), p, MaxFileReadBytes)
	if err != nil {
		return nil, err
	}
	if !isText(b) {
		return nil, skillError(ErrFailed, "binary file")
	}
	return readResult{Body: string(b), ContentHash: contentHash(b)}, nil
}
