package mcpserve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
)

// SocketBackend is the daemon reached over its admin socket (HTTP on a
// Unix socket), as `cyberos mcp serve` uses it.
type SocketBackend struct {
	socket string
	http   *http.Client
}

// NewSocketBackend returns the backend of the daemon listening on socket.
func NewSocketBackend(socket string) *SocketBackend {
	return &SocketBackend{socket: socket, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

// maxAnswer bounds what is read of one admin API answer.
const maxAnswer = 64 << 20

func (b *SocketBackend) do(ctx context.Context, method, path string, body, out any) error {
	raw, err := b.raw(ctx, method, path, body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("admin socket %s: answer to %s: %w", b.socket, path, err)
	}
	return nil
}

// raw sends a request and returns the answer's body; a non-2xx answer is
// an *APIError.
func (b *SocketBackend) raw(ctx context.Context, method, path string, body any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		j, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://cyberos"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", b.socket, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", b.socket, err)
	}
	if resp.StatusCode/100 != 2 {
		var ae struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(raw, &ae) != nil || ae.Error == "" {
			ae.Error = strings.TrimSpace(string(raw))
		}
		return nil, &APIError{Status: resp.StatusCode, Code: ae.Code, Msg: ae.Error}
	}
	return raw, nil
}

// Skills is GET /v1/skills.
func (b *SocketBackend) Skills(ctx context.Context) ([]*policy.Policy, error) {
	var list struct {
		Skills []*policy.Policy `json:"skills"`
	}
	if err := b.do(ctx, http.MethodGet, "/v1/skills", nil, &list); err != nil {
		return nil, err
	}
	return list.Skills, nil
}

// Invoke is POST /v1/invocations.
func (b *SocketBackend) Invoke(ctx context.Context, c Call, _ http.Header) (*supervisor.Envelope, error) {
	var env supervisor.Envelope
	if err := b.do(ctx, http.MethodPost, "/v1/invocations", c, &env); err != nil {
		return nil, err
	}
	return &env, nil
}

// Files is GET /v1/skills/{id}/files.
func (b *SocketBackend) Files(ctx context.Context, id string) ([]File, error) {
	var files []File
	err := b.do(ctx, http.MethodGet, "/v1/skills/"+url.PathEscape(id)+"/files", nil, &files)
	return files, err
}

// ReadFile is GET /v1/skills/{id}/files/{path}.
func (b *SocketBackend) ReadFile(ctx context.Context, id, p string) ([]byte, error) {
	return b.raw(ctx, http.MethodGet, "/v1/skills/"+url.PathEscape(id)+"/files/"+(&url.URL{Path: p}).EscapedPath(), nil)
}

// Events follows GET /v1/events?skill=ID: it returns once the daemon has
// said it is watching, so no event of a call made after is missed.
func (b *SocketBackend) Events(ctx context.Context, skill string) (<-chan Event, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://cyberos/v1/events?skill="+url.QueryEscape(skill), nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin socket %s: %w", b.socket, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, &APIError{Status: resp.StatusCode, Code: "events", Msg: "events stream refused"}
	}
	dec := json.NewDecoder(resp.Body)
	var first Event
	if err := dec.Decode(&first); err != nil || first.Type != "watching" {
		resp.Body.Close()
		return nil, fmt.Errorf("admin socket %s: events stream: no watching line (%v)", b.socket, err)
	}
	ch := make(chan Event, 64)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		for {
			var ev Event
			if dec.Decode(&ev) != nil {
				return
			}
			select {
			case ch <- ev:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}
