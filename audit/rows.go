package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/gowebpki/jcs"

	"cyberos.dev/audit/internal/canonref"
)

// ErrInvalidRow: a Draft that does not satisfy its kind's contract
// (unknown kind, missing or extra payload key, malformed hash or outcome).
// Emit writes nothing for it.
var ErrInvalidRow = errors.New("invalid audit row")

// Kind names what a row records. The set is closed: the store's Emit and
// Verify refuse any other kind.
type Kind string

// The row kinds (DESIGN.md "Audit rows").
const (
	KindInvokedStarted    Kind = "skill.invoked_started"
	KindInvokedCompleted  Kind = "skill.invoked_completed"
	KindToolCallStarted   Kind = "skill.tool_call_started"
	KindToolCallCompleted Kind = "skill.tool_call_completed"
	KindToolDenied        Kind = "skill.tool_denied"
	KindTimeout           Kind = "skill.timeout"
	KindNoConnect         Kind = "skill.no_connect"
	// KindProtocolAbuse records the first broker protocol abuse of one kind
	// in an invocation; the counts go on its completed row.
	KindProtocolAbuse Kind = "skill.protocol_abuse"
	// KindAuditCapReached records that an invocation reached its cap on
	// audit rows and is being ended (outcome killed).
	KindAuditCapReached Kind = "skill.audit_cap_reached"
)

// Kinds of broker protocol abuse (skill.protocol_abuse's abuse_kind, the
// keys of a completed row's protocol_abuse).
const (
	AbuseOversizedFrame = "oversized_frame"      // a length prefix over the request cap
	AbuseNotJSONRPC     = "not_json_rpc"         // bytes that are not framed JSON (an HTTP request, a parse error)
	AbuseInvalidRequest = "invalid_request"      // JSON that is not a JSON-RPC 2.0 request
	AbuseInvalidParams  = "invalid_params"       // params the broker cannot decode
	AbuseUnknownMethod  = "unknown_method"       // a method the broker does not serve
	AbuseRefusedPeer    = "refused_peer"         // a peer of the wrong uid or outside the sandbox
	AbuseTooManyConns   = "too_many_connections" // a connection over the per-invocation cap
	AbuseTruncatedFrame = "truncated_frame"      // a connection dropped or stalled inside a frame
)

// ProtocolAbuseKinds is every abuse kind.
var ProtocolAbuseKinds = []string{AbuseOversizedFrame, AbuseNotJSONRPC, AbuseInvalidRequest, AbuseInvalidParams,
	AbuseUnknownMethod, AbuseRefusedPeer, AbuseTooManyConns, AbuseTruncatedFrame}

// Outcomes. An invocation ends in one of the first seven; a tool call in
// success, error or timeout.
const (
	OutcomeSuccess = "success"
	OutcomeError   = "error"
	OutcomePanic   = "panic"
	OutcomeTimeout = "timeout"
	OutcomeKilled  = "killed"
	// OutcomeCancelled: the caller cancelled the invocation (an MCP client's
	// notifications/cancelled, or the admin API); it was ended through the
	// deadline path.
	OutcomeCancelled = "cancelled"
	// OutcomeLost closes an invocation whose supervisor died before it could
	// record the real outcome (found through auditstore.Store.Unterminated on restart).
	OutcomeLost = "lost"
)

// GenesisHash is the prev_hash of the row with seq 1.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// TimeFormat is the layout of Row.TS: RFC 3339 in UTC with exactly nine
// fractional digits, so timestamps sort as text.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// MaxJSONInt is the largest integer an RFC 8785 canonical form keeps exact
// (numbers are IEEE 754 doubles there).
const MaxJSONInt = 1<<53 - 1

// Common is carried by every payload, so any row can be joined to its
// invocation, request, skill, tenant and trace without another lookup.
// InvocationID and SkillID are required; the others may be empty.
type Common struct {
	InvocationID string `json:"invocation_id"`
	RequestID    string `json:"request_id"`
	SkillID      string `json:"skill_id"`
	TenantID     string `json:"tenant_id"`
	TraceID      string `json:"trace_id"`
}

// Draft is a row before the store numbers it: a kind and its payload. The
// builders below make drafts as pure functions (no I/O, no clock); the store
// validates a draft when it is emitted, assigns seq, row_id, ts, prev_hash and
// row_hash, and stores the payload in RFC 8785 canonical form.
type Draft struct {
	Kind    Kind
	Payload json.RawMessage

	err       error  // why a builder refused its input
	canon     []byte // a builder's own copy of Payload, already validated
	canonKind Kind
}

// Row is one stored audit row; its JSON form is the line `audit export`
// writes. Payload holds the exact stored bytes (canonical JSON).
type Row struct {
	Seq      int64           `json:"seq"`
	RowID    string          `json:"row_id"`
	Kind     Kind            `json:"kind"`
	TS       string          `json:"ts"`
	PrevHash string          `json:"prev_hash"`
	RowHash  string          `json:"row_hash"`
	Payload  json.RawMessage `json:"payload"`
}

// ComputeHash returns what r.RowHash must be: the hex SHA-256 of the RFC 8785
// canonical JSON of every field but row_hash, i.e. of
// {"kind","payload","prev_hash","row_id","seq","ts"}.
func (r Row) ComputeHash() (string, error) {
	env := struct {
		Kind     Kind            `json:"kind"`
		Payload  json.RawMessage `json:"payload"`
		PrevHash string          `json:"prev_hash"`
		RowID    string          `json:"row_id"`
		Seq      int64           `json:"seq"`
		TS       string          `json:"ts"`
	}{r.Kind, r.Payload, r.PrevHash, r.RowID, r.Seq, r.TS}
	if r.Seq < 0 || r.Seq > MaxJSONInt {
		return "", fmt.Errorf("seq %d out of range", r.Seq)
	}
	raw, err := json.Marshal(env)
	if err != nil {
		return "", fmt.Errorf("row %d: %w", r.Seq, err)
	}
	return HashJSON(raw)
}

// writerHash is ComputeHash for a row the writer has just made: its payload
// is canonical already and its other strings (kind, row_id, ts, prev_hash)
// are plain ASCII that RFC 8785 leaves unescaped, so the canonical envelope
// is a concatenation with the keys in their sorted order:
//
//	{"kind":"K","payload":P,"prev_hash":"   (hashPrefix: fixed once the draft is)
//	PREV","row_id":"ID","seq":N,"ts":"TS"}  (hashSuffix: known once the row is chained)
//
// Emit hashes the prefix itself; the writer, chaining, only the suffix.
// TestWriterHashMatchesComputeHash holds this to ComputeHash. ok is false
// for a row the shortcut does not cover, and the caller uses ComputeHash.
func (r Row) writerHash() (_ string, ok bool) {
	if !plainJSON(string(r.Kind)) || !plainJSON(r.PrevHash) || !plainJSON(r.RowID) || !plainJSON(r.TS) || r.Seq < 0 || r.Seq > MaxJSONInt {
		return "", false
	}
	b := AppendHashPrefix(nil, r.Kind, r.Payload)
	b = AppendHashSuffix(b, r.PrevHash, r.RowID, r.Seq, r.TS)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), true
}

// plainJSON: s is printable ASCII without '"' or '\\' (a JSON string of it
// is s quoted).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// AppendHashPrefix appends the start of the text a row's hash covers, up to
// its prev_hash's value (see writerHash): fixed once the draft is, so the
// writer hashes it before the row is chained.
func AppendHashPrefix(b []byte, kind Kind, payload []byte) []byte {
	b = append(b, `{"kind":"`...)
	b = append(b, kind...)
	b = append(b, `","payload":`...)
	b = append(b, payload...)
	return append(b, `,"prev_hash":"`...)
}

// AppendHashSuffix appends the rest of that text, from the prev_hash's value
// on: known once the row is chained.
func AppendHashSuffix[ID string | []byte](b []byte, prev string, rowID ID, seq int64, ts string) []byte {
	b = append(b, prev...)
	b = append(b, `","row_id":"`...)
	b = append(b, rowID...)
	b = append(b, `","seq":`...)
	b = strconv.AppendInt(b, seq, 10)
	b = append(b, `,"ts":"`...)
	b = append(b, ts...)
	return append(b, `"}`...)
}

// InvokedStarted is written before a skill is dispatched; if it cannot be
// written the skill must not run. argsHash covers the args (HashJSON), never
// the args themselves. containment is what the sandbox actually enforces; it
// must encode as a JSON object.
func InvokedStarted(c Common, version, callerPersona, argsHash string, containment any) Draft {
	return InvokedStartedPolicy(c, version, callerPersona, argsHash, "", containment)
}

// InvokedStartedPolicy is InvokedStarted with policy_hash: the HashJSON of
// the effective policy the invocation's enforcer judges by, so an operator
// sees a policy change between two invocations and replay can tell which
// policy judged a call. "" leaves the key out (rows written before it).
func InvokedStartedPolicy(c Common, version, callerPersona, argsHash, policyHash string, containment any) Draft {
	p := newPayload(KindInvokedStarted, c)
	p.str("version", version)
	p.str("caller_persona", callerPersona)
	p.hash("args_hash", argsHash)
	if policyHash != "" {
		p.hash("policy_hash", policyHash)
	}
	p.object("containment", containment)
	return p.draft()
}

// InvokedCompleted closes an invocation on every path. outcome is one of
// success, error, panic, timeout, killed, lost; resultHash is "" unless a
// result was produced; errorMessage "" is stored as null.
func InvokedCompleted(c Common, outcome string, durationMS int64, resultHash string, errorMessage string) Draft {
	return InvokedCompletedAbuse(c, outcome, durationMS, resultHash, errorMessage, nil)
}

// InvokedCompletedAbuse is InvokedCompleted carrying the invocation's
// protocol abuse counts by kind (ProtocolAbuseKinds); with none the row is
// InvokedCompleted's, without the protocol_abuse key.
func InvokedCompletedAbuse(c Common, outcome string, durationMS int64, resultHash string, errorMessage string, abuse map[string]int64) Draft {
	p := newPayload(KindInvokedCompleted, c)
	p.oneOf("outcome", outcome, invocationOutcomes)
	p.count("duration_ms", durationMS)
	p.hash("result_hash", resultHash)
	p.strOrNull("error_message", errorMessage)
	if len(abuse) > 0 {
		p.object("protocol_abuse", abuse)
		if err := abuseCounts(p.vals[p.members[len(p.members)-1].start:]); err != nil {
			p.fail("protocol_abuse", err)
		}
	}
	return p.draft()
}

// ProtocolAbuse records the first broker protocol abuse of kind in an
// invocation; detail is the broker's own words (never the skill's bytes).
func ProtocolAbuse(c Common, kind, detail string) Draft {
	p := newPayload(KindProtocolAbuse, c)
	p.oneOf("abuse_kind", kind, ProtocolAbuseKinds)
	p.str("detail", detail)
	return p.draft()
}

// AuditCapReached records that an invocation reached maxRows audit rows:
// later calls are refused unaudited and the invocation is ended (killed).
// toolCalls is how many tool calls it had made.
func AuditCapReached(c Common, maxRows, toolCalls int64) Draft {
	p := newPayload(KindAuditCapReached, c)
	p.count("max_audit_rows", maxRows)
	p.count("tool_calls", toolCalls)
	return p.draft()
}

// Timeout records a deadline signal sent to the skill: deadlineMS is the
// deadline it enforced, signal the signal sent (e.g. "SIGTERM", "SIGKILL").
func Timeout(c Common, deadlineMS int64, signal string) Draft {
	p := newPayload(KindTimeout, c)
	p.count("deadline_ms", deadlineMS)
	p.required("signal", signal)
	return p.draft()
}

// ToolCallStarted is written after enforcement allowed a call and before the
// tool runs. argsHash covers the call's args object.
func ToolCallStarted(c Common, callID, tool, argsHash string) Draft {
	p := newPayload(KindToolCallStarted, c)
	p.required("call_id", callID)
	p.required("tool_name", tool)
	p.hash("args_hash", argsHash)
	return p.draft()
}

// ToolCallCompleted closes a tool call: outcome success, error or timeout.
func ToolCallCompleted(c Common, callID, tool, outcome string, durationMS int64, resultHash, errorMessage string) Draft {
	p := newPayload(KindToolCallCompleted, c)
	p.required("call_id", callID)
	p.required("tool_name", tool)
	p.oneOf("outcome", outcome, toolCallOutcomes)
	p.count("duration_ms", durationMS)
	p.hash("result_hash", resultHash)
	p.strOrNull("error_message", errorMessage)
	return p.draft()
}

// ToolDenied records an enforcement refusal; reason is the JSON-RPC
// data.reason (tool_not_in_allowed_tools, scope_violation, …).
func ToolDenied(c Common, tool, reason, attemptedArgsHash string) Draft {
	p := newPayload(KindToolDenied, c)
	p.required("tool_name", tool)
	p.required("reason", reason)
	p.hash("attempted_args_hash", attemptedArgsHash)
	return p.draft()
}

// NoConnect records a skill that never connected to its broker socket.
func NoConnect(c Common, waitedMS int64) Draft {
	p := newPayload(KindNoConnect, c)
	p.count("waited_ms", waitedMS)
	return p.draft()
}

// payload is what the builders fill: typed values, checked as they are
// added, encoded straight into RFC 8785 canonical form. That form is small
// for flat objects of strings and integers: members sorted by key (the keys
// are ASCII, so byte order is the RFC's UTF-16 order), integers in decimal,
// strings escaped as RFC 8785 §3.2.2.2 says. It is kept, a second
// canonicaliser beside jcs.Transform, because it pays end to end: going
// through encoding/json and jcs.Transform costs every row of every
// invocation CPU the emitters share, and Emit's latency under load shows it
// (BenchmarkEmitCanon, builders vs library). TestBuildersMatchJCS,
// TestLibraryCanonicalMatchesBuilders and FuzzAppendJCSString hold the two
// to the same bytes.
// The checks mirror kindFields, which validates drafts not made here and
// stored rows; TestBuildersRejectInvalidInput holds the two together.
type payload struct {
	kind    Kind
	members []member
	vals    []byte // every member's canonical value, back to back
	err     error
	arr     [12]member
	valBuf  [512]byte
	generic map[string]any // the members' Go values, only while canonref.Builders is set
}

type member struct {
	key        string
	start, end int // the value is vals[start:end]
}

// payloads recycles builders: a payload holds room for every kind's
// members and typical values, so building a draft allocates just the
// draft's bytes.
var payloads = sync.Pool{New: func() any { return new(payload) }}

// newPayload starts a payload; draft returns it to payloads.
func newPayload(k Kind, c Common) *payload {
	p := payloads.Get().(*payload)
	p.kind, p.err = k, nil
	p.members, p.vals = p.arr[:0], p.valBuf[:0]
	p.generic = nil
	if canonref.Builders != nil {
		p.generic = map[string]any{}
	}
	p.required("invocation_id", c.InvocationID)
	p.str("request_id", c.RequestID)
	p.required("skill_id", c.SkillID)
	p.str("tenant_id", c.TenantID)
	p.str("trace_id", c.TraceID)
	return p
}

// newBarePayload starts the payload of one of bareKinds.
func newBarePayload(k Kind) *payload {
	p := newPayload(k, Common{InvocationID: "-", SkillID: "-"})
	p.members, p.vals = p.arr[:0], p.valBuf[:0]
	if p.generic != nil {
		p.generic = map[string]any{}
	}
	return p
}

// end records the value appended to vals since start as key's.
func (p *payload) end(key string, start int) {
	p.members = append(p.members, member{key, start, len(p.vals)})
}

func (p *payload) fail(key string, err error) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: %s payload %q: %w", ErrInvalidRow, p.kind, key, err)
	}
}

func (p *payload) str(key, v string) {
	if p.generic != nil {
		p.generic[key] = v
		return
	}
	start := len(p.vals)
	p.vals = appendJCSString(p.vals, v)
	p.end(key, start)
}

func (p *payload) required(key, v string) {
	if v == "" {
		p.fail(key, errEmpty)
	}
	p.str(key, v)
}

func (p *payload) strOrNull(key, v string) {
	if v == "" && p.generic != nil {
		p.generic[key] = nil
		return
	}
	if v == "" {
		start := len(p.vals)
		p.vals = append(p.vals, "null"...)
		p.end(key, start)
		return
	}
	p.str(key, v)
}

func (p *payload) hash(key, v string) {
	if v != "" && !IsHash(v) {
		p.fail(key, fmt.Errorf("want \"\" or 64 lowercase hex characters, got %q", v))
	}
	p.str(key, v)
}

func (p *payload) oneOf(key, v string, allowed []string) {
	if !slices.Contains(allowed, v) {
		p.fail(key, fmt.Errorf("%q is not one of %v", v, allowed))
	}
	p.str(key, v)
}

func (p *payload) count(key string, n int64) {
	if n < 0 || n > MaxJSONInt {
		p.fail(key, fmt.Errorf("want an integer in [0, 2^53), got %d", n))
	}
	if p.generic != nil {
		p.generic[key] = n
		return
	}
	start := len(p.vals)
	p.vals = strconv.AppendInt(p.vals, n, 10)
	p.end(key, start)
}

func (p *payload) object(key string, v any) {
	raw, err := json.Marshal(v)
	if err == nil {
		raw, err = jcs.Transform(raw)
	}
	if err == nil {
		err = object(raw)
	}
	if err != nil {
		p.fail(key, err)
	}
	if p.generic != nil {
		p.generic[key] = json.RawMessage(raw)
		return
	}
	start := len(p.vals)
	p.vals = append(p.vals, raw...)
	p.end(key, start)
}

// draft encodes the payload. A refused payload is encoded too (as far as
// it goes) and carries its error, which Emit returns before looking at it.
// Payload and the draft's private canonical copy share one allocation.
func (p *payload) draft() Draft {
	if p.generic != nil {
		return p.libraryDraft()
	}
	// Insertion sort: a dozen members at most, half of them in order.
	m := p.members
	for i := 1; i < len(m); i++ {
		for j := i; j > 0 && m[j].key < m[j-1].key; j-- {
			m[j], m[j-1] = m[j-1], m[j]
		}
	}
	n := 1
	for _, m := range p.members {
		n += len(m.key) + 4 + m.end - m.start // "key": and a comma or the closing brace
	}
	both := make([]byte, 0, 2*n)
	b := append(both, '{')
	for i, m := range p.members {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, m.key...) // keys are plain ASCII identifiers: nothing to escape
		b = append(b, '"', ':')
		b = append(b, p.vals[m.start:m.end]...)
	}
	b = append(b, '}')
	b = b[:len(b):len(b)] // an append to Payload cannot reach canon
	d := Draft{Kind: p.kind, Payload: b, err: p.err}
	if p.err == nil {
		d.canon, d.canonKind = append(both[len(b):len(b)], b...), p.kind
	}
	payloads.Put(p) // d holds nothing of p
	return d
}

// libraryDraft is draft through canonref.Builders.
func (p *payload) libraryDraft() Draft {
	b, err := canonref.Builders(p.generic)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("%w: %s payload: %w", ErrInvalidRow, p.kind, err)
	}
	d := Draft{Kind: p.kind, Payload: b, err: p.err}
	if p.err == nil {
		d.canon, d.canonKind = slices.Clone(b), p.kind
	}
	p.generic = nil
	payloads.Put(p)
	return d
}

// appendJCSString appends s as an RFC 8785 string: '"' and '\\' escaped,
// the controls below U+0020 as \b \t \n \f \r or \u00xx, everything else
// as is. Invalid UTF-8 (an error message cut mid-rune, a skill's stray
// bytes) becomes U+FFFD, one per invalid byte as encoding/json makes it;
// the row is kept.
func appendJCSString(b []byte, s string) []byte {
	const digits = "0123456789abcdef"
	b = append(b, '"')
	// Most strings (ids, hashes, names) are printable ASCII with nothing to
	// escape: copy that prefix as is.
	i := 0
	for i < len(s) {
		if c := s[i]; c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' {
			break
		}
		i++
	}
	b = append(b, s[:i]...)
	if i == len(s) {
		return append(b, '"')
	}
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c >= utf8.RuneSelf:
			// Each byte that does not start a valid rune becomes one
			// U+FFFD, as encoding/json makes it.
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = append(b, "\uFFFD"...)
			} else {
				b = append(b, s[i:i+n]...)
			}
			i += n - 1
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20:
			b = append(b, c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', digits[c>>4], digits[c&0xf])
		}
	}
	return append(b, '"')
}

var errEmpty = errors.New("must not be empty")

// A check validates one payload value (canonical JSON text).
type check func(v json.RawMessage) error

type field struct {
	name  string
	check check
}

// legacyKeys are payload keys renamed since rows were first written: a
// payload may hold the old name instead of the new one, never both, and
// Verify and the readers accept either (spec §8 names the tool tool_name).
var legacyKeys = map[string]string{"tool_name": "tool"}

// optionalKeys may be absent: rows written before the key existed lack it.
var optionalKeys = map[string]bool{"policy_hash": true}

var commonFields = []field{
	{"invocation_id", nonEmptyString},
	{"request_id", anyString},
	{"skill_id", nonEmptyString},
	{"tenant_id", anyString},
	{"trace_id", anyString},
}

var invocationOutcomes = []string{OutcomeSuccess, OutcomeError, OutcomePanic, OutcomeTimeout, OutcomeKilled, OutcomeCancelled, OutcomeLost}
var toolCallOutcomes = []string{OutcomeSuccess, OutcomeError, OutcomeTimeout}

// InvocationOutcomes returns every outcome an invoked_completed row may carry.
func InvocationOutcomes() []string { return slices.Clone(invocationOutcomes) }

// ToolCallOutcomes returns every outcome a tool_call_completed row may carry.
func ToolCallOutcomes() []string { return slices.Clone(toolCallOutcomes) }

// kindFields lists, per kind, the payload keys besides the common ones. A
// payload must have exactly these keys: an extra key is refused, so raw args
// or results cannot ride along into the audit trail.
var kindFields = map[Kind][]field{
	KindInvokedStarted: {
		{"version", anyString},
		{"caller_persona", anyString},
		{"args_hash", hexDigest},
		{"policy_hash", hexDigest},
		{"containment", object},
	},
	KindInvokedCompleted: {
		{"outcome", oneOf(invocationOutcomes)},
		{"duration_ms", nonNegativeInt},
		{"result_hash", hexDigest},
		{"error_message", stringOrNull},
	},
	KindTimeout: {
		{"deadline_ms", nonNegativeInt},
		{"signal", nonEmptyString},
	},
	KindToolCallStarted: {
		{"call_id", nonEmptyString},
		{"tool_name", nonEmptyString},
		{"args_hash", hexDigest},
	},
	KindToolCallCompleted: {
		{"call_id", nonEmptyString},
		{"tool_name", nonEmptyString},
		{"outcome", oneOf(toolCallOutcomes)},
		{"duration_ms", nonNegativeInt},
		{"result_hash", hexDigest},
		{"error_message", stringOrNull},
	},
	KindToolDenied: {
		{"tool_name", nonEmptyString},
		{"reason", nonEmptyString},
		{"attempted_args_hash", hexDigest},
	},
	KindNoConnect: {
		{"waited_ms", nonNegativeInt},
	},
	KindProtocolAbuse: {
		{"abuse_kind", oneOf(ProtocolAbuseKinds)},
		{"detail", anyString},
	},
	KindAuditCapReached: {
		{"max_audit_rows", nonNegativeInt},
		{"tool_calls", nonNegativeInt},
	},
	KindCheckpoint: {
		{"head_seq", nonNegativeInt},
		{"head_row_hash", hexOfLen(64)},
		{"public_key", hexOfLen(64)},
		{"signature", hexOfLen(128)},
	},
}

// bareKinds belong to no invocation: their payloads carry none of Common's
// keys.
var bareKinds = map[Kind]bool{KindCheckpoint: true}

// optionalFields lists, per kind, keys a payload may carry besides
// kindFields' (rows written before them lack them).
var optionalFields = map[Kind][]field{
	KindInvokedCompleted: {
		{"protocol_abuse", abuseCounts},
	},
	KindToolCallStarted:   mcpFields,
	KindToolCallCompleted: mcpFields,
	KindToolDenied:        mcpFields,
}

// Valid reports whether k is one of the row kinds.
func (k Kind) Valid() bool {
	_, ok := kindFields[k]
	return ok
}

// Validate reports why d is not a valid row (the error wraps ErrInvalidRow),
// or nil.
func (d Draft) Validate() error {
	_, err := d.Canonical()
	return err
}

// Canonical validates d and returns its payload in RFC 8785 canonical form,
// the bytes the store keeps and hashes.
func (d Draft) Canonical() ([]byte, error) {
	if d.err != nil {
		return nil, d.err
	}
	// A builder's draft, untouched since: checked and canonical already.
	if d.canon != nil && d.Kind == d.canonKind && bytes.Equal(d.Payload, d.canon) {
		return d.canon, nil
	}
	canon, err := jcs.Transform(d.Payload)
	if err != nil {
		return nil, fmt.Errorf("%w: %s payload: %w", ErrInvalidRow, d.Kind, err)
	}
	if err := validatePayload(d.Kind, canon); err != nil {
		return nil, err
	}
	return canon, nil
}

// validatePayload checks a canonical payload against its kind's keys.
func validatePayload(k Kind, payload []byte) error {
	fields, ok := kindFields[k]
	if !ok {
		return fmt.Errorf("%w: unknown kind %q", ErrInvalidRow, k)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(payload, &m); err != nil || m == nil {
		return fmt.Errorf("%w: %s payload is not a JSON object", ErrInvalidRow, k)
	}
	seen := 0
	for _, f := range optionalFields[k] {
		if v, ok := m[f.name]; ok {
			if err := f.check(v); err != nil {
				return fmt.Errorf("%w: %s payload %q: %w", ErrInvalidRow, k, f.name, err)
			}
			seen++
		}
	}
	lists := [][]field{commonFields, fields}
	if bareKinds[k] {
		lists = lists[1:]
	}
	for _, list := range lists {
		for _, f := range list {
			key := f.name
			v, ok := m[key]
			if old := legacyKeys[key]; !ok && old != "" {
				key = old
				v, ok = m[key]
			}
			switch {
			case !ok && optionalKeys[f.name]:
				continue
			case !ok:
				return fmt.Errorf("%w: %s payload lacks %q", ErrInvalidRow, k, f.name)
			}
			if err := f.check(v); err != nil {
				return fmt.Errorf("%w: %s payload %q: %w", ErrInvalidRow, k, key, err)
			}
			seen++
		}
	}
	if len(m) != seen {
		for key := range m {
			if !(hasField(key, m, commonFields) && !bareKinds[k]) && !hasField(key, m, fields) && !hasField(key, m, optionalFields[k]) {
				return fmt.Errorf("%w: %s payload has unexpected key %q", ErrInvalidRow, k, key)
			}
		}
	}
	return nil
}

// hasField reports whether key of payload m is one of fields: its name, or
// its legacy name when the payload does not also hold the name.
func hasField(key string, m map[string]json.RawMessage, fields []field) bool {
	for _, f := range fields {
		if f.name == key {
			return true
		}
		if legacyKeys[f.name] == key {
			_, both := m[f.name]
			return !both
		}
	}
	return false
}

func str(v json.RawMessage) (string, error) {
	var s string
	if len(v) == 0 || v[0] != '"' {
		return "", fmt.Errorf("want a string, got %s", truncate(v))
	}
	if err := json.Unmarshal(v, &s); err != nil {
		return "", err
	}
	return s, nil
}

func anyString(v json.RawMessage) error {
	_, err := str(v)
	return err
}

func nonEmptyString(v json.RawMessage) error {
	s, err := str(v)
	if err == nil && s == "" {
		err = errEmpty
	}
	return err
}

func stringOrNull(v json.RawMessage) error {
	if string(v) == "null" {
		return nil
	}
	return anyString(v)
}

// hexOfLen accepts exactly n lowercase hex characters.
func hexOfLen(n int) func(json.RawMessage) error {
	return func(v json.RawMessage) error {
		s, err := str(v)
		if err != nil {
			return err
		}
		if len(s) != n || strings.Trim(s, "0123456789abcdef") != "" {
			return fmt.Errorf("want %d lowercase hex characters, got %q", n, truncate([]byte(s)))
		}
		return nil
	}
}

// hash accepts "" (nothing to hash) or 64 lowercase hex characters.
func hexDigest(v json.RawMessage) error {
	s, err := str(v)
	if err != nil {
		return err
	}
	if s != "" && !IsHash(s) {
		return fmt.Errorf("want \"\" or 64 lowercase hex characters, got %q", s)
	}
	return nil
}

// IsHash reports whether s is a hash as rows carry them: 64 lowercase hex
// digits.
func IsHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func oneOf(allowed []string) check {
	return func(v json.RawMessage) error {
		s, err := str(v)
		if err != nil {
			return err
		}
		for _, a := range allowed {
			if s == a {
				return nil
			}
		}
		return fmt.Errorf("%q is not one of %v", s, allowed)
	}
}

func nonNegativeInt(v json.RawMessage) error {
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 || n > MaxJSONInt {
		return fmt.Errorf("want an integer in [0, 2^53), got %s", truncate(v))
	}
	return nil
}

// abuseCounts accepts a non-empty object of abuse kinds to positive counts.
func abuseCounts(v json.RawMessage) error {
	var m map[string]json.RawMessage
	if err := object(v); err != nil {
		return err
	}
	if err := json.Unmarshal(v, &m); err != nil || len(m) == 0 {
		return fmt.Errorf("want a non-empty object of counts, got %s", truncate(v))
	}
	for k, n := range m {
		if !slices.Contains(ProtocolAbuseKinds, k) {
			return fmt.Errorf("%q is not one of %v", k, ProtocolAbuseKinds)
		}
		if err := nonNegativeInt(n); err != nil || string(n) == "0" {
			return fmt.Errorf("%s: want a positive integer, got %s", k, truncate(n))
		}
	}
	return nil
}

func object(v json.RawMessage) error {
	if len(v) == 0 || v[0] != '{' {
		return fmt.Errorf("want a JSON object, got %s", truncate(v))
	}
	return nil
}

func truncate(v []byte) string {
	const max = 40
	v = bytes.TrimSpace(v)
	if len(v) > max {
		return string(v[:max]) + "…"
	}
	return string(v)
}
