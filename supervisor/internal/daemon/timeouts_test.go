package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// serveAdmin serves h on a unix socket through the wiring New uses
// (adminServer): at most max connections, the timeouts to.
func serveAdmin(t *testing.T, max int, to adminTimeouts, h http.Handler) (string, *connCap) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv, c := adminServer(ln, max, to, h, slog.New(slog.DiscardHandler))
	go srv.Serve(c)
	t.Cleanup(func() { srv.Close() })
	return path, c
}

// adminSocket serves the daemon's admin routes with the timeouts to. The
// daemon behind them has nothing to run: these tests never get past a
// request's body.
func adminSocket(t *testing.T, to adminTimeouts) string {
	t.Helper()
	d := &Daemon{log: slog.New(slog.DiscardHandler), adminGID: os.Getgid()}
	path, _ := serveAdmin(t, 64, to, d.routes())
	return path
}

// send opens a connection to path and writes s on it.
func send(t *testing.T, path, s string) net.Conn {
	t.Helper()
	conn, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, s); err != nil {
		t.Fatal(err)
	}
	return conn
}

// untilClosed reads conn until the daemon closes it and returns what it
// read and how long after start the close came; the test fails if the
// connection is still open limit after start.
func untilClosed(t *testing.T, conn net.Conn, start time.Time, limit time.Duration) (string, time.Duration) {
	t.Helper()
	_ = conn.SetReadDeadline(start.Add(limit))
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		out = append(out, buf[:n]...)
		switch {
		case err == nil:
		case errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
			return string(out), time.Since(start)
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Fatalf("the connection is still open %v on; read %q", limit, out)
		default:
			t.Fatalf("read: %v (read %q)", err, out)
		}
	}
}

// trickle writes one byte of s every 50 ms until done is closed or a write
// fails (the daemon closed the connection).
func trickle(conn net.Conn, s string, done chan struct{}) {
	for {
		select {
		case <-done:
			return
		case <-time.After(50 * time.Millisecond):
		}
		if _, err := io.WriteString(conn, s[:1]); err != nil {
			return
		}
		s = s[1:] + s[:1]
	}
}

// TestAdminBodyTimeout: a request whose body is held open, or sent a byte
// at a time, is answered and its connection closed when the request
// timeout passes, not before, whether the route takes a body or not.
func TestAdminBodyTimeout(t *testing.T) {
	t.Parallel()
	to := adminTimeouts{header: 5 * time.Second, request: 500 * time.Millisecond, idle: 5 * time.Second}
	path := adminSocket(t, to)
	invoke := func(n int) string {
		return "POST /v1/invocations HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
			strconv.Itoa(n) + "\r\n\r\n" + `{"skill_id":`
	}
	for _, tc := range []struct {
		name, req string
		trickle   bool
		want      string
	}{
		// More than the 256 KiB net/http reads of a body its handler left:
		// it gives the rest up.
		{name: "held, 1 MB", req: invoke(1_000_000), want: "HTTP/1.1 400 "},
		// Less: net/http reads the rest before it answers.
		{name: "held, 1 kB", req: invoke(1000), want: "HTTP/1.1 400 "},
		{name: "trickled", req: invoke(1000), trickle: true, want: "HTTP/1.1 400 "},
		// net/http reads the rest of a body /healthz did not take before
		// it answers: until the timeout.
		{name: "route without a body", req: "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc",
			want: "HTTP/1.1 200 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now() // before the daemon starts the clock
			conn := send(t, path, tc.req)
			if tc.trickle {
				done := make(chan struct{})
				defer close(done)
				go trickle(conn, `"`+strings.Repeat("x", 100), done)
			}
			out, took := untilClosed(t, conn, start, to.request+time.Second)
			if !strings.HasPrefix(out, tc.want) {
				t.Errorf("answer %q, want %s...", out, tc.want)
			}
			if tc.want == "HTTP/1.1 400 " && !strings.Contains(out, "timeout") {
				t.Errorf("answer %q does not say the body timed out", out)
			}
			if took < to.request {
				t.Errorf("closed after %v, before the request timeout %v", took, to.request)
			}
			t.Logf("closed after %v (timeout %v)", took, to.request)
		})
	}
}

// TestAdminRequestTimeoutSparesTheAnswer: the request timeout bounds
// reading a request, not serving it: a request that runs past it (an
// invocation, a tail stream) keeps its context and gets its answer. This
// holds net/http to lifting its read deadline once a body is in.
func TestAdminRequestTimeoutSparesTheAnswer(t *testing.T) {
	t.Parallel()
	to := adminTimeouts{header: 5 * time.Second, request: 200 * time.Millisecond, idle: 5 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		select {
		case <-time.After(3 * to.request):
			fmt.Fprintf(w, "done %s", b)
		case <-r.Context().Done():
			http.Error(w, "context ended: "+context.Cause(r.Context()).Error(), 500)
		}
	})
	path, _ := serveAdmin(t, 64, to, mux)
	for _, tc := range []struct{ name, req, want string }{
		{"with a body", "POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", "done hello"},
		{"without", "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n", "done "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn := send(t, path, tc.req)
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(b) != tc.want {
				t.Fatalf("answer %d %q, want 200 %q", resp.StatusCode, b, tc.want)
			}
		})
	}
}

// TestAdminIdleTimeout: a keep-alive connection serves requests while it
// is used, and is closed once it has sat idle for the idle timeout.
func TestAdminIdleTimeout(t *testing.T) {
	t.Parallel()
	to := adminTimeouts{header: 5 * time.Second, request: 5 * time.Second, idle: 500 * time.Millisecond}
	path := adminSocket(t, to)
	conn := send(t, path, "")
	br := bufio.NewReader(conn)
	var answered time.Time
	for i := range 3 {
		if i > 0 {
			time.Sleep(to.idle / 2) // within the idle timeout: still open
		}
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered = time.Now()
		if resp.StatusCode != 200 || resp.Close {
			t.Fatalf("request %d: %d, close %v: want 200 keep-alive", i, resp.StatusCode, resp.Close)
		}
	}
	_ = conn.SetReadDeadline(answered.Add(to.idle + time.Second))
	_, err := br.ReadByte()
	took := time.Since(answered)
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("idle connection: %v, want it closed within %v", err, to.idle+time.Second)
	}
	// The server starts the idle clock just before the answer reaches us.
	if took < to.idle-50*time.Millisecond {
		t.Errorf("closed %v after the last answer, before the idle timeout %v", took, to.idle)
	}
	t.Logf("closed %v after the last answer (idle timeout %v)", took, to.idle)
}

// TestAdminHeaderTimeout: a connection that sends no request, part of one,
// or its headers a byte at a time is closed when the header timeout
// passes, not before.
func TestAdminHeaderTimeout(t *testing.T) {
	t.Parallel()
	to := adminTimeouts{header: 500 * time.Millisecond, request: 5 * time.Second, idle: 5 * time.Second}
	path := adminSocket(t, to)
	for _, tc := range []struct {
		name, req string
		trickle   bool
	}{
		{name: "silent"},
		{name: "partial", req: "POST /v1/invocations HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n"},
		{name: "trickled", req: "G", trickle: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			conn := send(t, path, tc.req)
			if tc.trickle {
				done := make(chan struct{})
				defer close(done)
				go trickle(conn, "ET /healthz HTTP/1.1\r\nX-Slow: "+strings.Repeat("y", 200), done)
			}
			out, took := untilClosed(t, conn, start, to.header+time.Second)
			// Silence, or a 400 for a request line cut short.
			if out != "" && !strings.HasPrefix(out, "HTTP/1.1 400 ") {
				t.Errorf("answered %q", out)
			}
			if took < to.header {
				t.Errorf("closed after %v, before the header timeout %v", took, to.header)
			}
			t.Logf("closed after %v (timeout %v)", took, to.header)
		})
	}
}
