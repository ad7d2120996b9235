package mcpclient

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/internal/mcptest"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
)

// A remote server over Streamable HTTP (on 127.0.0.1) serves the same
// tools, with the configured headers on every request; a request without
// them is refused by the server.
func TestRemoteStreamableHTTP(t *testing.T) {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcptest.NewServer() }, nil)
	var sawAuth, sawOther int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			sawOther++
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		sawAuth++
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	a, _ := OpenApprovals(t.TempDir())
	s, err := New(Options{Name: "remote", Approvals: a, Log: slog.New(slog.DiscardHandler),
		Transport: RemoteTransport(srv.URL, http.Header{"Authorization": {"Bearer s3cret"}}, srv.Client())})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := call(t, NewSource(s), "mcp__remote__echo", `{"text":"over http"}`, "")
	if err != nil || !strings.Contains(string(res), "over http") {
		t.Fatalf("%s %v", res, err)
	}
	if sawAuth == 0 || sawOther != 0 {
		t.Errorf("requests with the header %d, without %d", sawAuth, sawOther)
	}
	// Without the header the server refuses: the lookup fails cleanly.
	b, _ := New(Options{Name: "noauth", Approvals: a, Transport: RemoteTransport(srv.URL, nil, srv.Client())})
	defer b.Close()
	if _, ok, err := NewSource(b).Lookup(context.Background(), "mcp__noauth__echo"); !ok || !errors.Is(err, tools.ErrFailed) {
		t.Fatalf("no header: ok %v err %v", ok, err)
	}
}

// A remote server is dialled through the Http tools' egress filter: on
// 127.0.0.1 it is reached only when loopback is let through (the tests'
// switch), and a name resolving to a refused address (cloud metadata, the
// host's own) is refused and logged, the request never sent.
func TestRemoteThroughEgressFilter(t *testing.T) {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return mcptest.NewServer() }, nil)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	a, _ := OpenApprovals(t.TempDir())
	var logs syncBuf
	dial := func(name, endpoint string, e *Egress) (*Server, error) {
		e.Log = slog.New(slog.NewTextHandler(&logs, nil))
		return New(Options{Name: name, Approvals: a, Transport: RemoteTransport(endpoint, nil, e.Client())})
	}
	ok, err := dial("loop", srv.URL, &Egress{Domains: []string{u.Hostname()}, AllowLoopback: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ok.Close()
	if res, err := call(t, NewSource(ok), "mcp__loop__echo", `{"text":"filtered"}`, ""); err != nil || !strings.Contains(string(res), "filtered") {
		t.Fatalf("allowed: %s %v", res, err)
	}
	before := hits.Load()
	meta := func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
	}
	for name, c := range map[string]struct {
		endpoint string
		e        *Egress
	}{
		"strict": {srv.URL, &Egress{Domains: []string{u.Hostname()}}},
		"meta":   {"http://mcp.example.test:" + u.Port() + "/", &Egress{Domains: []string{"mcp.example.test"}, Resolve: meta}},
	} {
		s, err := dial(name, c.endpoint, c.e)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, found, err := NewSource(s).Lookup(context.Background(), policy.Tool("mcp__"+name+"__echo")); !found || !errors.Is(err, tools.ErrFailed) {
			t.Errorf("%s: found %v err %v, want a failed server", name, found, err)
		}
	}
	if hits.Load() != before {
		t.Errorf("refused dials reached the server %d times", hits.Load()-before)
	}
	for _, want := range []string{`host=127.0.0.1 reason=domain_violation detail="host \"127.0.0.1\" resolves to a refused address (loopback)"`,
		`host=mcp.example.test reason=domain_violation detail="host \"mcp.example.test\" resolves to a refused address (metadata)"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}

type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
