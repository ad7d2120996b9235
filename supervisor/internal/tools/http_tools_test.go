package tools

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cyberos.dev/policy"
)

const htTraceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// htServer is a test backend on 127.0.0.1 that records what reached it.
type htServer struct {
	*httptest.Server
	port string

	mu       sync.Mutex
	requests []*http.Request
	bodies   []string
}

func (s *htServer) record(r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, r)
	s.bodies = append(s.bodies, string(b))
}

func (s *htServer) seen() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.requests...)
}

// htBackend serves:
//
//	/x             "hello" (text/plain)
//	/redirect?to=U 302 to U; /redirect307?to=U 307 to U
//	/loop          302 to /loop
//	/big?n=N       N bytes of 'a'
//	/binary        bytes that are not UTF-8
//	/echo          the request body, with its Content-Type
//	/slow          waits for the client to give up
func htBackend(t *testing.T, tls bool) *htServer {
	t.Helper()
	s := &htServer{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.record(r)
		switch r.URL.Path {
		case "/x":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Add("X-Multi", "one")
			w.Header().Add("X-Multi", "two")
			io.WriteString(w, "hello")
		case "/redirect":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		case "/redirect307":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusTemporaryRedirect)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusFound)
		case "/big":
			var n int
			fmt.Sscan(r.URL.Query().Get("n"), &n)
			w.Write(bytes.Repeat([]byte("a"), n))
		case "/binary":
			w.Write([]byte{0xff, 0xfe, 0x00, 0x80})
		case "/echo":
			s.mu.Lock()
			body := s.bodies[len(s.bodies)-1]
			s.mu.Unlock()
			w.Header().Set("X-Got-Content-Type", r.Header.Get("Content-Type"))
			io.WriteString(w, body)
		case "/slow":
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	})
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted-certificate case logs a handshake error
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	_, s.port, _ = net.SplitHostPort(s.Listener.Addr().String())
	return s
}

// htResolver maps test names to addresses and counts lookups; any other name
// fails (no real DNS in tests).
type htResolver struct {
	names   map[string][]netip.Addr
	lookups atomic.Int32
}

func (r *htResolver) resolve(_ context.Context, host string) ([]netip.Addr, error) {
	r.lookups.Add(1)
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func htAddrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

// htEnv builds an Env for a skill allowed HttpFetch and HttpPost on
// api.example.com, other.example.com and the listed extra hosts, with names
// resolving as in names (every test name → 127.0.0.1 unless overridden).
func htEnv(t *testing.T, allowLoopback bool, names map[string][]netip.Addr, extraDomains ...string) (*Env, *htResolver) {
	t.Helper()
	domains := append([]string{"api.example.com", "other.example.com"}, extraDomains...)
	src := "---\nname: http-skill\ndescription: http tools test\n" +
		"allowed_tools: [HttpFetch, HttpPost]\n" +
		`x-allowed-domains: ["` + strings.Join(domains, `", "`) + "\"]\n---\n"
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatalf("policy.Parse: %v", err)
	}
	r := &htResolver{names: map[string][]netip.Addr{
		"api.example.com":   htAddrs("127.0.0.1"),
		"other.example.com": htAddrs("127.0.0.1"),
		"evil.com":          htAddrs("127.0.0.1"),
		"evil.test":         htAddrs("127.0.0.1"),
	}}
	for k, v := range names {
		r.names[k] = v
	}
	return &Env{
		SkillID:      p.Name,
		InvocationID: "inv-1",
		TenantID:     "tenant-a",
		Policy:       p,
		Enforcer:     policy.NewEnforcer(p, policy.EnforcerOptions{AllowLoopback: allowLoopback}),
		Resolve:      r.resolve,
	}, r
}

func htCall(env *Env, args any) *Call {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return &Call{Env: env, Args: b, Traceparent: htTraceparent, TraceID: "0af7651916cd43dd8448eb211c80319c"}
}

func htFetch(t *testing.T, env *Env, args any) (*httpResult, error) {
	t.Helper()
	res, err := NewHttpFetch().Call(context.Background(), htCall(env, args))
	if err != nil {
		return nil, err
	}
	return htDecode(t, res), nil
}

// httpResult is an Http tool's result decoded. Exactly one of Body and
// BodyBase64 is set.
type httpResult struct {
	Status     int               `json:"status"`
	Headers    map[string]string `json:"headers"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 *string           `json:"body_base64,omitempty"`
	Truncated  bool              `json:"truncated"`
}

// htDecode decodes an Http tool's result, which must be canonical JSON.
func htDecode(t testing.TB, res any) *httpResult {
	t.Helper()
	r := decodeAs[httpResult](t, res)
	if got, want := shaHex(res.(Canonical)), mustHashTB(t, res.(Canonical)); got != want {
		t.Errorf("Http result %.300s is not canonical JSON", res.(Canonical))
	}
	return &r
}

func htBody(t *testing.T, r *httpResult) string {
	t.Helper()
	if r.Body == nil {
		t.Fatalf("result has no text body: %+v", r)
	}
	return *r.Body
}

// AC 7: an allowed host is fetched; a host outside x-allowed-domains is
// refused before anything is sent.
func TestHttpFetchDomains(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	res, err := htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/x"})
	if err != nil {
		t.Fatalf("HttpFetch allowed host: %v", err)
	}
	if res.Status != 200 || htBody(t, res) != "hello" || res.Truncated {
		t.Fatalf("result = %+v", res)
	}
	if got := srv.seen()[0].Host; got != "api.example.com:"+srv.port {
		t.Fatalf("Host header = %q", got)
	}
	for _, u := range []string{
		"https://evil.com/y",
		"http://evil.com:" + srv.port + "/y",
		"http://API.example.com.evil.com:" + srv.port + "/y",
		"ftp://api.example.com/x",
		"file:///etc/passwd",
		"http://127.0.0.1:" + srv.port + "/x",
		"http://2130706433:" + srv.port + "/x",
	} {
		_, err := htFetch(t, env, map[string]any{"url": u})
		mtDenial(t, err, policy.ReasonDomain, policy.ToolHttpFetch)
	}
	if n := len(srv.seen()); n != 1 {
		t.Fatalf("backend saw %d requests, want 1 (refusals must not connect)", n)
	}
}

// AC 7 over TLS, the scheme the spec's example uses.
func TestHttpFetchTLS(t *testing.T) {
	srv := htBackend(t, true)
	env, _ := htEnv(t, true, nil)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	tool := httpFetch{httpTool{tool: policy.ToolHttpFetch, rootCAs: roots}}
	res, err := tool.Call(context.Background(), htCall(env, map[string]any{"url": "https://api.example.com:" + srv.port + "/x"}))
	if err != nil {
		t.Fatalf("HttpFetch https: %v", err)
	}
	if htBody(t, htDecode(t, res)) != "hello" {
		t.Fatalf("result = %+v", res)
	}
	// The certificate is checked against the URL's name, not the dialled IP.
	_, err = NewHttpFetch().Call(context.Background(), htCall(env, map[string]any{"url": "https://api.example.com:" + srv.port + "/x"}))
	if err == nil || !errors.Is(err, ErrFailed) {
		t.Fatalf("untrusted certificate: error = %v, want ErrFailed", err)
	}
}

func TestHttpFetchUserInfoRefused(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	for _, u := range []string{
		"https://allowed.example@evil.test/",
		"https://api.example.com@evil.test/",
		"http://api.example.com@evil.test:" + srv.port + "/x",
		"http://api.example.com:pw@evil.test:" + srv.port + "/x",
		"http://user@api.example.com:" + srv.port + "/x",
	} {
		_, err := htFetch(t, env, map[string]any{"url": u})
		mtDenial(t, err, policy.ReasonDomain, policy.ToolHttpFetch)
	}
	if n := len(srv.seen()); n != 0 {
		t.Fatalf("backend saw %d requests", n)
	}
}

func TestHttpFetchRedirectToDisallowedHost(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	for _, target := range []string{
		"http://evil.test:" + srv.port + "/x",
		"http://127.0.0.1:" + srv.port + "/x",
		"http://api.example.com@evil.test:" + srv.port + "/x",
	} {
		u := "http://api.example.com:" + srv.port + "/redirect?to=" + url.QueryEscape(target)
		_, err := htFetch(t, env, map[string]any{"url": u})
		mtDenial(t, err, policy.ReasonDomain, policy.ToolHttpFetch)
	}
	for _, r := range srv.seen() {
		if r.URL.Path != "/redirect" {
			t.Fatalf("a refused redirect target was requested: %s %s", r.Host, r.URL)
		}
	}
}

func TestHttpFetchRedirectToAllowedHost(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	u := "http://api.example.com:" + srv.port + "/redirect?to=" + url.QueryEscape("http://other.example.com:"+srv.port+"/x")
	res, err := htFetch(t, env, map[string]any{"url": u})
	if err != nil {
		t.Fatalf("HttpFetch: %v", err)
	}
	if res.Status != 200 || htBody(t, res) != "hello" {
		t.Fatalf("result = %+v", res)
	}
	seen := srv.seen()
	if len(seen) != 2 || seen[1].Host != "other.example.com:"+srv.port {
		t.Fatalf("requests = %d, last host %q", len(seen), seen[len(seen)-1].Host)
	}
	// AC 18 holds across the redirect too.
	for _, r := range seen {
		if got := r.Header.Get("Traceparent"); got != htTraceparent {
			t.Fatalf("traceparent on %s = %q", r.URL, got)
		}
	}
}

func TestHttpFetchRedirectLimit(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	_, err := htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/loop"})
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("error = %v, want ErrFailed", err)
	}
	if n := len(srv.seen()); n != HTTPMaxRedirects+1 {
		t.Fatalf("backend saw %d requests, want %d", n, HTTPMaxRedirects+1)
	}
}

func TestHttpFetchRedirectDowngradeRefused(t *testing.T) {
	plain := htBackend(t, false)
	srv := htBackend(t, true)
	env, _ := htEnv(t, true, nil)
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	tool := httpFetch{httpTool{tool: policy.ToolHttpFetch, rootCAs: roots}}
	u := "https://api.example.com:" + srv.port + "/redirect?to=" + url.QueryEscape("http://api.example.com:"+plain.port+"/x")
	_, err := tool.Call(context.Background(), htCall(env, map[string]any{"url": u}))
	mtDenial(t, err, policy.ReasonDomain, policy.ToolHttpFetch)
	if n := len(plain.seen()); n != 0 {
		t.Fatalf("plain-http backend saw %d requests", n)
	}
}

// A name resolving to loopback is refused unless the runner allows loopback.
func TestHttpFetchLoopbackRefused(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, false, nil)
	_, err := htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/x"})
	d := mtDenial(t, err, policy.ReasonDomain, policy.ToolHttpFetch)
	if !strings.Contains(d.Detail, "loopback") {
		t.Fatalf("denial detail = %q", d.Detail)
	}
	if n := len(srv.seen()); n != 0 {
		t.Fatalf("backend saw %d requests", n)
	}
}

// Private, metadata and other refused addresses are refused by the check in
// the dialer, before any connection is attempted (the test never connects
// anywhere but loopback: a connect attempt would show up as a non-Denial
// error after the dial timeout).
func TestHttpFetchRefusedAddresses(t *testing.T) {
	names := map[string][]netip.Addr{}
	cases := map[string][]netip.Addr{
		"private10.example.com":    htAddrs("10.0.0.1"),
		"private192.example.com":   htAddrs("192.168.1.1"),
		"private172.example.com":   htAddrs("172.16.0.1"),
		"metadata.example.com":     htAddrs("169.254.169.254"),
		"metadata6.example.com":    htAddrs("fd00:ec2::254"),
		"linklocal.example.com":    htAddrs("169.254.1.1"),
		"ula.example.com":          htAddrs("fd12:3456::1"),
		"mapped.example.com":       htAddrs("::ffff:10.0.0.1"),
		"mappedmeta.example.com":   htAddrs("::ffff:169.254.169.254"),
		"unspecified.example.com":  htAddrs("0.0.0.0"),
		"mixed.example.com":        htAddrs("127.0.0.1", "10.0.0.1"), // one refused address refuses the name
		"mixedorder.example.com":   htAddrs("10.0.0.1", "127.0.0.1"),
		"nat64meta.example.com":    htAddrs("64:ff9b::a9fe:a9fe"),
		"cgnat.example.com":        htAddrs("100.64.0.1"),
		"unspecified6.example.com": htAddrs("::"),
	}
	var extra []string
	for name, addrs := range cases {
		names[name] = addrs
		extra = append(extra, name)
	}
	extra = append(extra, "169.254.169.254", "10.0.0.1", "fd00:ec2::254")
	env, _ := htEnv(t, true, names, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	urls := []string{
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://[fd00:ec2::254]/",
	}
	for name := range cases {
		urls = append(urls, "http://"+name+"/")
	}
	// And a redirect to an allowed name with a refused address.
	srv := htBackend(t, false)
	urls = append(urls, "http://api.example.com:"+srv.port+"/redirect?to="+url.QueryEscape("http://metadata.example.com/latest"))
	for _, u := range urls {
		_, err := NewHttpFetch().Call(ctx, htCall(env, map[string]any{"url": u}))
		var d *policy.Denial
		if !errors.As(err, &d) || d.Reason != policy.ReasonDomain {
			t.Errorf("%s: error = %v, want domain_violation", u, err)
			continue
		}
		// Refused by CheckAddr in the dialer, not by the URL check.
		if !strings.Contains(d.Detail, "refused address") {
			t.Errorf("%s: denial %q does not come from the address check", u, d.Detail)
		}
	}
	if n := len(srv.seen()); n != 1 {
		t.Fatalf("backend saw %d requests, want 1 (the redirect)", n)
	}
}

// Resolution happens once per connection and the checked address is the one
// dialled: a resolver that would answer differently the second time (DNS
// rebinding) is never asked twice.
func TestHttpFetchResolvesOnce(t *testing.T) {
	srv := htBackend(t, false)
	env, r := htEnv(t, true, nil)
	var n atomic.Int32
	env.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
		r.lookups.Add(1)
		if n.Add(1) == 1 {
			return htAddrs("127.0.0.1"), nil
		}
		return htAddrs("169.254.169.254"), nil
	}
	res, err := htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/x"})
	if err != nil || res.Status != 200 {
		t.Fatalf("HttpFetch: %+v, %v", res, err)
	}
	if got := r.lookups.Load(); got != 1 {
		t.Fatalf("resolver called %d times, want 1", got)
	}
}

// AC 18: the backend receives the call's traceparent.
func TestHttpTraceparent(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	if _, err := htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/x"}); err != nil {
		t.Fatalf("HttpFetch: %v", err)
	}
	if _, err := NewHttpPost().Call(context.Background(), htCall(env, map[string]any{
		"url": "http://api.example.com:" + srv.port + "/echo", "body": "{}",
	})); err != nil {
		t.Fatalf("HttpPost: %v", err)
	}
	for _, r := range srv.seen() {
		if got := r.Header.Values("Traceparent"); len(got) != 1 || got[0] != htTraceparent {
			t.Fatalf("%s %s: traceparent = %q, want %q", r.Method, r.URL, got, htTraceparent)
		}
	}
}

func TestHttpRequestHeaders(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	u := "http://api.example.com:" + srv.port + "/x"
	res, err := htFetch(t, env, map[string]any{"url": u, "headers": map[string]string{
		"x-api-key": "k1", "Accept": "text/plain", "User-Agent": "skill/1",
	}})
	if err != nil || res.Status != 200 {
		t.Fatalf("HttpFetch: %+v, %v", res, err)
	}
	got := srv.seen()[0].Header
	if got.Get("X-Api-Key") != "k1" || got.Get("Accept") != "text/plain" || got.Get("User-Agent") != "skill/1" {
		t.Fatalf("headers at the backend = %v", got)
	}

	for _, h := range []map[string]string{
		{"Host": "evil.test"},
		{"host": "evil.test"},
		{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"},
		{"TraceParent": "x"},
		{"Proxy-Authorization": "Basic eA=="},
		{"proxy-connection": "keep-alive"},
		{"Connection": "close"},
		{"Transfer-Encoding": "chunked"},
		{"Content-Length": "5"},
		{"Upgrade": "websocket"},
		{"X-Ok": "a\r\nHost: evil.test"},
		{"X-Ok": "a\nb"},
		{"Bad Name": "x"},
		{"": "x"},
		{"X-Dup": "1", "x-dup": "2"},
	} {
		_, err := htFetch(t, env, map[string]any{"url": u, "headers": h})
		if !errors.Is(err, ErrInvalidParams) {
			t.Errorf("headers %q: error = %v, want ErrInvalidParams", h, err)
		}
	}
	if n := len(srv.seen()); n != 1 {
		t.Fatalf("backend saw %d requests, want 1", n)
	}
}

func TestHttpStrictArgs(t *testing.T) {
	env, _ := htEnv(t, true, nil)
	for _, tc := range []struct {
		tool Tool
		args string
	}{
		{NewHttpFetch(), `{}`},
		{NewHttpFetch(), `{"url":"http://api.example.com/","method":"DELETE"}`},
		{NewHttpFetch(), `{"URL":"http://api.example.com/"}`},
		{NewHttpFetch(), `{"url":"http://api.example.com/","url":"http://evil.com/"}`},
		{NewHttpFetch(), `{"url":"http://api.example.com/","headers":{"X-A":1}}`},
		{NewHttpFetch(), `{"url":"http://api.example.com/","headers":{"X-A":"1","X-A":"2"}}`},
		{NewHttpPost(), `{"url":"http://api.example.com/"}`},
		{NewHttpPost(), `{"url":"http://api.example.com/","body":{"a":1}}`},
		{NewHttpPost(), `{"url":"http://api.example.com/","body":"x","content_type":""}`},
		{NewHttpPost(), `{"url":"http://api.example.com/","body":"x","content_type":"a\r\nb"}`},
		{NewHttpPost(), `{"url":"http://api.example.com/","body":"x","content_type":"text/plain","headers":{"content-type":"text/html"}}`},
	} {
		_, err := tc.tool.Call(context.Background(), &Call{Env: env, Args: json.RawMessage(tc.args)})
		if !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s %s: error = %v, want ErrInvalidParams", tc.tool.Name(), tc.args, err)
		}
	}
}

func TestHttpResultShape(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	res, err := htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/x"})
	if err != nil {
		t.Fatalf("HttpFetch: %v", err)
	}
	m, keys := mtKeys(t, res)
	if !reflect.DeepEqual(keys, []string{"body", "headers", "status", "truncated"}) {
		t.Fatalf("result keys = %v", keys)
	}
	hdr := m["headers"].(map[string]any)
	if hdr["content-type"] != "text/plain; charset=utf-8" || hdr["x-multi"] != "one" || hdr["content-length"] != "5" {
		t.Fatalf("headers = %v", hdr)
	}
	if m["status"] != float64(200) || m["body"] != "hello" || m["truncated"] != false {
		t.Fatalf("result = %v", m)
	}

	res, err = htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/binary"})
	if err != nil {
		t.Fatalf("HttpFetch: %v", err)
	}
	m, keys = mtKeys(t, res)
	if !reflect.DeepEqual(keys, []string{"body_base64", "headers", "status", "truncated"}) {
		t.Fatalf("binary result keys = %v", keys)
	}
	if b, _ := base64.StdEncoding.DecodeString(m["body_base64"].(string)); !bytes.Equal(b, []byte{0xff, 0xfe, 0x00, 0x80}) {
		t.Fatalf("body_base64 = %v", m["body_base64"])
	}

	res, err = htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/missing"})
	if err != nil || res.Status != 404 {
		t.Fatalf("a 404 is a result, not an error: %+v, %v", res, err)
	}
}

func TestHttpResponseCap(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	for _, tc := range []struct {
		n         int
		truncated bool
	}{
		{HTTPMaxResponseBody, false},
		{HTTPMaxResponseBody + 1, true},
		{HTTPMaxResponseBody + 1<<20, true},
	} {
		res, err := htFetch(t, env, map[string]any{"url": fmt.Sprintf("http://api.example.com:%s/big?n=%d", srv.port, tc.n)})
		if err != nil {
			t.Fatalf("n=%d: %v", tc.n, err)
		}
		if res.Truncated != tc.truncated || len(htBody(t, res)) != HTTPMaxResponseBody {
			t.Fatalf("n=%d: truncated %v, body %d bytes", tc.n, res.Truncated, len(*res.Body))
		}
	}
}

func TestHttpTruncatedTextStaysText(t *testing.T) {
	b := append(bytes.Repeat([]byte("a"), 10), "é"[0]) // cut inside a two-byte rune
	if got := trimPartialRune(b); string(got) != strings.Repeat("a", 10) {
		t.Fatalf("trimPartialRune = %q", got)
	}
	if got := trimPartialRune([]byte("aé")); string(got) != "aé" {
		t.Fatalf("trimPartialRune cut a whole rune: %q", got)
	}
	// A body whose JSON escaping would blow past the response cap goes out
	// as base64; '<' is one byte.
	if escapedLen(bytes.Repeat([]byte("\x00"), HTTPMaxResponseBody)) <= httpMaxTextJSON {
		t.Fatalf("a 4 MiB body of NUL would be sent as a 24 MiB JSON string")
	}
	if escapedLen(bytes.Repeat([]byte("<"), HTTPMaxResponseBody)) > httpMaxTextJSON {
		t.Fatalf("a 4 MiB body of '<' is not sent as text")
	}
}

func TestHttpPost(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	base := "http://api.example.com:" + srv.port
	post := func(args map[string]any) (*httpResult, error) {
		res, err := NewHttpPost().Call(context.Background(), htCall(env, args))
		if err != nil {
			return nil, err
		}
		return htDecode(t, res), nil
	}
	res, err := post(map[string]any{"url": base + "/echo", "body": `{"a":1}`, "content_type": "application/json"})
	if err != nil || htBody(t, res) != `{"a":1}` || res.Headers["x-got-content-type"] != "application/json" {
		t.Fatalf("HttpPost: %+v, %v", res, err)
	}
	if r := srv.seen()[0]; r.Method != http.MethodPost || r.ContentLength != 7 {
		t.Fatalf("request: %s, content length %d", r.Method, r.ContentLength)
	}
	res, err = post(map[string]any{"url": base + "/echo", "body": "x"})
	if err != nil || res.Headers["x-got-content-type"] != DefaultPostContentType {
		t.Fatalf("default content type: %+v, %v", res, err)
	}
	res, err = post(map[string]any{"url": base + "/echo", "body": "x", "headers": map[string]string{"content-type": "text/csv"}})
	if err != nil || res.Headers["x-got-content-type"] != "text/csv" {
		t.Fatalf("Content-Type header: %+v, %v", res, err)
	}
	// 307 replays the body to the (re-checked) target.
	res, err = post(map[string]any{"url": base + "/redirect307?to=" + url.QueryEscape("http://other.example.com:"+srv.port+"/echo"), "body": "again"})
	if err != nil || htBody(t, res) != "again" {
		t.Fatalf("307: %+v, %v", res, err)
	}
	_, err = post(map[string]any{"url": base + "/redirect307?to=" + url.QueryEscape("http://evil.test:"+srv.port+"/echo"), "body": "secret"})
	mtDenial(t, err, policy.ReasonDomain, policy.ToolHttpPost)

	_, err = post(map[string]any{"url": "https://evil.com/", "body": "x"})
	mtDenial(t, err, policy.ReasonDomain, policy.ToolHttpPost)

	n := len(srv.seen())
	_, err = post(map[string]any{"url": base + "/echo", "body": strings.Repeat("a", HTTPMaxRequestBody+1)})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized body: error = %v, want ErrTooLarge", err)
	}
	if len(srv.seen()) != n {
		t.Fatalf("oversized body reached the backend")
	}
}

// HttpFetch's policy does not grant HttpPost and vice versa.
func TestHttpToolRulesPerTool(t *testing.T) {
	srv := htBackend(t, false)
	p, err := policy.Parse([]byte("---\nname: fetch-only\ndescription: d\nallowed_tools: [\"HttpFetch(api.example.com)\"]\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	env, _ := htEnv(t, true, nil)
	env.Policy, env.Enforcer = p, policy.NewEnforcer(p, policy.EnforcerOptions{AllowLoopback: true})
	if _, err := htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/x"}); err != nil {
		t.Fatalf("HttpFetch: %v", err)
	}
	_, err = NewHttpPost().Call(context.Background(), htCall(env, map[string]any{"url": "http://api.example.com:" + srv.port + "/echo", "body": "x"}))
	mtDenial(t, err, policy.ReasonToolNotAllowed, policy.ToolHttpPost)
}

// Proxy settings in the environment are never used.
func TestHttpNoProxy(t *testing.T) {
	srv := htBackend(t, false)
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	t.Setenv("http_proxy", "http://127.0.0.1:1")
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:1")
	env, _ := htEnv(t, true, nil)
	res, err := htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/x"})
	if err != nil || res.Status != 200 {
		t.Fatalf("HttpFetch with a proxy in the environment: %+v, %v", res, err)
	}
}

func TestHttpTimeout(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := NewHttpFetch().Call(ctx, htCall(env, map[string]any{"url": "http://api.example.com:" + srv.port + "/slow"}))
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("error = %v, want ErrTimeout", err)
	}
}

func TestHttpUnknownName(t *testing.T) {
	env, _ := htEnv(t, true, nil, "nowhere.example.com")
	_, err := htFetch(t, env, map[string]any{"url": "http://nowhere.example.com/"})
	if !errors.Is(err, ErrFailed) {
		t.Fatalf("error = %v, want ErrFailed", err)
	}
}

func TestHttpWithoutEnforcer(t *testing.T) {
	env, _ := htEnv(t, true, nil)
	env.Enforcer = nil
	_, err := htFetch(t, env, map[string]any{"url": "http://api.example.com/"})
	if !errors.Is(err, ErrFailed) {
		t.Errorf("HttpFetch: error = %v, want ErrFailed", err)
	}
	_, err = NewHttpPost().Call(context.Background(), htCall(env, map[string]any{"url": "http://api.example.com/", "body": "x"}))
	if !errors.Is(err, ErrFailed) {
		t.Errorf("HttpPost: error = %v, want ErrFailed", err)
	}
}
