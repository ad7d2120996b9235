//go:build linux

package integration

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// invokeWithHeaders is invoke with extra request headers.
func (d *daemonProc) invokeWithHeaders(body map[string]any, h map[string]string) (int, envelope, string) {
	d.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, "http://cyberos/v1/invocations", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := d.client.Do(req)
	if err != nil {
		d.t.Errorf("invoke: %v", err)
		return 0, envelope{}, ""
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var env envelope
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(raw, &env); err != nil {
			d.t.Errorf("envelope: %v: %s", err, raw)
		}
	}
	return resp.StatusCode, env, string(raw)
}

// Issue 41.3: the admin API reads the caller's trace from the traceparent
// header (the body field wins over it); an invalid header is ignored; with
// neither, skill.invoke is a root span in the trace the envelope names, so
// an exported trace has no missing parent.
func TestDaemonTraceHeaders(t *testing.T) {
	e := newEnv(t)
	e.skill("ok", "", "#!/bin/sh\necho '{}'\n")
	col := newOTLPCollector(t)
	d := startDaemon(t, e, "otlp_endpoint: "+col.url)

	const hdrTrace, bodyTrace = "11111111111111111111111111111111", "22222222222222222222222222222222"
	hdr := map[string]string{"traceparent": "00-" + hdrTrace + "-1111111111111111-01", "tracestate": "vendor=abc"}
	cases := []struct {
		name       string
		body       map[string]any
		headers    map[string]string
		wantTrace  string // "" for a new trace
		wantParent string // "" for a root
	}{
		{"header only", map[string]any{"skill_id": "ok"}, hdr, hdrTrace, "1111111111111111"},
		{"body wins", map[string]any{"skill_id": "ok", "traceparent": "00-" + bodyTrace + "-2222222222222222-01"}, hdr, bodyTrace, "2222222222222222"},
		{"invalid header", map[string]any{"skill_id": "ok"}, map[string]string{"traceparent": "00-ZZ-1111111111111111-01"}, "", ""},
		{"none", map[string]any{"skill_id": "ok"}, nil, "", ""},
	}
	traces := make([]string, len(cases))
	for i, c := range cases {
		code, env, raw := d.invokeWithHeaders(c.body, c.headers)
		if code != 200 || env.Outcome != "success" {
			t.Fatalf("%s: %d %s", c.name, code, raw)
		}
		if c.wantTrace != "" && env.TraceID != c.wantTrace {
			t.Errorf("%s: envelope trace id %s, want %s", c.name, env.TraceID, c.wantTrace)
		}
		traces[i] = env.TraceID
	}
	d.stop(30 * time.Second)
	spans := col.spans()
	for i, c := range cases {
		var found int
		for _, s := range spans {
			if s.name != "skill.invoke" || s.traceID != traces[i] {
				continue
			}
			found++
			if s.parent != c.wantParent {
				t.Errorf("%s: skill.invoke parent %q, want %q", c.name, s.parent, c.wantParent)
			}
		}
		if found != 1 {
			t.Errorf("%s: %d skill.invoke spans in trace %s, want 1 (of %d spans)", c.name, found, traces[i], len(spans))
		}
	}
}
