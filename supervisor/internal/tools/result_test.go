package tools

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
)

// decodeAs decodes a tool's Canonical result into T.
func decodeAs[T any](t testing.TB, res any) T {
	t.Helper()
	var v T
	b, ok := res.(Canonical)
	if !ok {
		t.Fatalf("result is %T, want Canonical", res)
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("result %.200s: %v", b, err)
	}
	return v
}

// canonicalStrings are strings whose encodings differ between encoders:
// HTML characters, every control character, U+2028/9, invalid UTF-8.
var canonicalStrings = []string{
	"", "plain", `<script>&amp;</script>`, "quote \" backslash \\ slash /",
	"\x00\x01\x07\b\t\n\v\f\r\x1b\x1f\x7f", "é ☃ 😀", "\u2028\u2029", "bad \xff\xfe utf-8 \xc3",
	strings.Repeat("<", 1000), strings.Repeat("\x00", 1000),
}

// TestCanonicalStringsAreRFC8785: what the result writer emits is valid
// JSON that decodes to the string (invalid UTF-8 as U+FFFD, as
// encoding/json would), is exactly escapedLen long, and is its own RFC 8785
// canonical form, so its SHA-256 is the audit's HashJSON of it.
func TestCanonicalStringsAreRFC8785(t *testing.T) {
	for _, s := range canonicalStrings {
		w := newCanonWriter(escapedLen(s))
		str(w, s)
		out, ok := w.done()
		if !ok {
			t.Errorf("%q: wrote %d bytes, escapedLen said %d", s, len(out), escapedLen(s))
			continue
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Errorf("%q: %s is not JSON: %v", s, out, err)
			continue
		}
		want := strings.ToValidUTF8(s, "\uFFFD")
		if strings.Contains(s, "\xff\xfe") { // one U+FFFD per invalid byte
			want = "bad \uFFFD\uFFFD utf-8 \uFFFD"
		}
		if back != want {
			t.Errorf("%q decodes to %q", s, back)
		}
		if got, want := shaHex(out), mustHash(t, out); got != want {
			t.Errorf("%q: %s is not canonical: sha %s, HashJSON %s", s, out, got, want)
		}
	}
	if n := escapedLen(strings.Repeat("<", 10)); n != 12 {
		t.Errorf("'<' costs one byte: escapedLen of ten is %d, want 12", n)
	}
	if n := escapedLen(strings.Repeat("\x00", 10)); n != 62 || int64(n) > maxEscapedLen(10) {
		t.Errorf("NUL costs six bytes: escapedLen of ten is %d, want 62 (bound %d)", n, maxEscapedLen(10))
	}
}

func shaHex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func mustHash(t *testing.T, b []byte) string { t.Helper(); return mustHashTB(t, b) }

func mustHashTB(t testing.TB, b []byte) string {
	t.Helper()
	h, err := audit.HashJSON(b)
	if err != nil {
		t.Fatalf("HashJSON(%s): %v", b, err)
	}
	return h
}

// TestLargeResultsAreCanonical: Read, Grep and Glob results over files and
// names holding every troublesome byte are canonical JSON (their SHA-256 is
// the audit's result hash).
func TestLargeResultsAreCanonical(t *testing.T) {
	w := ftNew(t)
	body := strings.Join(canonicalStrings[:8], "\n")
	body = strings.ToValidUTF8(body, "?") // Read refuses binary files
	ftWrite(t, w.in("mixed.txt"), body)
	if err := os.MkdirAll(w.in("n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"<a>&", "\x01\x1f", "\u2028", "z\"\\"} {
		ftWrite(t, w.in("n/"+name), "x")
	}
	for _, c := range []struct {
		tool Tool
		args map[string]any
	}{
		{NewRead(), map[string]any{"path": w.in("mixed.txt")}},
		{NewGrep(), map[string]any{"pattern": ".", "path": w.allowed}},
		{NewGlob(), map[string]any{"pattern": w.allowed + "/**"}},
	} {
		res, err := w.call(t, c.tool, c.args)
		if err != nil {
			t.Fatalf("%s: %v", c.tool.Name(), err)
		}
		out, ok := res.(Canonical)
		if !ok {
			t.Fatalf("%s returned %T, want Canonical", c.tool.Name(), res)
		}
		if got, want := shaHex(out), mustHash(t, out); got != want {
			t.Errorf("%s: %.300s is not canonical", c.tool.Name(), out)
		}
	}
}

// fakeMemory is a budget of size bytes that refuses what does not fit.
type fakeMemory struct {
	size     int64
	held     atomic.Int64
	peak     atomic.Int64
	reserves atomic.Int64
	// growCap, when set, is what a call already holding bytes may reach:
	// the room a busy budget has for growing without waiting.
	growCap int64
}

func (m *fakeMemory) Reserve(_ context.Context, n int64) error {
	m.reserves.Add(1)
	if m.growCap > 0 && m.held.Load() > 0 && m.held.Load()+n > m.growCap {
		return &policy.Denial{Reason: policy.ReasonMemoryBudget, Detail: "fake budget busy"}
	}
	if h := m.held.Add(n); h > m.size {
		m.held.Add(-n)
		return &policy.Denial{Reason: policy.ReasonMemoryBudget, Detail: "fake budget spent"}
	} else if h > m.peak.Load() {
		m.peak.Store(h)
	}
	return nil
}

func (m *fakeMemory) Release(n int64) { m.held.Add(-n) }

// TestReadReservesBeforeReading: Read reserves the file's bytes and the
// worst case of their encoding before reading, keeps only its result's
// bytes, refuses (memory_budget) what the budget cannot hold, and answers
// a file whose JSON would be over the response cap with ErrTooLarge.
func TestReadReservesBeforeReading(t *testing.T) {
	w := ftNew(t)
	const size = 3 << 20
	ftWrite(t, w.in("lt.txt"), strings.Repeat("<", size))
	ftWrite(t, w.in("nul.txt"), strings.Repeat("\x00", size))

	mem := &fakeMemory{size: 64 << 20}
	res, err := w.callWith(t, NewRead(), map[string]any{"path": w.in("lt.txt")}, mem)
	if err != nil {
		t.Fatal(err)
	}
	out := res.(Canonical)
	if len(out) > size+200 {
		t.Errorf("'<' is one byte in the result: %d bytes for a %d-byte file", len(out), size)
	}
	if got := mem.held.Load(); got != int64(len(out)) {
		t.Errorf("after Read the call holds %d bytes, want its result's %d", got, len(out))
	}
	if p := mem.peak.Load(); p < size+int64(len(out)) {
		t.Errorf("peak reservation %d, want at least the file and its result (%d)", p, size+len(out))
	}

	// Six bytes a NUL: 18 MiB of JSON, over the cap; nothing stays held.
	mem = &fakeMemory{size: 64 << 20}
	if _, err := w.callWith(t, NewRead(), map[string]any{"path": w.in("nul.txt")}, mem); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Read of %d NULs: %v, want ErrTooLarge", size, err)
	}
	if got := mem.held.Load(); got != 0 {
		t.Errorf("a refused Read still holds %d bytes", got)
	}

	// A budget too small for the file: refused before reading.
	mem = &fakeMemory{size: 1 << 20}
	_, err = w.callWith(t, NewRead(), map[string]any{"path": w.in("lt.txt")}, mem)
	var d *policy.Denial
	if !errors.As(err, &d) || d.Reason != policy.ReasonMemoryBudget {
		t.Errorf("Read over the budget: %v, want a memory_budget denial", err)
	}
}

// TestGrepGlobStayUnderTheResultCap: a Grep matching lines of NULs and a
// Glob over names of control characters stop, truncated, before their JSON
// passes MaxResultBytes, and give back all they held but their result.
func TestGrepGlobStayUnderTheResultCap(t *testing.T) {
	w := ftNew(t)
	// 4,000 lines of 1,000 NULs: 4,000 matches of 6 KB each in JSON.
	line := strings.Repeat("\x00", 1000) + "\n"
	ftWrite(t, w.in("nul.txt"), strings.Repeat(line, 4000))
	mem := &fakeMemory{size: 256 << 20}
	res, err := w.callWith(t, NewGrep(), map[string]any{"pattern": "^", "path": w.in("nul.txt"), "max_matches": MaxGrepMatches}, mem)
	if err != nil {
		t.Fatal(err)
	}
	out := res.(Canonical)
	r := decodeAs[grepResult](t, res)
	if !r.Truncated || len(out) > MaxResultBytes || len(r.Matches) == 0 {
		t.Errorf("Grep: %d bytes, %d matches, truncated %v; want truncated under %d bytes", len(out), len(r.Matches), r.Truncated, MaxResultBytes)
	}
	if got := mem.held.Load(); got != int64(len(out)) {
		t.Errorf("after Grep the call holds %d bytes, want its result's %d", got, len(out))
	}
}

// TestGlobNamesBounded: a Glob over names of control characters (six bytes
// each in JSON) keeps its result under MaxResultBytes.
func TestGlobNamesBounded(t *testing.T) {
	w := ftNew(t)
	if err := os.MkdirAll(w.in("n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// 2,000 names of 250 control characters: 1.5 KB each in JSON, 3 MB.
	for i := range 2000 {
		name := strings.Repeat("\x01", 240) + fmt.Sprintf("%010d", i)
		ftWrite(t, w.in("n/"+name), "")
	}
	mem := &fakeMemory{size: 64 << 20}
	res, err := w.callWith(t, NewGlob(), map[string]any{"pattern": w.in("n") + "/*"}, mem)
	if err != nil {
		t.Fatal(err)
	}
	out := res.(Canonical)
	r := decodeAs[globResult](t, res)
	if len(r.Paths) != 2000 || r.Truncated {
		t.Errorf("Glob: %d paths, truncated %v", len(r.Paths), r.Truncated)
	}
	if got := mem.held.Load(); got != int64(len(out)) {
		t.Errorf("after Glob the call holds %d bytes, want its result's %d", got, len(out))
	}
	if mem.reserves.Load() > 10 {
		t.Errorf("Glob asked the budget %d times: it reserves in steps", mem.reserves.Load())
	}
}

// TestHttpFetchReservesBeforeReading: HttpFetch reserves the body (its
// Content-Length) and the result's worst case before reading, keeps only
// its result's bytes, and is refused (memory_budget) by a budget too small.
func TestHttpFetchReservesBeforeReading(t *testing.T) {
	srv := htBackend(t, false)
	env, _ := htEnv(t, true, nil)
	url := "http://api.example.com:" + srv.port + "/big?n=" + fmt.Sprint(1<<20)
	mem := &fakeMemory{size: 64 << 20}
	c := htCall(env, map[string]any{"url": url})
	c.Mem = mem
	res, err := NewHttpFetch().Call(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	out := res.(Canonical)
	if r := htDecode(t, res); r.Body == nil || len(*r.Body) != 1<<20 {
		t.Fatalf("result %+v", r)
	}
	if got := mem.held.Load(); got != int64(len(out)) {
		t.Errorf("after HttpFetch the call holds %d bytes, want its result's %d", got, len(out))
	}
	if p := mem.peak.Load(); p < 2<<20 {
		t.Errorf("peak reservation %d, want the body and its result", p)
	}

	mem = &fakeMemory{size: 1 << 20}
	c = htCall(env, map[string]any{"url": url})
	c.Mem = mem
	_, err = NewHttpFetch().Call(context.Background(), c)
	var d *policy.Denial
	if !errors.As(err, &d) || d.Reason != policy.ReasonMemoryBudget {
		t.Errorf("HttpFetch over the budget: %v, want a memory_budget denial", err)
	}
	if got := mem.held.Load(); got != 0 {
		t.Errorf("a refused HttpFetch holds %d bytes", got)
	}
}

// TestEditReservesTheFileTwice: Edit holds the file and its edited copy,
// reserved before reading and all given back when it returns.
func TestEditReservesTheFileTwice(t *testing.T) {
	w := ftNew(t)
	ftWrite(t, w.in("e.txt"), strings.Repeat("a", 1<<20)+"OLD")
	mem := &fakeMemory{size: 64 << 20}
	if _, err := w.callWith(t, NewEdit(), map[string]any{"path": w.in("e.txt"), "old_string": "OLD", "new_string": "NEW"}, mem); err != nil {
		t.Fatal(err)
	}
	if p, h := mem.peak.Load(), mem.held.Load(); p < 2<<20 || h != 0 {
		t.Errorf("Edit reserved at most %d bytes and holds %d after; want twice the file, then nothing", p, h)
	}
	mem = &fakeMemory{size: 1 << 20}
	_, err := w.callWith(t, NewEdit(), map[string]any{"path": w.in("e.txt"), "old_string": "NEW", "new_string": "OLD"}, mem)
	if !budgetDenied(err) {
		t.Errorf("Edit over the budget: %v, want a memory_budget denial", err)
	}
	if got := ftRead(t, w.in("e.txt")); !strings.HasSuffix(got, "NEW") {
		t.Errorf("a refused Edit changed the file")
	}
}

// TestGrowingCallClaimsItsWorstCase: a Glob or Grep whose hold cannot grow
// (a busy budget refuses a call holding bytes at once) is run again with
// its worst case claimed beforehand, and succeeds; afterwards it holds
// only its result.
func TestGrowingCallClaimsItsWorstCase(t *testing.T) {
	w := ftNew(t)
	if err := os.MkdirAll(w.in("n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 2000 {
		ftWrite(t, w.in("n/"+strings.Repeat("\x01", 240)+fmt.Sprintf("%010d", i)), "x\n")
	}
	for _, c := range []struct {
		tool  Tool
		args  map[string]any
		worst int64
	}{
		{NewGlob(), map[string]any{"pattern": w.in("n") + "/*"}, globWorstCase},
		{NewGrep(), map[string]any{"pattern": "x", "path": w.in("n"), "max_matches": MaxGrepMatches}, grepWorstCase},
	} {
		mem := &fakeMemory{size: 64 << 20, growCap: 2 << 20}
		res, err := w.callWith(t, c.tool, c.args, mem)
		if err != nil {
			t.Fatalf("%s: %v", c.tool.Name(), err)
		}
		if p := mem.peak.Load(); p < c.worst {
			t.Errorf("%s: peak reservation %d, want its worst case %d claimed", c.tool.Name(), p, c.worst)
		}
		if got, want := mem.held.Load(), int64(len(res.(Canonical))); got != want {
			t.Errorf("%s: holds %d bytes after, want its result's %d", c.tool.Name(), got, want)
		}
	}
	// A budget smaller than the worst case refuses the call.
	mem := &fakeMemory{size: 8 << 20, growCap: 2 << 20}
	if _, err := w.callWith(t, NewGlob(), map[string]any{"pattern": w.in("n") + "/*"}, mem); !budgetDenied(err) {
		t.Errorf("Glob with no room: %v, want a memory_budget denial", err)
	}
	if got := mem.held.Load(); got != 0 {
		t.Errorf("a refused Glob holds %d bytes", got)
	}
}

// TestMemoryReadResultIsCanonical: MemoryRead's result, withheld or not,
// is canonical JSON of the size reserved for it.
func TestMemoryReadResultIsCanonical(t *testing.T) {
	for _, r := range []memoryReadResult{
		{Body: strings.Repeat("\x00<", 1000), ContentHash: strings.Repeat("ab", 32)},
		{Body: "", ContentHash: strings.Repeat("cd", 32), BodyWithheld: true},
	} {
		mem := &fakeMemory{size: 1 << 20}
		res, err := encodeMemoryRead(context.Background(), &Call{Mem: mem}, r)
		if err != nil {
			t.Fatal(err)
		}
		out := res.(Canonical)
		if got, want := shaHex(out), mustHash(t, out); got != want {
			t.Errorf("%.100s is not canonical", out)
		}
		back := decodeAs[memoryReadResult](t, res)
		if back != r {
			t.Errorf("decodes to %+v", back)
		}
		if mem.held.Load() != int64(len(out)) {
			t.Errorf("holds %d bytes for a %d-byte result", mem.held.Load(), len(out))
		}
	}
}

// TestBashResultIsCanonical: Bash's output of NULs and invalid UTF-8 is
// canonical JSON of the size reserved for it, invalid bytes as U+FFFD.
func TestBashResultIsCanonical(t *testing.T) {
	f := &fakeExec{script: func(_ context.Context, r ExecRequest) (ExecResult, error) {
		r.Stdout.Write(bytes.Repeat([]byte{0}, MaxBashOutput))
		r.Stderr.Write([]byte("bad \xff <&>"))
		return ExecResult{ExitCode: 1, Signal: "SIGTERM"}, nil
	}}
	mem := &fakeMemory{size: 64 << 20}
	res, err := NewBash().Call(context.Background(), &Call{Env: bashEnvFor(t, "[Bash]", f), Args: json.RawMessage(`{"command":"x"}`), Mem: mem})
	if err != nil {
		t.Fatal(err)
	}
	out := res.(Canonical)
	if got, want := shaHex(out), mustHash(t, out); got != want {
		t.Errorf("%.100s is not canonical", out)
	}
	r := decodeAs[bashResult](t, res)
	if len(r.Stdout) != MaxBashOutput || r.Stderr != "bad \uFFFD <&>" || r.Signal != "SIGTERM" || r.ExitCode != 1 {
		t.Errorf("result %q %+v", r.Stderr, r.Signal)
	}
	if mem.held.Load() != int64(len(out)) {
		t.Errorf("holds %d bytes for a %d-byte result", mem.held.Load(), len(out))
	}
}
