package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestWriterLinesTakeTheDirectPath: the lines the writer and the export
// make are read without encoding/json (decodeWriterLine), into the same
// rows; lines that differ from that layout (an escape in a string, spacing,
// an unknown key...) go through encoding/json and read as it reads them.
func TestWriterLinesTakeTheDirectPath(t *testing.T) {
	rows := chain(t, append(invocation("a"), invocation(`b "<&>" é`)...)...)
	for _, r := range rows {
		for name, line := range map[string][]byte{
			"journal": bytes.TrimSuffix(AppendJournalLine(nil, r), []byte("\n")),
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
	good := string(bytes.TrimSuffix(AppendJournalLine(nil, rows[0]), []byte("\n")))
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
		got, err := DecodeRow([]byte(variant))
		if (err == nil) != (errSlow == nil) || err == nil && !rowsEqual(got, slow) {
			t.Errorf("%s: DecodeRow %+v %v, encoding/json %+v %v", variant, got, err, slow, errSlow)
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
	f.Add(bytes.TrimSuffix(AppendJournalLine(nil, r), []byte("\n")))
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

// TestJournalLineIsExportLine: the writer's fast line encoder writes what
// the export encoder writes, escaping included.
func TestJournalLineIsExportLine(t *testing.T) {
	rows := chain(t, invocation("inv")...)
	odd := rows[0]
	odd.TS, odd.RowID = "<a&b>\"\\\n\u00e9", "x\x01y"
	for _, r := range append(rows, odd) {
		if got, want := AppendJournalLine(nil, r), appendRowJSON(nil, r); !bytes.Equal(got, want) {
			t.Errorf("seq %d:\n got %s\nwant %s", r.Seq, got, want)
		}
	}
}

// BenchmarkDecodeRow reads one journal line of a tool call's row as the
// index (Open after a crash, the applier) and Verify read every line:
// DecodeRow, which takes the writer's layout directly (decodeWriterLine),
// against encoding/json alone (decodeRowJSON), same run.
func BenchmarkDecodeRow(b *testing.B) {
	r := chain(b, ToolCallStarted(common("01HZKBENCH000001"), "1", "MemoryRead", zeroHash(1)))[0]
	line := bytes.TrimSuffix(AppendJournalLine(nil, r), []byte("\n"))
	for _, c := range []struct {
		name   string
		decode func([]byte) (Row, error)
	}{{"decodeRow", DecodeRow}, {"encoding-json", decodeRowJSON}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.decode(line); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
