//go:build linux

package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// adminRaw writes req on a new admin connection and reads the answer
// within wait (a write the daemon cut short by answering is no error).
func adminRaw(t *testing.T, d *daemonProc, req string, wait time.Duration) (*http.Response, string, time.Duration) {
	t.Helper()
	c, err := net.Dial("unix", d.adminSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(wait))
	// Written beside the read: the daemon may answer, and close, before it
	// has taken the whole request.
	go io.WriteString(c, req)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer within %v: %v", wait, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), time.Since(start)
}

// TestAdminBodyTooLarge: an invocation body declared (Content-Length) over
// the 2 MiB limit is answered 413 at once, without waiting for a body that
// may never come (main held it for the 30 s request timeout, then answered
// 400); a chunked body that grows past the limit is 413 too.
func TestAdminBodyTooLarge(t *testing.T) {
	e := newEnv(t)
	d := startDaemon(t, e)
	declared := "POST /v1/invocations HTTP/1.1\r\nHost: cyberos\r\nContent-Type: application/json\r\nContent-Length: 209715200\r\n\r\n" + `{"skill_id":"`
	resp, body, took := adminRaw(t, d, declared, 5*time.Second)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "over 2097152 bytes") {
		t.Errorf("a body declared at 200 MB: %d %s, want 413", resp.StatusCode, body)
	}
	t.Logf("a body declared at 200 MB answered %d in %v", resp.StatusCode, took)

	var chunked strings.Builder
	chunked.WriteString("POST /v1/invocations HTTP/1.1\r\nHost: cyberos\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
	chunk := `{"skill_id":"x","args":"` + strings.Repeat("a", 1<<20)
	fmt.Fprintf(&chunked, "%x\r\n%s\r\n", len(chunk), chunk)
	for range 2 {
		more := strings.Repeat("a", 1<<20)
		fmt.Fprintf(&chunked, "%x\r\n%s\r\n", len(more), more)
	}
	chunked.WriteString("0\r\n\r\n")
	resp, body, _ = adminRaw(t, d, chunked.String(), 20*time.Second)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "over 2097152 bytes") {
		t.Errorf("a chunked body of 3 MiB: %d %s, want 413", resp.StatusCode, body)
	}
}

// TestAdminDuplicateKeys: an invocation body naming a key twice is refused
// with 400 naming the key, as the broker refuses a request or params that
// do (encoding/json would take the last one silently), and nothing runs.
func TestAdminDuplicateKeys(t *testing.T) {
	e := newEnv(t)
	e.skill("first", "", "#!/bin/sh\necho '{\"who\":\"first\"}'\n")
	e.skill("second", "", "#!/bin/sh\necho '{\"who\":\"second\"}'\n")
	d := startDaemon(t, e)
	for _, c := range []struct{ body, key string }{
		{`{"skill_id":"first","skill_id":"second","tenant_id":"00000000-0000-0000-0000-000000000001"}`, "skill_id"},
		{`{"skill_id":"first","tenant_id":"00000000-0000-0000-0000-000000000001","tenant_id":"00000000-0000-0000-0000-000000000002"}`, "tenant_id"},
		{`{"skill_id":"first","args":{},"args":{"x":1}}`, "args"},
		{`{"skill_id":"first","sk\u0069ll_id":"second"}`, "skill_id"},
	} {
		resp, err := d.client.Post("http://cyberos/v1/invocations", "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "duplicate key") || !strings.Contains(string(b), `\"`+c.key+`\"`) {
			t.Errorf("%s: %d %s, want 400 naming the duplicate key %q", c.body, resp.StatusCode, b, c.key)
		}
	}
	for _, row := range e.auditRows() {
		if strings.Contains(string(row.Payload), `"skill_id":"first"`) || strings.Contains(string(row.Payload), `"skill_id":"second"`) {
			t.Errorf("a refused body wrote a row: %s %s", row.Kind, row.Payload)
		}
	}
}
