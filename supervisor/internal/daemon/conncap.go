package daemon

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// connCap bounds the admin socket's open connections. At the cap, a new
// connection takes the place of the oldest one that has no request being
// served (a keep-alive connection left idle, one that never sent its
// request, or one still sending its body): held connections cannot crowd
// out a caller or /healthz. When every connection is serving a request, the
// new one gets 503 and is closed. Its ConnState method is the server's
// http.Server.ConnState.
type connCap struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connInfo
}

type connInfo struct {
	since  time.Time // when it last became new, idle or waiting on its body
	active bool      // a handler is serving a request on it, not waiting on its body
}

// overCapBody is what a connection beyond the cap gets.
const overCapBody = `{"error":"too many admin connections, all serving requests: try again","code":"unavailable"}`

func newConnCap(ln net.Listener, max int) *connCap {
	return &connCap{Listener: ln, max: max, conns: map[net.Conn]*connInfo{}}
}

// Accept returns the next connection within the cap, evicting a held one
// or refusing the new one as the cap requires.
func (c *connCap) Accept() (net.Conn, error) {
	for {
		conn, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c.admit(conn) {
			return conn, nil
		}
		// Never read from: a refused connection costs no wait.
		_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = conn.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
			strconv.Itoa(len(overCapBody)) + "\r\n\r\n" + overCapBody))
		_ = conn.Close()
	}
}

// admit counts conn in, closing the longest-held connection not being
// served when at the cap; false when there is none.
func (c *connCap) admit(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.conns) >= c.max {
		var oldest net.Conn
		var at time.Time
		for k, v := range c.conns {
			if !v.active && (oldest == nil || v.since.Before(at)) {
				oldest, at = k, v.since
			}
		}
		if oldest == nil {
			return false
		}
		delete(c.conns, oldest)
		_ = oldest.Close()
	}
	c.conns[conn] = &connInfo{since: time.Now()}
	return true
}

// ConnState follows each connection: held from when it opens or goes
// idle, gone once closed. Its ConnContext and Track mark the time a handler
// runs on it, when it is not evictable.
func (c *connCap) ConnState(conn net.Conn, s http.ConnState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	info, ok := c.conns[conn]
	switch {
	case s == http.StateClosed || s == http.StateHijacked:
		delete(c.conns, conn)
	case ok && s == http.StateIdle:
		info.since = time.Now()
	}
}

type capConnKey struct{}

// ConnContext puts the connection in its requests' context for Track.
func (c *connCap) ConnContext(ctx context.Context, conn net.Conn) context.Context {
	return context.WithValue(ctx, capConnKey{}, conn)
}

// Track marks the connection active while next serves a request on it,
// except while next waits for more of the request's body. A connection
// still sending its headers or its body is not serving (the server's
// header and request timeouts bound it), so slow or stalled senders cannot
// hold every place.
func (c *connCap) Track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _ := r.Context().Value(capConnKey{}).(net.Conn)
		if r.Body != nil && r.Body != http.NoBody {
			r = withBody(r, &sendingBody{ReadCloser: r.Body, c: c, conn: conn})
		}
		c.setActive(conn, true)
		defer c.setActive(conn, false)
		next.ServeHTTP(w, r)
	})
}

// sendingBody is a request body whose connection is evictable while a read
// of it waits on the caller.
type sendingBody struct {
	io.ReadCloser
	c    *connCap
	conn net.Conn
}

func (b *sendingBody) Read(p []byte) (int, error) {
	b.c.setActive(b.conn, false)
	defer b.c.setActive(b.conn, true)
	return b.ReadCloser.Read(p)
}

// withBody is a shallow copy of r reading body. The server's own request
// keeps its body: net/http looks at it after the handler to decide how
// much of what is left to read.
func withBody(r *http.Request, body io.ReadCloser) *http.Request {
	r2 := *r
	r2.Body = body
	return &r2
}

func (c *connCap) setActive(conn net.Conn, active bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if info, ok := c.conns[conn]; ok {
		info.active = active
		info.since = time.Now()
	}
}

// open is how many connections are counted in.
func (c *connCap) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.conns)
}
