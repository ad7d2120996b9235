package tools

import (
	"context"
	"encoding/base64"
	"errors"
	"strconv"
	"unicode/utf8"

	"cyberos.dev/policy"
	"cyberos.dev/wire"
)

// Results that can be large (Read, Grep, Glob, HttpFetch) are built here, in
// one buffer whose size is known or bounded before it is allocated, and
// never past MaxResultBytes: their encoding is not left to the broker's
// encoder, which builds a whole value before any cap can cut it.

// MaxResultBytes bounds a tool result's JSON: the response cap less room
// for the JSON-RPC envelope around it.
const MaxResultBytes = wire.MaxResponse - 4<<10

// Canonical is a tool result already encoded as RFC 8785 canonical JSON
// (members in sorted order, strings escaped only where RFC 8785 escapes
// them). The broker sends it as it is and hashes its bytes for the audit's
// result_hash, which RFC 8785 canonicalisation would leave unchanged.
type Canonical []byte

// Memory is a call's share of the broker's budget of response bytes in
// flight (per invocation and for the daemon). A tool reserves what it is
// about to hold (a file's bytes, a result's encoding) before allocating it.
type Memory interface {
	// Reserve holds n more bytes until the call's response is written,
	// waiting a short while when the budget is spent and the call holds
	// nothing yet (else it does not wait). Its error is a *policy.Denial
	// (reason memory_budget): the call is refused.
	Reserve(ctx context.Context, n int64) error
	// Release gives back n of the reserved bytes, no longer needed.
	Release(n int64)
}

// reserve holds n bytes of c's budget; without one (tests, tools run
// outside a broker) it holds nothing.
func (c *Call) reserve(ctx context.Context, n int64) error {
	if c == nil || c.Mem == nil || n <= 0 {
		return nil
	}
	return c.Mem.Reserve(ctx, n)
}

// release gives back n bytes reserved with reserve.
func (c *Call) release(n int64) {
	if c != nil && c.Mem != nil && n > 0 {
		c.Mem.Release(n)
	}
}

// budgetDenied reports whether err is a refusal for the memory budget.
func budgetDenied(err error) bool {
	var d *policy.Denial
	return errors.As(err, &d) && d.Reason == policy.ReasonMemoryBudget
}

// account holds a growing share of a call's budget (a result built piece
// by piece), reserving in steps of accountStep so the budget is asked
// seldom. done gives back all but keep.
type account struct {
	c          *Call
	ctx        context.Context
	held, used int64
	keep       int64 // what the result keeps until its response is written
}

const accountStep = 1 << 20

// hold counts n more bytes, reserving another step when they go past what
// is held.
func (a *account) hold(n int64) error {
	if a.used+n > a.held {
		step := max(accountStep, a.used+n-a.held)
		if err := a.c.reserve(a.ctx, step); err != nil {
			return err
		}
		a.held += step
	}
	a.used += n
	return nil
}

// unhold uncounts n bytes counted with hold (a file read and done with);
// they stay reserved for what comes next.
func (a *account) unhold(n int64) { a.used -= n }

// claim reserves n bytes at once, before anything is held.
func (a *account) claim(n int64) error {
	if err := a.c.reserve(a.ctx, n); err != nil {
		return err
	}
	a.held += n
	return nil
}

// done releases what is held beyond keep.
func (a *account) done() { a.c.release(a.held - min(a.keep, a.held)) }

// withClaim runs a call that holds more and more as it goes (run counts it
// with acct.hold). Growing never waits for the budget (a call holding
// bytes must not wait on calls that may be waiting on it), so when the
// budget has no room, run is refused; it is then run once more, from the
// start, with worst (what it can hold at most) claimed beforehand, which
// may wait, as the call then holds nothing.
func withClaim(ctx context.Context, c *Call, worst int64, run func(acct *account) (any, error)) (any, error) {
	acct := &account{c: c, ctx: ctx}
	res, err := run(acct)
	acct.done()
	if !budgetDenied(err) {
		return res, err
	}
	acct = &account{c: c, ctx: ctx}
	if err := acct.claim(worst); err != nil {
		return nil, err
	}
	defer func() { acct.done() }()
	return run(acct)
}

// escapedLen is the length of b as an RFC 8785 JSON string, quotes
// included: '"' and '\\' and the control characters with a short escape
// cost two bytes, other control characters six, an invalid UTF-8 byte
// three (written as U+FFFD), anything else itself ('<' one byte).
func escapedLen[T string | []byte](b T) int {
	n := 2
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t':
				n += 2
			case c < 0x20:
				n += 6
			default:
				n++
			}
			i++
			continue
		}
		r, size := decodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			n += 3
		} else {
			n += size
		}
		i += size
	}
	return n
}

func decodeRune[T string | []byte](b T) (rune, int) {
	switch v := any(b).(type) {
	case string:
		return utf8.DecodeRuneInString(v)
	case []byte:
		return utf8.DecodeRune(v)
	}
	return utf8.RuneError, 1
}

// maxEscapedLen bounds escapedLen of any n bytes.
func maxEscapedLen(n int64) int64 { return 6*n + 2 }

// canonWriter appends RFC 8785 canonical JSON to a buffer allocated once
// with the capacity the caller computed; it never grows past it. The
// caller writes object members in sorted key order.
type canonWriter struct{ buf []byte }

func newCanonWriter(size int) *canonWriter { return &canonWriter{buf: make([]byte, 0, size)} }

// full reports whether n more bytes would go past the buffer's capacity.
func (w *canonWriter) full(n int) bool { return len(w.buf)+n > cap(w.buf) }

// raw appends JSON punctuation or a key written by the caller.
func (w *canonWriter) raw(s string) {
	if !w.full(len(s)) {
		w.buf = append(w.buf, s...)
	}
}

// str appends b as a JSON string (escapedLen bytes).
func str[T string | []byte](w *canonWriter, b T) {
	if w.full(escapedLen(b)) {
		return
	}
	w.buf = append(w.buf, '"')
	start := 0
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			w.buf = append(w.buf, b[start:i]...)
			switch c {
			case '"', '\\':
				w.buf = append(w.buf, '\\', c)
			case '\b':
				w.buf = append(w.buf, '\\', 'b')
			case '\f':
				w.buf = append(w.buf, '\\', 'f')
			case '\n':
				w.buf = append(w.buf, '\\', 'n')
			case '\r':
				w.buf = append(w.buf, '\\', 'r')
			case '\t':
				w.buf = append(w.buf, '\\', 't')
			default:
				const hex = "0123456789abcdef"
				w.buf = append(w.buf, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := decodeRune(b[i:])
		if r == utf8.RuneError && size == 1 {
			w.buf = append(w.buf, b[start:i]...)
			w.buf = append(w.buf, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	w.buf = append(w.buf, b[start:]...)
	w.buf = append(w.buf, '"')
}

// base64 appends b as a JSON string of its standard base64
// (base64.StdEncoding.EncodedLen(len(b)) + 2 bytes).
func (w *canonWriter) base64(b []byte) {
	if w.full(base64.StdEncoding.EncodedLen(len(b)) + 2) {
		return
	}
	w.buf = append(w.buf, '"')
	w.buf = base64.StdEncoding.AppendEncode(w.buf, b)
	w.buf = append(w.buf, '"')
}

// intLen is the length of n in JSON.
func intLen(n int64) int { return len(strconv.AppendInt(nil, n, 10)) }

// int appends n (an integer is its own RFC 8785 form).
func (w *canonWriter) int(n int64) {
	if !w.full(intLen(n)) {
		w.buf = strconv.AppendInt(w.buf, n, 10)
	}
}

// bool appends v.
func (w *canonWriter) bool(v bool) { w.raw(strconv.FormatBool(v)) }

// boolLen is the length of v in JSON.
func boolLen(v bool) int { return len(strconv.FormatBool(v)) }

// done returns the encoding; complete is false when a write did not fit
// (the caller's size was wrong: a bug, answered as a tool failure).
func (w *canonWriter) done() (Canonical, bool) { return w.buf, len(w.buf) == cap(w.buf) }
