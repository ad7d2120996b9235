package skillclient

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeBroker answers each frame with reply(request).
func fakeBroker(t *testing.T, reply func(req map[string]json.RawMessage) string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "b.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					var hdr [4]byte
					if _, err := io.ReadFull(c, hdr[:]); err != nil {
						return
					}
					body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
					if _, err := io.ReadFull(c, body); err != nil {
						return
					}
					var req map[string]json.RawMessage
					_ = json.Unmarshal(body, &req)
					out := reply(req)
					if out == "" {
						continue // say nothing
					}
					c.Write(binary.BigEndian.AppendUint32(nil, uint32(len(out))))
					c.Write([]byte(out))
				}
			}()
		}
	}()
	return path
}

func TestCall(t *testing.T) {
	var mu sync.Mutex
	var last map[string]json.RawMessage
	got := func() map[string]json.RawMessage { mu.Lock(); defer mu.Unlock(); return last }
	path := fakeBroker(t, func(req map[string]json.RawMessage) string {
		mu.Lock()
		last = req
		mu.Unlock()
		return `{"jsonrpc":"2.0","id":` + string(req["id"]) + `,"result":{"body":"hi","content_hash":"h"}}`
	})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var res struct{ Body string }
	if err := c.Call(context.Background(), "Read", map[string]string{"path": "/tmp/x"}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Body != "hi" {
		t.Fatalf("result %+v", res)
	}
	var params struct {
		Tool        string            `json:"tool"`
		Args        map[string]string `json:"args"`
		Traceparent string            `json:"traceparent"`
	}
	if r := got(); string(r["jsonrpc"]) != `"2.0"` || string(r["method"]) != `"tool.call"` || json.Unmarshal(r["params"], &params) != nil ||
		params.Tool != "Read" || params.Args["path"] != "/tmp/x" || params.Traceparent != c.Traceparent {
		t.Fatalf("request %s", r)
	}
	// nil args are {}, nil result discards it, raw results stay raw.
	if err := c.Call(context.Background(), "Read", nil, nil); err != nil {
		t.Fatal(err)
	}
	if p := string(got()["params"]); p != `{"tool":"Read","args":{},"traceparent":"`+c.Traceparent+`"}` {
		t.Fatalf("params %s", p)
	}
	var raw json.RawMessage
	if err := c.Call(context.Background(), "Read", nil, &raw); err != nil || string(raw) != `{"body":"hi","content_hash":"h"}` {
		t.Fatalf("raw %s %v", raw, err)
	}
}

func TestRPCError(t *testing.T) {
	path := fakeBroker(t, func(req map[string]json.RawMessage) string {
		return `{"jsonrpc":"2.0","id":` + string(req["id"]) + `,"error":{"code":-32603,"message":"tool_not_in_allowed_tools","data":{"reason":"tool_not_in_allowed_tools","tool":"Bash","skill_id":"s"}}}`
	})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Call(context.Background(), "Bash", nil, nil)
	var rpcErr *RPCError
	if !errors.As(err, &rpcErr) || rpcErr.Code != CodeInternal || rpcErr.Reason() != "tool_not_in_allowed_tools" || rpcErr.Data.Tool != "Bash" {
		t.Fatalf("%#v", err)
	}
	if !strings.Contains(err.Error(), "tool_not_in_allowed_tools") {
		t.Fatal(err)
	}
	// An RPC error does not break the client.
	if err := c.Call(context.Background(), "Bash", nil, nil); !errors.As(err, &rpcErr) {
		t.Fatal(err)
	}
}

func TestListAndStatus(t *testing.T) {
	path := fakeBroker(t, func(req map[string]json.RawMessage) string {
		id := string(req["id"])
		switch string(req["method"]) {
		case `"tool.list"`:
			return `{"jsonrpc":"2.0","id":` + id + `,"result":{"tools":[{"name":"Read","description":"d"}]}}`
		default:
			return `{"jsonrpc":"2.0","id":` + id + `,"result":{"invocation_id":"i","skill_id":"s","tool_calls":3,"denied":1,"uptime_ms":9}}`
		}
	})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	list, err := c.List(context.Background())
	if err != nil || len(list) != 1 || list[0].Name != "Read" {
		t.Fatalf("%v %v", list, err)
	}
	s, err := c.Status(context.Background())
	if err != nil || s != (Status{"i", "s", 3, 1, 9}) {
		t.Fatalf("%+v %v", s, err)
	}
}

// A response for another id means the stream is out of step: the client
// breaks and says so on every later call.
func TestIDMismatchBreaksClient(t *testing.T) {
	path := fakeBroker(t, func(map[string]json.RawMessage) string {
		return `{"jsonrpc":"2.0","id":999,"result":{}}`
	})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Call(context.Background(), "Read", nil, nil); err == nil || !strings.Contains(err.Error(), "response id") {
		t.Fatal(err)
	}
	if err := c.Call(context.Background(), "Read", nil, nil); err == nil {
		t.Fatal("a broken client called again")
	}
}

func TestContextCancel(t *testing.T) {
	path := fakeBroker(t, func(map[string]json.RawMessage) string { return "" }) // never answers
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err = c.Call(ctx, "Read", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Fatalf("%v after %v", err, time.Since(start))
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	c2, _ := Dial(path)
	defer c2.Close()
	time.AfterFunc(50*time.Millisecond, cancel2)
	if err := c2.Call(ctx2, "Read", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// The oversized request is refused before it is written: the next call on
// the same connection is the first request the broker reads.
func TestRequestTooLargeIsNotSent(t *testing.T) {
	var reqs atomic.Int64
	path := fakeBroker(t, func(req map[string]json.RawMessage) string {
		reqs.Add(1)
		return `{"jsonrpc":"2.0","id":` + string(req["id"]) + `,"result":{}}`
	})
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.Call(context.Background(), "Write", map[string]string{"body": strings.Repeat("x", MaxRequest)}, nil)
	if !errors.Is(err, ErrRequestTooLarge) {
		t.Fatal(err)
	}
	if err := c.Call(context.Background(), "Read", map[string]string{"path": "/x"}, nil); err != nil {
		t.Fatalf("the call after: %v", err)
	}
	if n := reqs.Load(); n != 1 {
		t.Fatalf("the broker read %d requests, want only the call after the oversized one", n)
	}
}

func TestDialDefaultPath(t *testing.T) {
	path := fakeBroker(t, func(req map[string]json.RawMessage) string {
		return `{"jsonrpc":"2.0","id":` + string(req["id"]) + `,"result":{}}`
	})
	t.Setenv(EnvSocket, path)
	if DefaultPath() != path {
		t.Fatal(DefaultPath())
	}
	c, err := Dial("")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Call(context.Background(), "Read", nil, nil); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvSocket, "")
	if DefaultPath() != SandboxSocket {
		t.Fatal(DefaultPath())
	}
}

// The client stays small: the standard library only, plus package wire
// (the contract it shares with the broker, itself held to the standard
// library by internal/testutil's layout test).
func TestStdlibOnly(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "skillclient.go", nil, parser.ImportsOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		first, _, _ := strings.Cut(path, "/")
		if path == "C" || strings.Contains(first, ".") && path != "cyberos.dev/wire" {
			t.Errorf("skillclient imports %s, beyond the standard library and wire", path)
		}
	}
}
