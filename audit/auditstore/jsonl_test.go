package auditstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"cyberos.dev/audit"
)

func TestJSONLRoundTrip(t *testing.T) {
	rows := chain(t, append(invocation("a"), invocation(`b "<&>" é`)...)...)
	var buf bytes.Buffer
	if err := audit.WriteJSONL(&buf, rows); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	if len(lines) != len(rows) {
		t.Fatalf("%d lines for %d rows", len(lines), len(rows))
	}
	for i, l := range lines {
		// Exactly the row's keys, payload embedded byte for byte.
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"kind", "payload", "prev_hash", "row_hash", "row_id", "seq", "ts"}) {
			t.Fatalf("line %d keys %v", i+1, keys)
		}
		if string(m["payload"]) != string(rows[i].Payload) {
			t.Fatalf("line %d payload %s, stored %s", i+1, m["payload"], rows[i].Payload)
		}
	}
	back, err := audit.ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(back, rows, rowsEqual) {
		t.Fatal("round trip changed rows")
	}
	if rep := Verify(back); !rep.OK {
		t.Fatalf("%+v", rep.Problems)
	}
}

func TestReadJSONLErrorsNameTheLine(t *testing.T) {
	rows := chain(t, invocation("a")[:3]...)
	var buf bytes.Buffer
	audit.WriteJSONL(&buf, rows)
	good := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	for name, bad := range map[string]string{
		"truncated":     good[2][:40],
		"unknown key":   strings.Replace(good[2], `"seq"`, `"extra":1,"seq"`, 1),
		"missing key":   strings.Replace(good[2], `,"kind":"skill.tool_call_completed"`, ``, 1),
		"trailing data": good[2] + `{}`,
		"not an object": `[1,2]`,
		"wrong type":    strings.Replace(good[2], `"seq":3`, `"seq":"3"`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			in := good[0] + "\n\n" + good[1] + "\n" + bad + "\n"
			_, err := audit.ReadJSONL(strings.NewReader(in))
			if err == nil || !strings.HasPrefix(err.Error(), "line 4:") {
				t.Fatalf("ReadJSONL = %v, want an error for line 4", err)
			}
		})
	}
}

// TestJSONLLongLines: lines well over 1 MiB (a long error message) are read.
func TestJSONLLongLines(t *testing.T) {
	long := strings.Repeat("stderr line with \"quotes\" and \t tabs\n", 40000) // ~1.5 MiB escaped
	rows := chain(t, audit.InvokedStarted(common("a"), "1", "p", "", map[string]any{}), audit.InvokedCompleted(common("a"), audit.OutcomeError, 1, "", long))
	var buf bytes.Buffer
	if err := audit.WriteJSONL(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if buf.Len() < 1<<20+1<<19 {
		t.Fatalf("line only %d bytes", buf.Len())
	}
	back, err := audit.ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rep := Verify(back); !rep.OK || len(back) != 2 {
		t.Fatalf("%+v", rep)
	}
}

// TestExportTamperDetected: flip any one byte of one row's line in an
// export file; reading and verifying the file then either fails naming that
// line or names that row.
func TestExportTamperDetected(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	emitAll(t, s, append(invocation("a"), invocation("b")[:2]...)...)
	rows := allRows(t, s)
	path := filepath.Join(dir, "export.jsonl")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := audit.WriteJSONL(f, rows); err != nil {
		t.Fatal(err)
	}
	f.Close()
	orig, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(orig, []byte("\n"))
	const k = 5 // 0-based line/row index: seq 6, skill.invoked_completed
	start := len(bytes.Join(lines[:k], nil))
	line := lines[k]

	check := func(i int, repl byte, read func([]byte) ([]audit.Row, error)) {
		t.Helper()
		b := slices.Clone(orig)
		b[start+i] = repl
		got, err := read(b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), fmt.Sprintf("line %d:", k+1)) {
				t.Fatalf("byte %d → %q: error %v does not name line %d", i, repl, err, k+1)
			}
			return
		}
		rep := Verify(got)
		if rep.OK || len(problemsFor(rep, rows[k].Seq, rows[k].RowID)) == 0 {
			t.Fatalf("byte %d (%q → %q) of line %d not detected at row %d: %+v", i, line[i], repl, k+1, rows[k].Seq, rep.Problems)
		}
	}
	// Through the file, as `audit verify --file` reads it: one character of
	// the payload.
	viaFile := func(b []byte) ([]audit.Row, error) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return audit.ReadJSONL(f)
	}
	i := bytes.Index(line, []byte(`"timeout"`)) + 1
	check(i, 'T', viaFile)
	// Then every byte of the line, in memory.
	viaMemory := func(b []byte) ([]audit.Row, error) { return audit.ReadJSONL(bytes.NewReader(b)) }
	checked := 0
	for i := 0; i < len(line)-1; i++ { // every byte but the newline
		for _, repl := range []byte{'1', 'Z', '"'} {
			if line[i] == repl {
				repl = '0'
			}
			check(i, repl, viaMemory)
			checked++
		}
	}
	t.Logf("%d single-byte edits of a %d-byte line, all detected", checked, len(line))
}

// TestExportOfStoreVerifies: what an operator does — export the whole
// store, verify the file.
func TestExportOfStoreVerifies(t *testing.T) {
	s := openStore(t, t.TempDir())
	emitAll(t, s, append(invocation("a"), invocation("b")...)...)
	rows, err := s.Rows(context.Background(), Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	audit.WriteJSONL(&buf, rows)
	back, err := audit.ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	storeRep, _ := s.Verify(context.Background())
	if fileRep := Verify(back); !fileRep.OK || fileRep.LastHash != storeRep.LastHash {
		t.Fatalf("file %+v store %+v", fileRep, storeRep)
	}
}

func TestWriteJSONLKeepsDamagedPayloadReadable(t *testing.T) {
	rows := chain(t, invocation("a")[:2]...)
	rows[1].Payload = json.RawMessage(`{"broken":`)
	var buf bytes.Buffer
	if err := audit.WriteJSONL(&buf, rows); err != nil {
		t.Fatal(err)
	}
	back, err := audit.ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rep := Verify(back); rep.OK || len(problemsFor(rep, 2, rows[1].RowID)) == 0 {
		t.Fatalf("%+v", rep.Problems)
	}
}
