package tools

import (
	"context"
	"net/http"

	"cyberos.dev/policy"
)

// DefaultPostContentType is HttpPost's Content-Type when neither content_type
// nor a Content-Type header is given: the body arrives as a JSON string, so
// it is text.
const DefaultPostContentType = "text/plain; charset=utf-8"

// httpPost is HttpPost {url, body, content_type?, headers?} → a POST's response.
type httpPost struct{ httpTool }

// NewHttpPost returns the HttpPost tool.
func NewHttpPost() Tool { return httpPost{httpTool{tool: policy.ToolHttpPost}} }

func (httpPost) Name() policy.Tool { return policy.ToolHttpPost }

func (httpPost) Description() string {
	return `HTTP POST to a URL on a host in x-allowed-domains (redirects followed, each re-checked). ` +
		`Args {"url","body","content_type"?,"headers"?:{name:value}} (body at most 1 MiB; content type default ` +
		DefaultPostContentType + `); result as HttpFetch.`
}

type httpPostArgs struct {
	URL         *string           `json:"url"`
	Body        *string           `json:"body"`
	ContentType *string           `json:"content_type"`
	Headers     map[string]string `json:"headers"`
}

func (p httpPost) Call(ctx context.Context, c *Call) (any, error) {
	var a httpPostArgs
	if c == nil {
		return nil, skillError(ErrFailed, "no call")
	}
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	if a.URL == nil || a.Body == nil {
		return nil, skillError(ErrInvalidParams, "url and body are required")
	}
	r := httpRequest{method: http.MethodPost, url: *a.URL, headers: a.Headers, body: []byte(*a.Body)}
	switch {
	case a.ContentType != nil && *a.ContentType == "":
		return nil, skillError(ErrInvalidParams, "content_type is empty")
	case a.ContentType != nil:
		r.contentType = *a.ContentType
	case !hasHeader(a.Headers, "Content-Type"):
		r.contentType = DefaultPostContentType
	}
	return p.do(ctx, c, r)
}

// hasHeader reports whether headers names the header, in any case.
func hasHeader(headers map[string]string, name string) bool {
	for k := range headers {
		if http.CanonicalHeaderKey(k) == name {
			return true
		}
	}
	return false
}
