//go:build linux

package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/internal/testutil"
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

// mcpPost sends one JSON-RPC message to the admin socket's /mcp in session
// sid ("" before initialize) and returns the session id and the JSON-RPC
// answer's body (from a JSON or an event-stream response).
func mcpPost(t *testing.T, d *daemonProc, sid, msg string) (string, rpcAnswer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://cyberos/mcp", strings.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Cyberos-Tenant", mcpTenantA)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		t.Fatalf("POST /mcp %s: %d %s", msg, resp.StatusCode, body)
	}
	var a rpcAnswer
	for _, line := range strings.Split(string(body), "\n") {
		line = strings.TrimPrefix(line, "data: ")
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &a) == nil && a.Method == "" {
			break
		}
	}
	return resp.Header.Get("Mcp-Session-Id"), a
}

// TestMCPHTTPRetryIsIdempotent: over Streamable HTTP too, the same
// tools/call (same JSON-RPC id in the same session) sent again gets the
// first answer and makes one started row; another id is another
// invocation.
func TestMCPHTTPRetryIsIdempotent(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	mcpSkills(e)
	d := startDaemon(t, e)
	sid, _ := mcpPost(t, d, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if sid == "" {
		t.Fatal("initialize answered without Mcp-Session-Id")
	}
	mcpPost(t, d, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"writer","arguments":{}}}`
	_, a1 := mcpPost(t, d, sid, call)
	_, a2 := mcpPost(t, d, sid, call)
	if a1.Error != nil || len(a1.Result) == 0 || string(a1.Result) != string(a2.Result) {
		t.Fatalf("first %s %v, retry %s %v", a1.Result, a1.Error, a2.Result, a2.Error)
	}
	if rows := startedRows(e, "writer"); len(rows) != 1 {
		t.Errorf("writer: %d started rows after a retry, want 1", len(rows))
	}
	if _, a := mcpPost(t, d, sid, strings.Replace(call, `"id":7`, `"id":8`, 1)); a.Error != nil || string(a.Result) == string(a1.Result) {
		t.Errorf("id 8: %s %v", a.Result, a.Error)
	}
}
