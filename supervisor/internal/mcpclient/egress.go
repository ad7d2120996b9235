package mcpclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
)

// Limits of an MCP server's egress proxy.
const (
	// egressMaxConns bounds the connections one server's proxy serves at
	// once (tunnels included): each costs the supervisor a socket.
	egressMaxConns      = 64
	egressHeaderTimeout = 10 * time.Second
	egressIdleTimeout   = time.Minute // a kept-alive connection with no request
	egressMaxHeader     = 64 << 10
)

// Egress is a stdio server's way out: an HTTP proxy (CONNECT for https,
// absolute-form requests for http) the supervisor serves on a loopback
// listener inside the server's network namespace, whose only other
// interface is none. Every request's host must be in Domains (the
// x-allowed-domains vocabulary), and every address it resolves to passes
// the Http tools' egress filter (special-purpose ranges, cloud metadata,
// the host's own addresses and neighbours), dialled by the very same
// dialer (tools.EgressDialer).
type Egress struct {
	Domains []string
	// AllowLoopback lets the proxy reach the host's 127.0.0.0/8 and ::1
	// (tests only, as --allow-loopback-http).
	AllowLoopback bool
	// Resolve, HostAddrs and KernelRoute replace DNS, the host's addresses
	// and the route lookup (tests).
	Resolve     func(ctx context.Context, host string) ([]netip.Addr, error)
	HostAddrs   func() ([]netip.Addr, error)
	KernelRoute func(netip.Addr) (tools.RouteKind, error)
	// Log gets one WARN line per refused request.
	Log *slog.Logger
	// Server names the server in the log and the metrics (the proxy's
	// own server name when empty); Metrics, when set, count refusals.
	Server  string
	Metrics *Metrics
}

// egressTool is the tool the proxy's requests are judged as.
const egressTool = policy.ToolHttpFetch

// env is the tools.Env the proxy judges and dials with.
func (e *Egress) env() *tools.Env {
	p := &policy.Policy{AllowedTools: []policy.ToolRule{{Tool: egressTool}}, AllowedDomains: e.Domains}
	return &tools.Env{Policy: p, Enforcer: policy.NewEnforcer(p, policy.EnforcerOptions{AllowLoopback: e.AllowLoopback}),
		Resolve: e.Resolve, HostAddrs: e.HostAddrs, KernelRoute: e.KernelRoute}
}

// egressProxy is one server instance's proxy, serving one listener.
type egressProxy struct {
	server  string
	env     *tools.Env
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	log     *slog.Logger
	metrics *Metrics
	srv     *http.Server
	slots   chan struct{}

	mu      sync.Mutex
	tunnels map[net.Conn]struct{}
	closed  bool
}

// serve starts the proxy for server on ln; Close ends it with every
// connection, tunnels included.
func (e *Egress) serve(server string, ln net.Listener) *egressProxy {
	env := e.env()
	log := e.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &egressProxy{server: server, env: env, dial: tools.EgressDialer(env, egressTool), log: log, metrics: e.Metrics,
		slots: make(chan struct{}, egressMaxConns), tunnels: map[net.Conn]struct{}{}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: egressHeaderTimeout, IdleTimeout: egressIdleTimeout, MaxHeaderBytes: egressMaxHeader,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	go func() { _ = p.srv.Serve(limitListener{ln, p.slots}) }()
	return p
}

// Close ends the proxy: its listener, its requests and its tunnels.
func (p *egressProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.tunnels {
		c.Close()
	}
	p.mu.Unlock()
	return p.srv.Close()
}

// refuse answers 403 and logs the refusal (the denial's reason and detail,
// never the request's path or query).
func (p *egressProxy) refuse(w http.ResponseWriter, host string, err error) {
	reason, detail := "failed", err.Error()
	var d *policy.Denial
	if errors.As(err, &d) {
		reason, detail = string(d.Reason), d.Detail
	}
	p.log.Warn("mcp: egress refused", "mcp_server", p.server, "host", host, "reason", reason, "detail", detail)
	p.metrics.egressRefused(p.server, reason)
	code := http.StatusForbidden
	if d == nil {
		code = http.StatusBadGateway
	}
	http.Error(w, fmt.Sprintf("cyberos egress proxy: %s: %s", reason, detail), code)
}

func (p *egressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		p.refuse(w, r.Host, &policy.Denial{Reason: policy.ReasonDomain, Tool: egressTool,
			Detail: "the proxy takes absolute http:// URLs, and CONNECT for https"})
		return
	}
	u, err := p.env.Enforcer.CheckURL(egressTool, r.URL.String())
	if err != nil {
		p.refuse(w, r.URL.Hostname(), err)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = u
			pr.Out.Host = u.Host
			pr.Out.Header.Del("Proxy-Authorization")
		},
		Transport: &http.Transport{Proxy: nil, DialContext: p.dial, DisableKeepAlives: true,
			MaxResponseHeaderBytes: egressMaxHeader, ResponseHeaderTimeout: tools.HTTPRequestTimeout},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) { p.refuse(w, u.Hostname(), err) },
		ErrorLog:     slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	rp.ServeHTTP(w, r)
}

// connect opens a tunnel to an allowed host:port whose addresses pass the
// filter.
func (p *egressProxy) connect(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		p.refuse(w, r.Host, &policy.Denial{Reason: policy.ReasonDomain, Tool: egressTool, Detail: "CONNECT needs host:port"})
		return
	}
	u, err := p.env.Enforcer.CheckURL(egressTool, "https://"+r.Host+"/")
	if err != nil {
		p.refuse(w, host, err)
		return
	}
	up, err := p.dial(r.Context(), "tcp", u.Host)
	if err != nil {
		p.refuse(w, host, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "cyberos egress proxy: no tunnel on this connection", http.StatusInternalServerError)
		return
	}
	down, rw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !p.track(down, up) {
		return
	}
	defer p.untrack(down, up)
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, rw.Reader); closeWrite(up); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); closeWrite(down); done <- struct{}{} }()
	<-done
	<-done
}

func (p *egressProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		p.tunnels[c] = struct{}{}
	}
	return true
}

func (p *egressProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.tunnels, c)
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// limitListener accepts while a slot is free; a connection holds its slot
// until closed.
type limitListener struct {
	net.Listener
	slots chan struct{}
}

func (l limitListener) Accept() (net.Conn, error) {
	l.slots <- struct{}{}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &slotConn{Conn: c, slots: l.slots}, nil
}

type slotConn struct {
	net.Conn
	slots chan struct{}
	once  sync.Once
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.slots })
	return err
}

// proxyEnv is the environment that points a server at its proxy.
func proxyEnv(addr string) []string {
	u := "http://" + addr
	return []string{"HTTP_PROXY=" + u, "HTTPS_PROXY=" + u, "http_proxy=" + u, "https_proxy=" + u,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
		"NODE_USE_ENV_PROXY=1"} // Node's own fetch and http use the variables only when told
}

// Client is an HTTP client for the supervisor's own requests to a remote
// server: each request's URL must have a host in Domains, every address is
// judged and dialled as HttpFetch's, no proxy is used (environment
// included), and redirects are not followed. Refusals are logged as the
// proxy's.
func (e *Egress) Client() *http.Client {
	env := e.env()
	log := e.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{Proxy: nil, DialContext: tools.EgressDialer(env, egressTool),
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}, TLSHandshakeTimeout: tools.HTTPTLSTimeout,
		MaxResponseHeaderBytes: egressMaxHeader, ForceAttemptHTTP2: true}
	return &http.Client{Transport: checkedTransport{env: env, base: tr, log: log, server: e.Server, metrics: e.Metrics},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("a remote MCP server's redirect is not followed")
		}}
}

// checkedTransport judges each request's URL before it is sent.
type checkedTransport struct {
	env     *tools.Env
	base    http.RoundTripper
	log     *slog.Logger
	server  string
	metrics *Metrics
}

func (c checkedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if _, err := c.env.Enforcer.CheckURL(egressTool, r.URL.String()); err != nil {
		if r.Body != nil {
			r.Body.Close()
		}
		c.logRefusal(r.URL.Hostname(), err)
		return nil, err
	}
	resp, err := c.base.RoundTrip(r)
	if err != nil {
		var d *policy.Denial
		if errors.As(err, &d) {
			c.logRefusal(r.URL.Hostname(), err)
		}
	}
	return resp, err
}

func (c checkedTransport) logRefusal(host string, err error) {
	reason, detail := "failed", err.Error()
	var d *policy.Denial
	if errors.As(err, &d) {
		reason, detail = string(d.Reason), d.Detail
	}
	c.log.Warn("mcp: egress refused", "mcp_server", c.server, "host", host, "reason", reason, "detail", detail)
	c.metrics.egressRefused(c.server, reason)
}
