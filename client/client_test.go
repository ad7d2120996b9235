package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// serve runs h as a daemon on a Unix socket in a temporary folder and
// returns a client of it.
func serve(t *testing.T, h http.Handler) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "admin.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return New(sock)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Invoke posts the request as JSON and decodes the envelope.
func TestInvoke(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/invocations", func(w http.ResponseWriter, r *http.Request) {
		var req InvokeRequest
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || r.Header.Get("Content-Type") != "application/json" {
			writeJSON(w, 400, map[string]string{"error": "bad body", "code": "bad_request"})
			return
		}
		writeJSON(w, 200, map[string]any{"invocation_id": "inv-1", "outcome": "success", "result": map[string]any{"echo": req.SkillID + string(req.Args)}})
	})
	c := serve(t, mux)
	env, err := c.Invoke(context.Background(), InvokeRequest{SkillID: "hello", Args: json.RawMessage(`{"a":1}`), CancelOnDisconnect: true})
	if err != nil {
		t.Fatal(err)
	}
	if env.InvocationID != "inv-1" || env.Outcome != "success" {
		t.Fatalf("envelope %+v", env)
	}
	if b, _ := json.Marshal(env.Result); !strings.Contains(string(b), `hello{\"a\":1}`) {
		t.Fatalf("result %s: the request did not arrive as sent", b)
	}
}

// A refusal is an *Error with the API's status, code and text; a body that
// is not the API's error is kept as the text.
func TestRefusalIsError(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/invocations/{id}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, map[string]string{"error": "no invocation " + r.PathValue("id"), "code": "not_found"})
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "proxy broke", http.StatusBadGateway)
	})
	c := serve(t, mux)
	_, err := c.Inspect(context.Background(), "x1")
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" || ae.Message != "no invocation x1" {
		t.Fatalf("Inspect of an unknown id: %#v, want *Error 404 not_found", err)
	}
	if err.Error() != "no invocation x1 (not_found, HTTP 404)" {
		t.Errorf("Error() = %q", err)
	}
	_, err = c.Status(context.Background())
	if !errors.As(err, &ae) || ae.Status != 502 || ae.Message != "proxy broke" || ae.Code != "" {
		t.Fatalf("Status from a non-API answer: %#v", err)
	}
}

// No socket, and a socket nobody listens on, are *DialErrors that say so
// and how to start the daemon.
func TestDialErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "none.sock")
	_, err := New(missing).Status(context.Background())
	var de *DialError
	if !errors.As(err, &de) || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("missing socket: %#v, want *DialError wrapping ENOENT", err)
	}
	if want := "no daemon: the admin socket " + missing + " does not exist; start it with"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("missing socket: %q, want prefix %q", err, want)
	}

	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(stale); err != nil {
		t.Fatalf("the stale socket file is gone: %v", err)
	}
	_, err = New(stale).Status(context.Background())
	if !errors.As(err, &de) || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("stale socket: %#v, want *DialError wrapping ECONNREFUSED", err)
	}
	if !strings.Contains(err.Error(), "refuses connections (the daemon stopped or crashed?)") || !strings.Contains(err.Error(), "$"+SocketEnv) {
		t.Errorf("stale socket: %q", err)
	}
}

// The typed calls reach the right paths, escaped, and decode the answers.
func TestCalls(t *testing.T) {
	var cancelled, followed string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, Status{ActiveInvocations: 1, Day: "2026-12-07", Invocations: []ActiveView{{InvocationID: "a", ToolCalls: 3}}})
	})
	mux.HandleFunc("GET /v1/invocations", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []Recent{{InvocationID: "r-" + r.URL.Query().Get("limit"), Outcome: "success"}})
	})
	mux.HandleFunc("POST /v1/invocations/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		cancelled = r.PathValue("id")
		writeJSON(w, 200, map[string]string{"invocation_id": cancelled})
	})
	mux.HandleFunc("GET /v1/invocations/{id}/logs", func(w http.ResponseWriter, r *http.Request) {
		followed = r.URL.Query().Get("follow")
		io.WriteString(w, "stderr of "+r.PathValue("id"))
	})
	mux.HandleFunc("GET /v1/invocations/{id}/replay", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []ToolCall{{InvocationID: r.PathValue("id"), Tool: "Read", Outcome: "denied", Reason: "not_allowed"}})
	})
	mux.HandleFunc("GET /v1/skills", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, map[string]any{"skills": []map[string]any{{"name": "hello"}}, "unusable": []UnusableSkill{{SkillID: "bad", Error: "no SKILL.md"}}})
	})
	mux.HandleFunc("GET /v1/skills/{id}/files", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, []SkillFile{{Path: "SKILL.md", Size: 12}})
	})
	mux.HandleFunc("GET /v1/skills/{id}/files/{path...}", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.PathValue("id")+":"+r.PathValue("path"))
	})
	c := serve(t, mux)
	ctx := context.Background()

	if st, err := c.Status(ctx); err != nil || st.ActiveInvocations != 1 || len(st.Invocations) != 1 || st.Invocations[0].ToolCalls != 3 {
		t.Errorf("Status = %+v, %v", st, err)
	}
	if rs, err := c.Recent(ctx, 7); err != nil || len(rs) != 1 || rs[0].InvocationID != "r-7" {
		t.Errorf("Recent = %+v, %v", rs, err)
	}
	if err := c.Cancel(ctx, "inv 1"); err != nil || cancelled != "inv 1" {
		t.Errorf("Cancel: %v, the daemon saw %q", err, cancelled)
	}
	logs, err := c.Logs(ctx, "inv-2", true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(logs)
	logs.Close()
	if string(b) != "stderr of inv-2" || followed != "1" {
		t.Errorf("Logs = %q, follow %q", b, followed)
	}
	if calls, err := c.Replay(ctx, "inv-3"); err != nil || len(calls) != 1 || calls[0].InvocationID != "inv-3" || calls[0].Reason != "not_allowed" {
		t.Errorf("Replay = %+v, %v", calls, err)
	}
	if list, err := c.Skills(ctx); err != nil || len(list.Skills) != 1 || list.Skills[0].Name != "hello" || list.Unusable[0].SkillID != "bad" {
		t.Errorf("Skills = %+v, %v", list, err)
	}
	if fs, err := c.SkillFiles(ctx, "hello"); err != nil || len(fs) != 1 || fs[0].Size != 12 {
		t.Errorf("SkillFiles = %+v, %v", fs, err)
	}
	if b, err := c.SkillFile(ctx, "hello", "docs/a b.md"); err != nil || string(b) != "hello:docs/a b.md" {
		t.Errorf("SkillFile = %q, %v", b, err)
	}
}

// A stream is read line by line as the daemon writes it: the first line
// arrives before the answer ends.
func TestEventsStream(t *testing.T) {
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		_ = enc.Encode(Event{Type: EventWatching, SkillID: r.URL.Query().Get("skill")})
		w.(http.Flusher).Flush()
		<-release
		_ = enc.Encode(Event{Type: EventToolCall, SkillID: "hello", Call: &ToolCall{Tool: "Read", Outcome: "success"}})
		_ = enc.Encode(map[string]string{"error": "fell behind", "code": "overflow"})
	})
	c := serve(t, mux)
	s, err := c.Events(context.Background(), "hello")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ev Event
	if !s.Next() || s.Decode(&ev) != nil || ev.Type != EventWatching || ev.SkillID != "hello" {
		t.Fatalf("first line %q: want the watching line for skill hello", s.Line())
	}
	close(release)
	if !s.Next() || s.Decode(&ev) != nil || ev.Call == nil || ev.Call.Tool != "Read" {
		t.Fatalf("second line %q: want the tool call", s.Line())
	}
	if !s.Next() || !strings.Contains(string(s.Line()), "overflow") {
		t.Fatalf("third line %q: want the error line as it is", s.Line())
	}
	if s.Next() || s.Err() != nil {
		t.Fatalf("after the last line: Next true or Err %v", s.Err())
	}
}

// A refused stream is an *Error, as any other call.
func TestTailRefused(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/invocations/{id}/tail", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 400, map[string]string{"error": "malformed", "code": "bad_request"})
	})
	_, err := serve(t, mux).Tail(context.Background(), "../x")
	var ae *Error
	if !errors.As(err, &ae) || ae.Code != "bad_request" {
		t.Fatalf("Tail: %#v", err)
	}
}
