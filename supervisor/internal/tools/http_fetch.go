package tools

import (
	"context"
	"net/http"

	"cyberos.dev/policy"
)

// httpFetch is HttpFetch {url, headers?} → a GET's response.
type httpFetch struct{ httpTool }

// NewHttpFetch returns the HttpFetch tool.
func NewHttpFetch() Tool { return httpFetch{httpTool{tool: policy.ToolHttpFetch}} }

func (httpFetch) Name() policy.Tool { return policy.ToolHttpFetch }

func (httpFetch) Description() string {
	return `HTTP GET of a URL on a host in x-allowed-domains (redirects followed, each re-checked). ` +
		`Args {"url","headers"?:{name:value}}; result {"status","headers":{name:first value},"body" or "body_base64","truncated"} ` +
		`(body cut at 4 MiB; "body_base64" when it is not UTF-8 text).`
}

type httpFetchArgs struct {
	URL     *string           `json:"url"`
	Headers map[string]string `json:"headers"`
}

func (f httpFetch) Call(ctx context.Context, c *Call) (any, error) {
	var a httpFetchArgs
	if c == nil {
		return nil, skillError(ErrFailed, "no call")
	}
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	if a.URL == nil {
		return nil, skillError(ErrInvalidParams, "url is required")
	}
	return f.do(ctx, c, httpRequest{method: http.MethodGet, url: *a.URL, headers: a.Headers})
}
