package daemon

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// capServer serves /healthz and /hold (which blocks until release is
// closed) on a unix socket, its connections capped at max.
func capServer(t *testing.T, max int) (path string, c *connCap, release chan struct{}) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c = newConnCap(ln, max)
	release = make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	mux.HandleFunc("/hold", func(w http.ResponseWriter, _ *http.Request) { <-release; io.WriteString(w, "done") })
	srv := &http.Server{Handler: c.Track(mux), ConnState: c.ConnState, ConnContext: c.ConnContext, ReadHeaderTimeout: time.Minute}
	go srv.Serve(c)
	t.Cleanup(func() { srv.Close() })
	return path, c, release
}

func get(path, url string) (int, string, error) {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET "+url+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0, "", err
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

// TestConnCapRefusesWhenAllServe: with every connection serving a request,
// a new one gets 503 at once, and is served again once one ends.
func TestConnCapRefusesWhenAllServe(t *testing.T) {
	path, c, release := capServer(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan int, 4)
	for range 4 {
		go func() {
			code, _, _ := get(path, "/hold")
			done <- code
		}()
	}
	// Wait until the four holds are being served (a probe before then
	// would take a held place from one still sending its request).
	for active := 0; active < 4; time.Sleep(10 * time.Millisecond) {
		if ctx.Err() != nil {
			t.Fatalf("only %d of 4 holds being served", active)
		}
		c.mu.Lock()
		active = 0
		for _, info := range c.conns {
			if info.active {
				active++
			}
		}
		c.mu.Unlock()
	}
	for {
		code, body, err := get(path, "/healthz")
		if err == nil && code == 503 {
			if !strings.Contains(body, "too many admin connections") {
				t.Fatalf("503 body %q", body)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("never refused with 4 requests in progress: last %d %v", code, err)
		}
		time.Sleep(10 * time.Millisecond)
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
