package audit

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
)

func TestJSONLRoundTrip(t *testing.T) {
	rows := chain(t, append(invocation("a"), invocation(`b "<&>" é`)...)...)
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, rows); err != nil {
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
	back, err := ReadJSONL(&buf)
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
	WriteJSONL(&buf, rows)
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
			_, err := ReadJSONL(strings.NewReader(in))
			if err == nil || !strings.HasPrefix(err.Error(), "line 4:") {
				t.Fatalf("ReadJSONL = %v, want an error for line 4", err)
			}
		})
	}
}

// TestJSONLLongLines: lines well over 1 MiB (a long error message) are read.
func TestJSONLLongLines(t *testing.T) {
	long := strings.Repeat("stderr line with \"quotes\" and \t tabs\n", 40000) // ~1.5 MiB escaped
	rows := chain(t, InvokedStarted(common("a"), "1", "p", "", map[string]any{}), InvokedCompleted(common("a"), OutcomeError, 1, "", long))
	var buf bytes.Buffer
	if err := WriteJSONL(&buf, rows); err != nil {
		t.Fatal(err)
	}
	if buf.Len() < 1<<20+1<<19 {
		t.Fatalf("line only %d bytes", buf.Len())
	}
	back, err := ReadJSONL(&buf)
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
	if err := WriteJSONL(f, rows); err != nil {
		t.Fatal(err)
	}
	f.Close()
	orig, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(orig, []byte("\n"))
	const k = 5 // 0-based line/row index: seq 6, skill.invoked_completed
	start := len(bytes.Join(lines[:k], nil))
	line := lines[k]

	check := func(i int, repl byte, read func([]byte) ([]Row, error)) {
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
	viaFile := func(b []byte) ([]Row, error) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return ReadJSONL(f)
	}
	i := bytes.Index(line, []byte(`"timeout"`)) + 1
	check(i, 'T', viaFile)
	// Then every byte of the line, in memory.
	viaMemory := func(b []byte) ([]Row, error) { return ReadJSONL(bytes.NewReader(b)) }
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
	WriteJSONL(&buf, rows)
	back, err := ReadJSONL(&buf)
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
	if err := WriteJSONL(&buf, rows); err != nil {
		t.Fatal(err)
	}
	back, err := ReadJSONL(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rep := Verify(back); rep.OK || len(problemsFor(rep, 2, rows[1].RowID)) == 0 {
		t.Fatalf("%+v", rep.Problems)
	}
}

// TestWriterLinesTakeTheDirectPath: the lines the writer and the export
// make are read without encoding/json (decodeWriterLine), into the same
// rows; lines that differ from that layout (an escape in a string, spacing,
// an unknown key...) go through encoding/json and read as it reads them.
func TestWriterLinesTakeTheDirectPath(t *testing.T) {
	rows := chain(t, append(invocation("a"), invocation(`b "<&>" é`)...)...)
	for _, r := range rows {
		for name, line := range map[string][]byte{
			"journal": bytes.TrimSuffix(appendJournalLine(nil, r), []byte("\n")),
			"export":  bytes.TrimSuffix(appendRowJSON(nil, r), []byte("\n")),
		} {
			slow, err := decodeRowJSON(line)
			if err != nil || !rowsEqual(slow, r) {
				t.Fatalf("%s line %s: encoding/json read %+v, %v", name, line, slow, err)
			}
			// The strings before the payload are ids, kinds, times and
			// hashes: plain ASCII. The payload, whatever it holds, is
			// embedded as it is stored.
			fast, ok := decodeWriterLine(line)
			if !ok {
				t.Fatalf("%s line not read directly: %s", name, line)
			}
			if !rowsEqual(fast, r) {
				t.Fatalf("%s line %s: read %+v, want %+v", name, line, fast, r)
			}
		}
	}
	good := string(bytes.TrimSuffix(appendJournalLine(nil, rows[0]), []byte("\n")))
	for _, variant := range []string{
		strings.Replace(good, `{"seq":`, `{ "seq":`, 1),                     // whitespace
		strings.Replace(good, `"row_id":"`, `"row_id":"\u0030`, 1),          // an escape
		strings.Replace(good, `"kind":`, `"KIND":`, 1),                      // a key encoding/json matches anyway
		strings.Replace(good, `"seq":1,`, `"seq":1.0,`, 1),                  // not an integer
		strings.Replace(good, `"seq":1,`, `"seq":01,`, 1),                   // not JSON
		strings.Replace(good, `"payload":{`, `"payload":[{`, 1) + "]",       // not an object
		strings.TrimSuffix(good, "}") + ` }`,                                // space before the end
		strings.TrimSuffix(good, "}") + `,"x":1}`,                           // an unknown key
		strings.Replace(good, `"ts":"`, `"ts":"`+"\x7f", 1),                 // a byte JSON allows raw
		strings.Replace(good, `"payload":{`, `"payload":{"a":"\u00e9",`, 1), // an escape in the payload: still direct
	} {
		if variant == good {
			t.Fatalf("variant not applied")
		}
		slow, errSlow := decodeRowJSON([]byte(variant))
		got, err := decodeRow([]byte(variant))
		if (err == nil) != (errSlow == nil) || err == nil && !rowsEqual(got, slow) {
			t.Errorf("%s: decodeRow %+v %v, encoding/json %+v %v", variant, got, err, slow, errSlow)
		}
	}
	if _, ok := decodeWriterLine([]byte(strings.Replace(good, `"ts":"`, `"ts":"\u0030`, 1))); ok {
		t.Error("an escaped string was read directly")
	}
}

// FuzzDecodeWriterLine: whatever line decodeWriterLine reads, encoding/json
// reads too, into the same row.
func FuzzDecodeWriterLine(f *testing.F) {
	r := Row{Seq: 7, RowID: "01HZKROW", Kind: KindToolCallStarted, TS: "2026-11-30T00:00:00.000000000Z", PrevHash: zeroHash(1), RowHash: zeroHash(2), Payload: json.RawMessage(`{"a":"b","n":[1,2.5e3,null,true],"o":{}}`)}
	f.Add(bytes.TrimSuffix(appendJournalLine(nil, r), []byte("\n")))
	f.Add([]byte(`{"seq":0,"row_id":"","kind":"","ts":"","prev_hash":"","row_hash":"","payload":{}}`))
	f.Add([]byte(`{"seq":123456789012345678,"row_id":"a","kind":"b","ts":"c","prev_hash":"d","row_hash":"e","payload":{"x":"\u00e9\n"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		fast, ok := decodeWriterLine(line)
		if !ok {
			return
		}
		slow, err := decodeRowJSON(line)
		if err != nil {
			t.Fatalf("read directly, but encoding/json refuses it (%v): %q", err, line)
		}
		if !rowsEqual(fast, slow) {
			t.Fatalf("%q: read %+v, encoding/json %+v", line, fast, slow)
		}
	})
}
