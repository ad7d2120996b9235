package mcpserve

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The SDK hands a tool handler no JSON-RPC id, and the idempotency key
// needs it. The wrappers below put a tools/call's id into its params._meta
// (metaRequestID) as the message arrives, for the stdio and the HTTP
// transport.

// withID returns params with _meta[metaRequestID] = id; params it cannot
// read are returned as they are, for the SDK to refuse.
func withID(params json.RawMessage, id any) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(params, &m) != nil || m == nil {
		return params
	}
	meta := map[string]any{}
	if raw, ok := m["_meta"]; ok && json.Unmarshal(raw, &meta) != nil {
		return params
	}
	if meta == nil {
		meta = map[string]any{}
	}
	meta[metaRequestID] = id
	b, err := json.Marshal(meta)
	if err != nil {
		return params
	}
	m["_meta"] = b
	out, err := json.Marshal(m)
	if err != nil {
		return params
	}
	return out
}

// IDTransport wraps a transport (stdio) so tool handlers see each call's
// JSON-RPC id.
type IDTransport struct{ mcp.Transport }

// Connect connects the wrapped transport.
func (t IDTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return idConn{c}, nil
}

type idConn struct{ mcp.Connection }

func (c idConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	m, err := c.Connection.Read(ctx)
	if r, ok := m.(*jsonrpc.Request); ok && err == nil && r.Method == "tools/call" && r.ID.IsValid() {
		r.Params = withID(r.Params, r.ID.Raw())
	}
	return m, err
}

// IDHandler wraps the Streamable HTTP handler the same way: a POST body that
// is one tools/call request gets its id into _meta. Bodies over max are
// left for the SDK's own limit.
func IDHandler(next http.Handler, max int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			next.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, max+1))
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if int64(len(body)) <= max {
			if msg, err := jsonrpc.DecodeMessage(body); err == nil {
				if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "tools/call" && req.ID.IsValid() {
					req.Params = withID(req.Params, req.ID.Raw())
					if b, err := jsonrpc.EncodeMessage(req); err == nil {
						body = b
					}
				}
			}
		}
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
		r.ContentLength = -1
		next.ServeHTTP(w, r)
	})
}
