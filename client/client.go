package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/supervisor"
)

// SocketEnv names the admin socket when none is given, as DOCKER_HOST does
// for docker.
const SocketEnv = "CYBEROS_SOCKET"

// DefaultSocketPath is the daemon's default admin_socket.
const DefaultSocketPath = "/run/cyberos/supervisor.sock"

// DefaultSocket is $CYBEROS_SOCKET, else DefaultSocketPath.
func DefaultSocket() string {
	if s := os.Getenv(SocketEnv); s != "" {
		return s
	}
	return DefaultSocketPath
}

// maxAnswer bounds what is read of one answer that is not a stream.
const maxAnswer = 64 << 20

// maxLine bounds one line of a stream (Tail, Events).
const maxLine = 1 << 20

// Client speaks to the daemon listening on one admin socket. Its zero
// value is not usable; New makes one. It is safe for concurrent use.
type Client struct {
	socket string
	// HTTP is the client the requests go through; its transport dials
	// the socket. Set its Timeout to bound every call.
	HTTP *http.Client
}

// New returns a client of the daemon listening on socket.
func New(socket string) *Client {
	return &Client{socket: socket, HTTP: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

// Socket is the admin socket c dials.
func (c *Client) Socket() string { return c.socket }

// Error is the daemon's refusal: a non-2xx answer.
type Error struct {
	Status  int    // the HTTP status
	Code    string // the API's code: not_found, bad_request, too_many_invocations…
	Message string // the API's error text
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%s, HTTP %d)", e.Message, e.Code, e.Status) }

// startHint is how an operator starts the daemon a client could not reach.
const startHint = "start it with `systemctl start cyberos` or `cyberos serve --config FILE`, or name another socket with --socket or $" + SocketEnv

// DialError is an admin socket that could not be reached.
type DialError struct {
	Socket string
	Err    error
}

// Error says why: no socket (no daemon ever started there, or the path is
// wrong), a socket nobody listens on (the daemon stopped or crashed), or
// no permission; each with how to go on.
func (e *DialError) Error() string {
	switch {
	case errors.Is(e.Err, syscall.ENOENT):
		return fmt.Sprintf("no daemon: the admin socket %s does not exist; %s", e.Socket, startHint)
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		return fmt.Sprintf("no daemon: the admin socket %s refuses connections (the daemon stopped or crashed?); %s", e.Socket, startHint)
	case errors.Is(e.Err, syscall.EACCES):
		return fmt.Sprintf("the admin socket %s: permission denied: run as root or as a member of the config's admin_group", e.Socket)
	}
	return fmt.Sprintf("admin socket %s: %v", e.Socket, e.Err)
}

func (e *DialError) Unwrap() error { return e.Err }

// send makes one request and returns the 2xx answer, whose body the
// caller closes; any other answer is an *Error, a failed exchange a
// *DialError.
func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://cyberos"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, &DialError{Socket: c.socket, Err: err}
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, readError(resp)
}

// readError turns a non-2xx answer into an *Error: the API's body, or the
// body's text when it is not one.
func readError(resp *http.Response) *Error {
	var ae struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(b, &ae) != nil || ae.Error == "" {
		ae.Error = strings.TrimSpace(string(b))
	}
	return &Error{Status: resp.StatusCode, Code: ae.Code, Message: ae.Error}
}

// raw makes one request and returns the answer's body.
func (c *Client) raw(ctx context.Context, method, path string, body any) ([]byte, error) {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, &DialError{Socket: c.socket, Err: err}
	}
	return b, nil
}

// call makes one request and decodes the answer into out.
func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	b, err := c.raw(ctx, method, path, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("daemon answer to %s %s: %w", method, path, err)
	}
	return nil
}

// invocationPath is /v1/invocations/ID plus rest.
func invocationPath(id, rest string) string { return "/v1/invocations/" + url.PathEscape(id) + rest }

// Invoke runs one invocation and returns its envelope (POST
// /v1/invocations). An invocation that ran answers with an envelope
// whatever its outcome; a refusal before it ran is an *Error.
func (c *Client) Invoke(ctx context.Context, req InvokeRequest) (*supervisor.Envelope, error) {
	var env supervisor.Envelope
	if err := c.call(ctx, http.MethodPost, "/v1/invocations", req, &env); err != nil {
		return nil, err
	}
	return &env, nil
}

// Cancel ends a running invocation through the deadline path (POST
// /v1/invocations/ID/cancel); its outcome is cancelled.
func (c *Client) Cancel(ctx context.Context, id string) error {
	resp, err := c.send(ctx, http.MethodPost, invocationPath(id, "/cancel"), nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// Status is the running invocations and today's counts (GET /v1/status).
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	if err := c.call(ctx, http.MethodGet, "/v1/status", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// MCPServers is the daemon's MCP server instances (GET /v1/mcp/servers).
func (c *Client) MCPServers(ctx context.Context) ([]MCPServer, error) {
	var out []MCPServer
	if err := c.call(ctx, http.MethodGet, "/v1/mcp/servers", nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Recent is the last limit ended invocations, newest first (GET
// /v1/invocations?limit=N; the daemon takes 1 to 1000).
func (c *Client) Recent(ctx context.Context, limit int) ([]Recent, error) {
	var out []Recent
	if err := c.call(ctx, http.MethodGet, "/v1/invocations?limit="+strconv.Itoa(limit), nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Inspect is an invocation's record from the audit (GET
// /v1/invocations/ID): skill, version, tenant, containment, outcome,
// error, tool calls.
func (c *Client) Inspect(ctx context.Context, id string) (map[string]any, error) {
	var rec map[string]any
	if err := c.call(ctx, http.MethodGet, invocationPath(id, ""), nil, &rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// Logs is an invocation's stderr (GET /v1/invocations/ID/logs); with
// follow, the answer comes once a running invocation has ended. The
// caller closes it.
func (c *Client) Logs(ctx context.Context, id string, follow bool) (io.ReadCloser, error) {
	path := invocationPath(id, "/logs")
	if follow {
		path += "?follow=1"
	}
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// Replay is an invocation's recorded tool calls, from its audit rows (GET
// /v1/invocations/ID/replay).
func (c *Client) Replay(ctx context.Context, id string) ([]ToolCall, error) {
	var calls []ToolCall
	if err := c.call(ctx, http.MethodGet, invocationPath(id, "/replay"), nil, &calls); err != nil {
		return nil, err
	}
	return calls, nil
}

// Skills is the installed skills, and the folders that are not usable
// (GET /v1/skills).
func (c *Client) Skills(ctx context.Context) (*SkillList, error) {
	var list SkillList
	if err := c.call(ctx, http.MethodGet, "/v1/skills", nil, &list); err != nil {
		return nil, err
	}
	return &list, nil
}

// SkillFiles lists the regular files of a skill's folder (GET
// /v1/skills/ID/files).
func (c *Client) SkillFiles(ctx context.Context, id string) ([]SkillFile, error) {
	var files []SkillFile
	if err := c.call(ctx, http.MethodGet, "/v1/skills/"+url.PathEscape(id)+"/files", nil, &files); err != nil {
		return nil, err
	}
	return files, nil
}

// SkillFile reads one file of a skill's folder, size-capped by the daemon
// (GET /v1/skills/ID/files/PATH).
func (c *Client) SkillFile(ctx context.Context, id, path string) ([]byte, error) {
	return c.raw(ctx, http.MethodGet, "/v1/skills/"+url.PathEscape(id)+"/files/"+(&url.URL{Path: path}).EscapedPath(), nil)
}

// Tail follows one invocation's tool calls (GET
// /v1/invocations/ID/tail): the calls so far, then live ones until it
// ends. Lines are ToolCalls, or a warning or error object.
func (c *Client) Tail(ctx context.Context, id string) (*Stream, error) {
	return c.stream(ctx, invocationPath(id, "/tail"))
}

// Events follows every invocation's start, tool calls and end from now on
// (GET /v1/events), or one skill's when skill is not "". Lines are Events,
// the first of type watching, or an error object.
func (c *Client) Events(ctx context.Context, skill string) (*Stream, error) {
	path := "/v1/events"
	if skill != "" {
		path += "?skill=" + url.QueryEscape(skill)
	}
	return c.stream(ctx, path)
}

func (c *Client) stream(ctx context.Context, path string) (*Stream, error) {
	resp, err := c.send(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	return &Stream{body: resp.Body, sc: sc}, nil
}

// Stream is an answer of JSON lines, read one line at a time.
type Stream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
}

// Next reads the next line; false at the end of the stream or on an error
// (see Err).
func (s *Stream) Next() bool { return s.sc.Scan() }

// Line is the line Next read, valid until the next call to Next.
func (s *Stream) Line() []byte { return s.sc.Bytes() }

// Decode decodes the line Next read into v.
func (s *Stream) Decode(v any) error { return json.Unmarshal(s.sc.Bytes(), v) }

// Err is what ended the stream, nil at its end.
func (s *Stream) Err() error { return s.sc.Err() }

// Close ends the stream.
func (s *Stream) Close() error { return s.body.Close() }

// MCPTransport is an MCP client transport to the daemon's MCP server
// (/mcp, Streamable HTTP) over the admin socket: the installed skills as
// tools, prompts and resources.
func (c *Client) MCPTransport() *mcp.StreamableClientTransport {
	return &mcp.StreamableClientTransport{Endpoint: "http://cyberos/mcp", HTTPClient: c.HTTP, MaxRetries: -1}
}
