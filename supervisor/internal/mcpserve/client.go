package mcpserve

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"cyberos.dev/client"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
)

// SocketBackend is the daemon reached over its admin socket through the
// daemon client, as `cyberos mcp serve` uses it.
type SocketBackend struct{ c *client.Client }

// NewSocketBackend returns the backend of the daemon listening on socket.
func NewSocketBackend(socket string) *SocketBackend {
	return &SocketBackend{c: client.New(socket)}
}

// Skills is GET /v1/skills.
func (b *SocketBackend) Skills(ctx context.Context) ([]*policy.Policy, error) {
	list, err := b.c.Skills(ctx)
	if err != nil {
		return nil, err
	}
	return list.Skills, nil
}

// Invoke is POST /v1/invocations.
func (b *SocketBackend) Invoke(ctx context.Context, c Call, _ http.Header) (*supervisor.Envelope, error) {
	return b.c.Invoke(ctx, client.InvokeRequest{SkillID: c.SkillID, Args: c.Args, TenantID: c.TenantID,
		Traceparent: c.Traceparent, RequestID: c.RequestID, CancelOnDisconnect: c.CancelOnDisconnect})
}

// Files is GET /v1/skills/{id}/files.
func (b *SocketBackend) Files(ctx context.Context, id string) ([]File, error) {
	return b.c.SkillFiles(ctx, id)
}

// ReadFile is GET /v1/skills/{id}/files/{path}.
func (b *SocketBackend) ReadFile(ctx context.Context, id, p string) ([]byte, error) {
	return b.c.SkillFile(ctx, id, p)
}

// Events follows GET /v1/events?skill=ID: it returns once the daemon has
// said it is watching, so no event of a call made after is missed.
func (b *SocketBackend) Events(ctx context.Context, skill string) (<-chan Event, error) {
	s, err := b.c.Events(ctx, skill)
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			return nil, &APIError{Status: ae.Status, Code: "events", Message: "events stream refused"}
		}
		return nil, err
	}
	var first Event
	if !s.Next() || s.Decode(&first) != nil || first.Type != client.EventWatching {
		s.Close()
		if err := s.Err(); err != nil {
			return nil, fmt.Errorf("admin socket %s: events stream: no watching line: %w", b.c.Socket(), err)
		}
		return nil, fmt.Errorf("admin socket %s: events stream: no watching line", b.c.Socket())
	}
	ch := make(chan Event, 64)
	go func() {
		defer close(ch)
		defer s.Close()
		for s.Next() {
			var ev Event
			if s.Decode(&ev) != nil {
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
