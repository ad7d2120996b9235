package mcpclient

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/internal/mcptest"
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
