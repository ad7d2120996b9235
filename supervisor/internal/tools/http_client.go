package tools

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"cyberos.dev/policy"
)

// Limits of the Http tools.
const (
	HTTPDialTimeout      = 5 * time.Second  // name resolution and TCP connect, all addresses together
	HTTPTLSTimeout       = 5 * time.Second  // TLS handshake
	HTTPRequestTimeout   = 30 * time.Second // the whole call: every redirect, the body read
	HTTPMaxRedirects     = 5
	HTTPMaxRequestBody   = 1 << 20 // HttpPost body; larger is ErrTooLarge
	HTTPMaxResponseBody  = 4 << 20 // larger is cut, with "truncated": true
	HTTPMaxRequestHeader = 64      // skill-provided headers
	httpMaxHeaderBytes   = 64 << 10
	// httpMaxTextJSON bounds the JSON-escaped size of a "body" string.
	// JSON escapes control characters to six bytes each, so a 4 MiB body of
	// them would be 24 MiB, over the broker's 16 MiB response cap; such a
	// body is returned as "body_base64" (at most 5.6 MiB) instead.
	httpMaxTextJSON = 8 << 20
)

// httpTool is what HttpFetch and HttpPost share: the tool the enforcer checks
// every URL and address against, and (tests only) extra trusted roots.
type httpTool struct {
	tool    policy.Tool
	rootCAs *x509.CertPool // nil: the system roots
}

// httpRequest is one HttpFetch or HttpPost after argument decoding.
type httpRequest struct {
	method      string
	url         string
	headers     map[string]string
	body        []byte // nil for GET
	contentType string // "" leaves Content-Type to headers (or unset)
}

// forbiddenHeaders are request headers a skill may not set: they belong to
// the transport (framing, connection management, routing) or to the broker
// (traceparent carries the call's trace). "Proxy-*" is refused by prefix.
var forbiddenHeaders = map[string]bool{
	"Host":              true,
	"Traceparent":       true,
	"Connection":        true,
	"Transfer-Encoding": true,
	"Content-Length":    true,
	"Keep-Alive":        true,
	"Te":                true,
	"Trailer":           true,
	"Upgrade":           true,
}

// requestHeaders validates the skill's headers and returns them canonical.
// Names that differ only in case are the same header and refused as a
// duplicate.
func requestHeaders(in map[string]string) (http.Header, error) {
	if len(in) > HTTPMaxRequestHeader {
		return nil, fmt.Errorf("%w: more than %d headers", ErrInvalidParams, HTTPMaxRequestHeader)
	}
	h := make(http.Header, len(in))
	for name, v := range in {
		if !validHeaderName(name) {
			return nil, fmt.Errorf("%w: header name %q is not valid", ErrInvalidParams, name)
		}
		if !validHeaderValue(v) {
			return nil, fmt.Errorf("%w: header %q has an invalid value", ErrInvalidParams, name)
		}
		k := http.CanonicalHeaderKey(name)
		if forbiddenHeaders[k] || strings.HasPrefix(k, "Proxy-") {
			return nil, fmt.Errorf("%w: header %q may not be set by a skill", ErrInvalidParams, k)
		}
		if _, dup := h[k]; dup {
			return nil, fmt.Errorf("%w: header %q is given twice", ErrInvalidParams, k)
		}
		h[k] = []string{v}
	}
	return h, nil
}

// validHeaderName reports whether s is an RFC 9110 token. (x/net's httpguts
// would pull golang.org/x/text into the module for this.)
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s is a header field value: no control
// characters but horizontal tab (so no CR or LF to split the header with).
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// do performs one request for the call. Order: arguments, then CheckURL,
// then the request, where every connection's addresses pass CheckAddr in the
// dialer and every redirect target passes CheckURL again. A refusal at any
// step is the enforcer's *policy.Denial.
func (h httpTool) do(ctx context.Context, c *Call, r httpRequest) (any, error) {
	if c == nil || c.Env == nil || c.Env.Enforcer == nil {
		return nil, skillError(ErrFailed, "no enforcer for this invocation")
	}
	env := c.Env
	hdr, err := requestHeaders(r.headers)
	if err != nil {
		return nil, err
	}
	if len(r.body) > HTTPMaxRequestBody {
		return nil, fmt.Errorf("%w: body is %d bytes, limit %d", ErrTooLarge, len(r.body), HTTPMaxRequestBody)
	}
	if r.contentType != "" {
		if _, dup := hdr["Content-Type"]; dup {
			return nil, skillError(ErrInvalidParams, "content_type and a Content-Type header are both given")
		}
		if !validHeaderValue(r.contentType) {
			return nil, skillError(ErrInvalidParams, "content_type is not a valid header value")
		}
		hdr.Set("Content-Type", r.contentType)
	}
	u, err := env.Enforcer.CheckURL(h.tool, r.url)
	if err != nil {
		return nil, err
	}
	// Defence in depth: whatever CheckURL accepts, only http and https are
	// spoken, each exactly as the URL says (no upgrade, no downgrade).
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, &policy.Denial{Reason: policy.ReasonDomain, Tool: h.tool, Detail: "scheme " + strconv.Quote(u.Scheme) + " is not http or https"}
	}
	if c.Traceparent != "" {
		if !validHeaderValue(c.Traceparent) {
			return nil, skillError(ErrInvalidParams, "traceparent is not a valid header value")
		}
		hdr.Set("Traceparent", c.Traceparent) // spec AC 18
	}

	ctx, cancel := context.WithTimeout(ctx, HTTPRequestTimeout)
	defer cancel()
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body) // NewRequest sets ContentLength and GetBody (307/308 replay)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidParams, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}

	tr := h.transport(env)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: h.checkRedirect(env)}
	resp, err := client.Do(req)
	if err != nil {
		return nil, httpErr(err)
	}
	defer resp.Body.Close()

	return readHTTPResult(ctx, c, resp)
}

// readHTTPResult reads the response's body (at most HTTPMaxResponseBody,
// cut on a rune boundary with "truncated") and encodes the result, having
// reserved before reading what the body and the result can take: the body
// as its Content-Length says (twice the cap when it says nothing, as the
// buffer grows) and its worst-case encoding, given back down to the
// result's own size once it is known.
func readHTTPResult(ctx context.Context, c *Call, resp *http.Response) (any, error) {
	out := httpOut{status: resp.StatusCode, headers: make(map[string]string, len(resp.Header))}
	for k, vs := range resp.Header {
		if len(vs) > 0 {
			out.headers[strings.ToLower(k)] = vs[0]
		}
	}
	limit, buffer := int64(HTTPMaxResponseBody), int64(2*HTTPMaxResponseBody+1)
	if resp.ContentLength >= 0 {
		limit = min(resp.ContentLength, HTTPMaxResponseBody)
		buffer = limit + 1
	}
	worst := buffer + int64(out.size(int(limit), httpMaxTextJSON))
	if err := c.reserve(ctx, worst); err != nil {
		return nil, err
	}
	held := worst
	defer func() { c.release(held) }()

	var b []byte
	var err error
	if resp.ContentLength >= 0 {
		// The transport ends the body at its Content-Length.
		b, err = readUpTo(resp.Body, int(buffer))
	} else {
		b, err = io.ReadAll(io.LimitReader(resp.Body, HTTPMaxResponseBody+1))
	}
	if err != nil {
		return nil, httpErr(fmt.Errorf("read body: %w", err))
	}
	if len(b) > HTTPMaxResponseBody {
		b, out.truncated = trimPartialRune(b[:HTTPMaxResponseBody]), true
	}
	out.body = b
	out.text = utf8.Valid(b) && escapedLen(b) <= httpMaxTextJSON
	size := out.size(len(b), -1)
	enc, err := out.encode(size)
	if err != nil {
		return nil, err
	}
	held -= int64(size) // the result keeps its bytes until it is written
	return enc, nil
}

// readUpTo reads r to its end into one buffer of n bytes, or until the
// buffer is full.
func readUpTo(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, n)
	got := 0
	for got < n {
		m, err := r.Read(b[got:])
		got += m
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return b[:got], nil
}

// httpOut is an Http tool's result before encoding.
type httpOut struct {
	status    int
	headers   map[string]string // lower-case name → first value
	body      []byte
	text      bool // "body" (else "body_base64")
	truncated bool
}

// size is the result's JSON length for a body of n bytes: its own when
// textMax < 0, else the larger of base64's and a text of at most textMax
// bytes as JSON (a bound before the body is read).
func (o *httpOut) size(n, textMax int) int {
	const frame = len(`{"body_base64":,"headers":{},"status":,"truncated":false}`)
	size := frame + intLen(int64(o.status))
	for k, v := range o.headers {
		size += escapedLen(k) + 1 + escapedLen(v) + 1
	}
	if len(o.headers) > 0 {
		size-- // no comma after the last
	}
	b64 := base64.StdEncoding.EncodedLen(n) + 2
	switch {
	case textMax >= 0:
		size += max(b64, textMax)
	case o.text:
		size += escapedLen(o.body) - len("_base64")
	default:
		size += b64
	}
	if o.truncated {
		size--
	}
	return size
}

// encode writes the result as canonical JSON of exactly size bytes (keys
// in UTF-16 order: body or body_base64, headers, status, truncated).
func (o *httpOut) encode(size int) (Canonical, error) {
	keys := make([]string, 0, len(o.headers))
	for k := range o.headers {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b))) })
	w := newCanonWriter(size)
	if o.text {
		w.raw(`{"body":`)
		str(w, o.body)
	} else {
		w.raw(`{"body_base64":`)
		w.base64(o.body)
	}
	w.raw(`,"headers":{`)
	for i, k := range keys {
		if i > 0 {
			w.raw(",")
		}
		str(w, k)
		w.raw(":")
		str(w, o.headers[k])
	}
	w.raw(`},"status":`)
	w.int(int64(o.status))
	w.raw(`,"truncated":`)
	w.bool(o.truncated)
	w.raw("}")
	out, ok := w.done()
	if !ok {
		return nil, fmt.Errorf("%w: the Http result is not the size computed for it", ErrFailed)
	}
	return out, nil
}

// transport is one call's transport: no proxy (environment variables
// included), no connection reuse beyond the call, HTTP/1.1, and a dialer that
// resolves and checks addresses itself.
func (h httpTool) transport(env *Env) *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            h.dialContext(env),
		TLSClientConfig:        &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: h.rootCAs},
		TLSHandshakeTimeout:    HTTPTLSTimeout,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: httpMaxHeaderBytes,
	}
}

// checkRedirect re-runs CheckURL on every redirect target and sends the
// request to the URL it returned (its addresses are checked by the dialer
// when it connects), refuses a redirect from https to
// plain http, and stops after HTTPMaxRedirects. Its error reaches client.Do
// wrapped in a *url.Error; httpErr unwraps the Denial.
func (h httpTool) checkRedirect(env *Env) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if len(via) > HTTPMaxRedirects {
			return fmt.Errorf("%w: stopped after %d redirects", ErrFailed, HTTPMaxRedirects)
		}
		u, err := env.Enforcer.CheckURL(h.tool, req.URL.String())
		if err != nil {
			return err
		}
		if via[len(via)-1].URL.Scheme == "https" && u.Scheme != "https" {
			return &policy.Denial{Reason: policy.ReasonDomain, Tool: h.tool, Detail: "redirect from https to " + strconv.Quote(u.Scheme)}
		}
		req.URL = u // go where was judged (the host in its canonical form)
		return nil
	}
}

// dialContext resolves the host once (Env.Resolve when set, else the
// system resolver), checks every address with egressGuard (the enforcer's
// CheckAddr, the host's own addresses, the kernel's route), and only then
// connects to one of those very addresses: no second lookup, so a name that
// re-resolves (DNS rebinding) cannot switch to an address that was not
// checked. One refused address refuses the name. The dialer's Control hook
// judges the address of each socket again just before it connects, with the
// host's addresses read anew. IP-literal hosts are checked the same way.
// Resolution and connecting share HTTPDialTimeout.
func (h httpTool) dialContext(env *Env) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if network != "tcp" && network != "tcp4" && network != "tcp6" {
			return nil, fmt.Errorf("network %q not supported", network)
		}
		host, portStr, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("bad port %q", portStr)
		}
		ctx, cancel := context.WithTimeout(ctx, HTTPDialTimeout)
		defer cancel()
		ips, err := resolve(ctx, env, host)
		if err != nil {
			return nil, err
		}
		guard := egressGuard{env: env, tool: h.tool, host: host}
		if err := guard.check(ips...); err != nil {
			return nil, err
		}
		d := &net.Dialer{Timeout: HTTPDialTimeout, Control: guard.control}
		var firstErr error
		for _, ip := range ips {
			if network == "tcp4" && !ip.Is4() || network == "tcp6" && !ip.Is6() {
				continue
			}
			conn, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(ip, uint16(port)).String())
			if err == nil {
				return conn, nil
			}
			if den, ok := isDenial(err); ok {
				return nil, den
			}
			if firstErr == nil {
				firstErr = err
			}
			if ctx.Err() != nil {
				break
			}
		}
		if firstErr == nil {
			firstErr = fmt.Errorf("no %s address for %q", network, host)
		}
		return nil, firstErr
	}
}

// resolve returns host's addresses, IPv4-mapped IPv6 addresses unmapped (so
// ::ffff:10.0.0.1 is checked as the private 10.0.0.1 it is). An IP literal is
// its own answer and never reaches a resolver.
func resolve(ctx context.Context, env *Env, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip.Unmap()}, nil
	}
	var ips []netip.Addr
	var err error
	if env.Resolve != nil {
		ips, err = env.Resolve(ctx, host)
	} else {
		ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %q: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("resolve %q: no addresses", host)
	}
	out := make([]netip.Addr, len(ips))
	for i, ip := range ips {
		out[i] = ip.Unmap()
	}
	return out, nil
}

// httpErr classifies a failed request: the enforcer's Denial (from the
// dialer or a redirect) as it is, a deadline as ErrTimeout, anything else as
// ErrFailed. A *url.Error is unwrapped first, so the request URL (which may
// carry secrets in its query) stays out of the message.
func httpErr(err error) error {
	var d *policy.Denial
	if errors.As(err, &d) {
		return d
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	if errors.Is(err, ErrFailed) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// trimPartialRune drops an incomplete UTF-8 sequence that truncation left at
// the end of b, so a cut text body is still text.
func trimPartialRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
