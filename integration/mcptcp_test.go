package integration

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cyberos/supervisor/internal/testutil"
)

// The optional loopback listener (mcp_http) serves the same MCP server as
// the admin socket's /mcp, but only to a client that sends the bearer token
// from the root-only token file: without it, or with a wrong one, nothing
// is listed or run.
func TestMCPLoopbackListenerNeedsTheToken(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	token := strings.Repeat("0123456789abcdef", 4)
	tokenFile := filepath.Join(e.base, "mcp-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	d := startDaemon(t, e, "mcp_http: {listen: \""+addr+"\", token_file: "+tokenFile+"}")

	connect := func(bearer string) (*mcp.ClientSession, error) {
		ctx, cancel := context.WithTimeout(context.Background(), slow(30*time.Second))
		defer cancel()
		h := http.Header{"Cyberos-Tenant": {mcpTenantA}}
		if bearer != "" {
			h.Set("Authorization", "Bearer "+bearer)
		}
		hc := &http.Client{Transport: headerRT{rt: http.DefaultTransport, header: h}}
		c := mcp.NewClient(&mcp.Implementation{Name: "it", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	}
	for _, bad := range []string{"", token[:len(token)-1], token + "0"} {
		if cs, err := connect(bad); err == nil {
			cs.Close()
			t.Fatalf("connected with bearer %q, want refused", bad)
		}
	}
	cs, err := connect(token)
	if err != nil {
		t.Fatalf("connect with the token: %v", err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), slow(60*time.Second))
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "greet", Arguments: map[string]any{"name": "ada"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "hello ada") {
		t.Fatalf("greet over the loopback listener: %+v", res)
	}
	if n := len(startedRows(e, "greet")); n != 1 {
		t.Errorf("%d started rows for greet, want 1 (the refused clients ran nothing)", n)
	}

	if strings.Contains(d.logs.String(), token) {
		t.Errorf("the daemon's log holds the token")
	}
}
