// Package skillclient is the client a Go skill uses to call tools through
// its broker socket (length-prefixed JSON-RPC 2.0). It is pure Go and links
// only the standard library and package wire, so skills and the static
// cyberos-tool stay small.
package skillclient

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"cyberos.dev/wire"
)

// EnvSocket names the environment variable holding the broker socket path.
const EnvSocket = wire.EnvSocket

// SandboxSocket is where the socket is mounted inside the sandbox; Dial
// uses it when EnvSocket is unset.
const SandboxSocket = wire.SandboxSocket

// Frame caps, as the broker applies them.
const (
	MaxRequest  = wire.MaxRequest
	MaxResponse = wire.MaxResponse
)

// JSON-RPC error codes the broker answers with.
const (
	CodeParseError     = wire.CodeParseError
	CodeInvalidRequest = wire.CodeInvalidRequest
	CodeMethodNotFound = wire.CodeMethodNotFound
	CodeInvalidParams  = wire.CodeInvalidParams
	CodeInternal       = wire.CodeInternal  // refusals: Data.Reason says which
	CodeToolError      = wire.CodeToolError // the tool ran and failed
)

// ErrRequestTooLarge: the request would exceed MaxRequest; nothing was sent.
var ErrRequestTooLarge = fmt.Errorf("skillclient: request over %d MiB", MaxRequest>>20)

type (
	// RPCError is a JSON-RPC error object from the broker.
	RPCError = wire.RPCError
	// ErrorData is the error's data: Reason is e.g. "tool_not_in_allowed_tools",
	// "scope_violation", "tool_error", "timeout".
	ErrorData = wire.ErrorData
)

// Client is one connection to the broker. Calls on one Client are
// serialised; open several Clients for parallel calls.
type Client struct {
	// Traceparent, when set, is sent with every call (W3C header value).
	// Empty: the broker uses the invocation's.
	Traceparent string

	mu     sync.Mutex
	conn   net.Conn
	rd     *bufio.Reader // conn's responses: a header and its body in one read
	nextID uint64
	broken error
}

// DefaultPath is $CYBEROS_BROKER_SOCKET, or SandboxSocket.
func DefaultPath() string {
	if p := os.Getenv(EnvSocket); p != "" {
		return p
	}
	return SandboxSocket
}

// Dial connects to the broker at path ("" means DefaultPath()).
func Dial(path string) (*Client, error) {
	if path == "" {
		path = DefaultPath()
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		return nil, fmt.Errorf("skillclient: %w", err)
	}
	return &Client{conn: c, rd: bufio.NewReader(c)}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Call calls tool with args (any JSON-encodable value; nil means {}) and
// decodes the result into result (nil discards it; a *json.RawMessage
// keeps it raw). A broker error is returned as *RPCError.
func (c *Client) Call(ctx context.Context, tool string, args any, result any) error {
	if args == nil {
		args = struct{}{}
	}
	params := struct {
		Tool        string `json:"tool"`
		Args        any    `json:"args"`
		Traceparent string `json:"traceparent,omitempty"`
	}{tool, args, c.Traceparent}
	return c.Invoke(ctx, "tool.call", params, result)
}

// ToolInfo is one tool the skill may call.
type ToolInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// List returns the tools this skill may call.
func (c *Client) List(ctx context.Context) ([]ToolInfo, error) {
	var r struct {
		Tools []ToolInfo `json:"tools"`
	}
	if err := c.Invoke(ctx, "tool.list", nil, &r); err != nil {
		return nil, err
	}
	return r.Tools, nil
}

// Status is the broker.status result.
type Status struct {
	InvocationID string `json:"invocation_id"`
	SkillID      string `json:"skill_id"`
	ToolCalls    int64  `json:"tool_calls"`
	Denied       int64  `json:"denied"`
	UptimeMS     int64  `json:"uptime_ms"`
}

// Status returns the invocation's broker counters.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	err := c.Invoke(ctx, "broker.status", nil, &s)
	return s, err
}

// Invoke sends one request (params nil: none) and decodes its result. A
// transport failure breaks the Client (the stream may be out of step);
// later calls return the same error.
func (c *Client) Invoke(ctx context.Context, method string, params, result any) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken != nil {
		return c.broken
	}
	c.nextID++
	id := c.nextID
	req := struct {
		JSONRPC string `json:"jsonrpc"`
		ID      uint64 `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", id, method, params}
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("skillclient: encode request: %w", err)
	}
	if len(body) > MaxRequest {
		return ErrRequestTooLarge
	}

	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetDeadline(dl)
	} else {
		_ = c.conn.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	raw, err := c.roundTrip(body)
	if err != nil {
		// The connection deadline can fire a moment before ctx notices.
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) && errors.Is(err, os.ErrDeadlineExceeded) {
			err = context.DeadlineExceeded
		} else if ctx.Err() != nil {
			err = ctx.Err()
		}
		c.broken = fmt.Errorf("skillclient: %s: %w", method, err)
		return c.broken
	}
	var resp struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
		Error   *RPCError       `json:"error"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		c.broken = fmt.Errorf("skillclient: %s: malformed response: %w", method, err)
		return c.broken
	}
	if resp.Error != nil {
		if string(resp.ID) != strconv.FormatUint(id, 10) && string(resp.ID) != "null" {
			c.broken = fmt.Errorf("skillclient: %s: response id %s, want %d", method, resp.ID, id)
			return c.broken
		}
		return resp.Error
	}
	if string(resp.ID) != strconv.FormatUint(id, 10) {
		c.broken = fmt.Errorf("skillclient: %s: response id %s, want %d", method, resp.ID, id)
		return c.broken
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Result, result); err != nil {
		return fmt.Errorf("skillclient: %s: decode result: %w", method, err)
	}
	return nil
}

func (c *Client) roundTrip(body []byte) ([]byte, error) {
	frame := make([]byte, wire.HeaderLen+len(body))
	wire.PutHeader(frame, uint32(len(body)))
	copy(frame[wire.HeaderLen:], body)
	if _, err := c.conn.Write(frame); err != nil {
		return nil, err
	}
	var hdr [wire.HeaderLen]byte
	if _, err := io.ReadFull(c.rd, hdr[:]); err != nil {
		return nil, err
	}
	n := wire.BodyLen(hdr[:])
	if n > MaxResponse {
		return nil, fmt.Errorf("response of %d bytes over the cap", n)
	}
	raw := make([]byte, n)
	if _, err := io.ReadFull(c.rd, raw); err != nil {
		return nil, err
	}
	return raw, nil
}
