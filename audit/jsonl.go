package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// MaxLineBytes bounds one JSON line ReadJSONL accepts. Rows carry hashes,
// not content, so real lines are far shorter.
const MaxLineBytes = 16 << 20

// WriteJSONL writes rows as JSON lines, one Row object per line with the
// keys seq, row_id, kind, ts, prev_hash, row_hash, payload; payload is
// embedded as the exact stored bytes, so ReadJSONL gives back rows that
// verify exactly as the store does. (A stored payload that is not valid JSON
// — a damaged store — is written as a JSON string, so the line stays
// readable and Verify names the row.)
func WriteJSONL(w io.Writer, rows []Row) error {
	bw := bufio.NewWriter(w)
	var line []byte
	for _, r := range rows {
		line = appendRowJSON(line[:0], r)
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func appendRowJSON(b []byte, r Row) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, r.Seq, 10)
	b = appendKey(b, "row_id", r.RowID)
	b = appendKey(b, "kind", string(r.Kind))
	b = appendKey(b, "ts", r.TS)
	b = appendKey(b, "prev_hash", r.PrevHash)
	b = appendKey(b, "row_hash", r.RowHash)
	b = append(b, `,"payload":`...)
	if json.Valid(r.Payload) && !bytes.ContainsAny(r.Payload, "\n\r") {
		b = append(b, r.Payload...)
	} else {
		b = appendString(b, string(r.Payload))
	}
	return append(b, "}\n"...)
}

// AppendJournalLine is appendRowJSON for a row the writer just built: its
// payload is canonical JSON (valid, one line) and its other strings are
// ASCII that needs no escaping, so nothing is checked or escaped twice.
// A string that does need escaping still gets it.
func AppendJournalLine(b []byte, r Row) []byte {
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, r.Seq, 10)
	for _, kv := range [...][2]string{{"row_id", r.RowID}, {"kind", string(r.Kind)}, {"ts", r.TS}, {"prev_hash", r.PrevHash}, {"row_hash", r.RowHash}} {
		b = append(b, ',', '"')
		b = append(b, kv[0]...)
		b = append(b, '"', ':')
		if plainASCII(kv[1]) {
			b = append(b, '"')
			b = append(b, kv[1]...)
			b = append(b, '"')
		} else {
			b = appendString(b, kv[1])
		}
	}
	b = append(b, `,"payload":`...)
	b = append(b, r.Payload...)
	return append(b, "}\n"...)
}

// plainASCII: s is printable ASCII that JSON (and json.Marshal's HTML
// escaping) leaves as is.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if !plainByte[s[i]] {
			return false
		}
	}
	return true
}

// plainByte[c]: c is a byte plainASCII accepts. A table: the writer checks
// some 220 bytes of every row it appends.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c <= 0x7e; c++ {
		t[c] = !strings.ContainsRune(`"\<>&`, rune(c))
	}
	return t
}()

func appendKey(b []byte, key, val string) []byte {
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return appendString(b, val)
}

func appendString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// ReadJSONL reads what WriteJSONL writes. Blank lines are skipped; a line
// that is not one Row object (unknown key, trailing data, bad JSON) is an
// error naming its line number. Payloads keep their exact bytes from the
// line, so Verify sees any change made to the file.
func ReadJSONL(r io.Reader) ([]Row, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	var rows []Row
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		row, err := DecodeRow(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("line %d: longer than %d bytes", n+1, MaxLineBytes)
		}
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return rows, nil
}

// DecodeRow reads one line (no newline) that must be a JSON object with
// exactly the Row's keys: a journal line or an export line.
func DecodeRow(line []byte) (Row, error) {
	if r, ok := decodeWriterLine(line); ok {
		return r, nil
	}
	return decodeRowJSON(line)
}

// decodeRowJSON is DecodeRow through encoding/json, for any line.
func decodeRowJSON(line []byte) (Row, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return Row{}, fmt.Errorf("not a JSON object: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var r Row
	if err := dec.Decode(&r); err != nil {
		return Row{}, err
	}
	for _, k := range []string{"seq", "row_id", "kind", "ts", "prev_hash", "row_hash", "payload"} {
		if _, ok := raw[k]; !ok {
			return Row{}, fmt.Errorf("missing %q", k)
		}
	}
	return r, nil
}

// decodeWriterLine reads a line in the layout AppendJournalLine and
// appendRowJSON write when no string needs escaping:
//
//	{"seq":N,"row_id":"…","kind":"…","ts":"…","prev_hash":"…","row_hash":"…","payload":{…}}
//
// byte for byte: N plain decimal digits, strings of the bytes the writer
// leaves unescaped (plainByte), the payload a valid JSON object with
// nothing around it. Such a line means to encoding/json exactly the Row read here, so DecodeRow
// takes it (ok) without decoding the line twice as JSON, which costs ten
// times as much: every journal line goes through here when the index is
// built from the journal (Open after a crash, the applier) and when Verify
// or `audit verify --file` reads it. Anything else is left to DecodeRow's
// encoding/json path. FuzzDecodeWriterLine holds the two to each other.
func decodeWriterLine(line []byte) (Row, bool) {
	i, ok := skipText(line, 0, `{"seq":`)
	if !ok {
		return Row{}, false
	}
	var seq int64
	digits := i
	for ; i < len(line) && line[i] >= '0' && line[i] <= '9'; i++ {
		if i-digits == 18 { // past 10^18: leave the range checks to encoding/json
			return Row{}, false
		}
		seq = seq*10 + int64(line[i]-'0')
	}
	if i == digits || line[digits] == '0' && i-digits > 1 {
		return Row{}, false
	}
	var spans [5][2]int // row_id, kind, ts, prev_hash, row_hash
	for k, key := range [...]string{`,"row_id":"`, `","kind":"`, `","ts":"`, `","prev_hash":"`, `","row_hash":"`} {
		if i, ok = skipText(line, i, key); !ok {
			return Row{}, false
		}
		start := i
		for i < len(line) && plainByte[line[i]] {
			i++
		}
		spans[k] = [2]int{start, i}
	}
	if i, ok = skipText(line, i, `","payload":`); !ok || len(line)-i < 3 || line[len(line)-1] != '}' {
		return Row{}, false
	}
	payload := line[i : len(line)-1]
	if payload[0] != '{' || payload[len(payload)-1] != '}' || !json.Valid(payload) {
		return Row{}, false
	}
	head := string(line[:i]) // one copy for the five strings
	text := func(k int) string { return head[spans[k][0]:spans[k][1]] }
	return Row{Seq: seq, RowID: text(0), Kind: Kind(text(1)), TS: text(2), PrevHash: text(3), RowHash: text(4), Payload: bytes.Clone(payload)}, true
}

// skipText returns the offset after text if line has it at i.
func skipText(line []byte, i int, text string) (int, bool) {
	if len(line)-i < len(text) || string(line[i:i+len(text)]) != text {
		return 0, false
	}
	return i + len(text), true
}
