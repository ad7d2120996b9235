package mcpclient

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// RemoteTransport dials a remote server over Streamable HTTP with client,
// adding headers (already read from their secret files) to every request.
// client decides which addresses may be reached; it must not follow
// redirects to places the supervisor would not dial itself.
func RemoteTransport(url string, headers http.Header, client *http.Client) func(context.Context) (mcp.Transport, error) {
	return func(context.Context) (mcp.Transport, error) {
		c := *client
		base := c.Transport
		if base == nil {
			base = http.DefaultTransport
		}
		c.Transport = headerTransport{base: base, headers: headers}
		return &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &c, MaxRetries: -1,
			MaxEventSize: mcp.DefaultMaxEventSize}, nil
	}
}

// headerTransport sets the configured headers on each request.
type headerTransport struct {
	base    http.RoundTripper
	headers http.Header
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header[k] = v
	}
	return h.base.RoundTrip(r)
}
