package daemon

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
)

// capServer serves /healthz and /hold (which blocks until release is
// closed) on a unix socket as the admin socket is served, its connections
// capped at max.
func capServer(t *testing.T, max int) (path string, c *connCap, release chan struct{}) {
	t.Helper()
	release = make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/hold", func(w http.ResponseWriter, _ *http.Request) { <-release; io.WriteString(w, "done") })
	path, c = capServeMux(t, max, mux)
	return path, c, release
}

// capServeMux serves mux and /healthz as capServer does.
func capServeMux(t *testing.T, max int, mux *http.ServeMux) (string, *connCap) {
	t.Helper()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	return serveAdmin(t, max, adminTimeouts{header: time.Minute, request: time.Minute, idle: time.Minute}, mux)
}

func get(path, url string) (int, string, error) {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	// A connection over the cap is answered and closed at once, maybe
	// before the request is written: its answer is read even when the
	// write then fails.
	_, werr := io.WriteString(conn, "GET "+url+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", errors.Join(werr, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestConnCapEvictsHeldConnections: connections that never send a request
// cannot crowd out /healthz, and the count stays at the cap.
func TestConnCapEvictsHeldConnections(t *testing.T) {
	path, c, _ := capServer(t, 4)
	var held []net.Conn
	for range 50 {
		conn, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for i := range 10 {
		code, body, err := get(path, "/healthz")
		if err != nil || code != 200 || body != "ok" {
			t.Fatalf("/healthz %d during the flood: %d %q %v", i, code, body, err)
		}
		if n := c.open(); n > 4 {
			t.Fatalf("%d connections counted in, cap 4", n)
		}
	}
}

// TestConnCapEvictsStalledBodies: connections whose handler waits for a
// body that never comes are not serving: they cannot crowd out /healthz
// either, and a body that does come is still read.
func TestConnCapEvictsStalledBodies(t *testing.T) {
	reading := make(chan struct{}, 50)
	mux := http.NewServeMux()
	mux.HandleFunc("/read", func(w http.ResponseWriter, r *http.Request) {
		reading <- struct{}{}
		io.Copy(io.Discard, r.Body)
	})
	path, c := capServeMux(t, 4, mux)
	var held []net.Conn
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	for i := range 50 {
		conn, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
		io.WriteString(conn, "POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\nabc")
		// Its handler waits on the body before the next one comes (else it
		// would be evicted as a connection still sending its headers).
		select {
		case <-reading:
		case <-time.After(5 * time.Second):
			t.Fatalf("stalled body %d never reached its handler: refused by the cap?", i+1)
		}
		if i%10 == 9 {
			code, body, err := get(path, "/healthz")
			if err != nil || code != 200 || body != "ok" {
				t.Fatalf("/healthz after %d stalled bodies: %d %q %v", i+1, code, body, err)
			}
		}
		if n := c.open(); n > 4 {
			t.Fatalf("%d connections counted in, cap 4", n)
		}
	}
	last := held[len(held)-1]
	io.WriteString(last, strings.Repeat("x", 1000000-3))
	last.SetDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(last), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the last body, sent in full: %v %v", resp, err)
	}
}

// TestConnCapRefusesWhenAllServe: with every connection serving a request,
// a new one gets 503 at once, and is served again once one ends.
func TestConnCapRefusesWhenAllServe(t *testing.T) {
	path, c, release := capServer(t, 4)
	done := make(chan int, 4)
	for range 4 {
		go func() {
			code, _, _ := get(path, "/hold")
			done <- code
		}()
	}
	// Wait until the four holds are being served (a probe before then
	// would take a held place from one still sending its request).
	testutil.WaitFor(t, 10*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		active := 0
		for _, info := range c.conns {
			if info.active {
				active++
			}
		}
		return active == 4
	})
	code, body, err := get(path, "/healthz")
	if err != nil || code != 503 || !strings.Contains(body, "too many admin connections") {
		t.Fatalf("with 4 requests in progress: %d %q %v, want 503 too many admin connections", code, body, err)
	}
	close(release)
	for range 4 {
		if code := <-done; code != 200 {
			t.Fatalf("/hold: %d", code)
		}
	}
	if code, _, err := get(path, "/healthz"); err != nil || code != 200 {
		t.Fatalf("/healthz after the holds ended: %d %v", code, err)
	}
}
