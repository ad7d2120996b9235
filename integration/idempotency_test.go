//go:build linux

package integration

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
)

// startedRowsFor counts the skill.invoked_started rows carrying requestID.
func startedRowsFor(e *env, requestID string) (ids []string) {
	for _, r := range e.auditRows() {
		if r.Kind != "skill.invoked_started" {
			continue
		}
		var p struct {
			RequestID    string `json:"request_id"`
			InvocationID string `json:"invocation_id"`
		}
		if json.Unmarshal(r.Payload, &p) == nil && p.RequestID == requestID {
			ids = append(ids, p.InvocationID)
		}
	}
	return ids
}

// TestDaemonRepeatedRequestIDRunsOnce: a repeated (tenant_id, request_id)
// gets the first invocation's envelope byte for byte and runs nothing; the
// same request_id with another body is a 409; one pair of rows in all.
func TestDaemonRepeatedRequestIDRunsOnce(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	e.skill("echo", "", "#!/bin/sh\necho '{\"n\":1}'\n")
	d := startDaemon(t, e)
	body := map[string]any{"skill_id": "echo", "request_id": "req-idem-1", "tenant_id": "11111111-1111-1111-1111-111111111111", "args": map[string]any{"x": 1}}
	code1, env1, raw1 := d.invoke(body)
	code2, env2, raw2 := d.invoke(body)
	if code1 != 200 || code2 != 200 || env1.Outcome != "success" {
		t.Fatalf("first %d %s, repeat %d %s", code1, raw1, code2, raw2)
	}
	if raw1 != raw2 || !reflect.DeepEqual(env1, env2) {
		t.Errorf("the repeat's answer differs:\n%s\n%s", raw1, raw2)
	}
	other := map[string]any{"skill_id": "echo", "request_id": "req-idem-1", "tenant_id": "11111111-1111-1111-1111-111111111111", "args": map[string]any{"x": 2}}
	if code, _, raw := d.invoke(other); code != http.StatusConflict || !strings.Contains(raw, "req-idem-1") {
		t.Errorf("same request_id, other args: %d %s, want 409 naming it", code, raw)
	}
	if ids := startedRowsFor(e, "req-idem-1"); len(ids) != 1 || ids[0] != env1.InvocationID {
		t.Errorf("started rows for req-idem-1: %v, want only %s", ids, env1.InvocationID)
	}
	// Another tenant's request_id is its own.
	if code, env3, raw := d.invoke(map[string]any{"skill_id": "echo", "request_id": "req-idem-1", "tenant_id": "22222222-2222-2222-2222-222222222222", "args": map[string]any{"x": 1}}); code != 200 || env3.InvocationID == env1.InvocationID {
		t.Errorf("another tenant: %d %s", code, raw)
	}
}

// TestDaemonRepeatAfterCrashIsLost: the daemon is killed while the first
// run of a request_id is running; after a restart the repeat is answered
// with that invocation, outcome lost, and the skill does not run again.
func TestDaemonRepeatAfterCrashIsLost(t *testing.T) {
	testutil.RequiresRoot(t)
	e := newEnv(t)
	e.skill("slow", "effort_minutes: 1\n", "#!/bin/sh\nsleep 300\n")
	d := startDaemon(t, e)
	body := map[string]any{"skill_id": "slow", "request_id": "req-crash-1", "deadline_ms": 20000}
	b, _ := json.Marshal(body)
	go func() {
		// The daemon dies under this request: its error is expected.
		if resp, err := d.client.Post("http://cyberos/v1/invocations", "application/json", bytes.NewReader(b)); err == nil {
			resp.Body.Close()
		}
	}()
	var id string
	waitFor(t, 20*time.Second, func() bool {
		ids := startedRowsFor(e, "req-crash-1")
		if len(ids) == 1 {
			id = ids[0]
		}
		return id != ""
	})
	if err := killPid(d.cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	<-d.exited
	d2 := startDaemon(t, e)
	code, env, raw := d2.invoke(body)
	if code != 200 || env.Outcome != "lost" || env.InvocationID != id {
		t.Fatalf("repeat after the crash: %d %s, want outcome lost for %s", code, raw, id)
	}
	if ids := startedRowsFor(e, "req-crash-1"); len(ids) != 1 {
		t.Errorf("started rows for req-crash-1: %v, want one", ids)
	}
}
