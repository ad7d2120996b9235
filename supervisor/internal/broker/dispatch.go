package broker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/telemetry"
)

// Decided is one decided tool.call as operators see it live (tail) and
// reconstructed from audit rows (replay): the same object either way.
type Decided struct {
	TS           string `json:"ts"` // audit.TimeFormat, UTC
	InvocationID string `json:"invocation_id"`
	Tool         string `json:"tool"`
	// Outcome is success, error, timeout or denied.
	Outcome    string `json:"outcome"`
	DurationMS int64  `json:"duration_ms"`
	ArgsHash   string `json:"args_hash"`
	// Reason is the denial's data.reason; empty unless Outcome is denied.
	Reason string `json:"reason,omitempty"`
	// PolicyHash is the policy_hash of the invocation's
	// skill.invoked_started row: which policy judged the call.
	PolicyHash string `json:"policy_hash,omitempty"`
}

// Methods.
const (
	MethodToolCall     = "tool.call"
	MethodToolList     = "tool.list"
	MethodBrokerStatus = "broker.status"
)

// maxToolName bounds the tool name a skill may send: it lands in an audit
// row even when it names no tool.
const maxToolName = 128

// metricUnknownTool is the tool label of calls naming no registered tool:
// label values never come from the skill.
const metricUnknownTool = "unknown"

// Auditor takes audit rows and returns once they are durable (auditstore.Store).
type Auditor interface {
	Emit(ctx context.Context, d audit.Draft) (audit.Row, error)
}

// dispatcher answers request bodies for one invocation. It holds no
// connection state, so any number of connections share it.
type dispatcher struct {
	common      audit.Common
	env         *tools.Env
	tools       map[policy.Tool]tools.Tool
	sources     []tools.Source
	audit       Auditor
	metrics     *telemetry.Metrics
	log         *slog.Logger
	traceparent string // the invocation's, for calls that bring none
	// tc is traceparent parsed (parsed on each call when zero).
	tc      telemetry.TraceContext
	limiter *window
	started time.Time
	now     func() time.Time

	onDecided  func(Decided)
	tracer     trace.Tracer
	spanParent context.Context

	toolCalls atomic.Int64 // decided tool.calls, denied included
	denied    atomic.Int64
	pending   sync.WaitGroup // completed rows queued, not yet known durable

	// invMem and daemonMem are the budgets of response bytes in flight
	// (budget.go); daemonMem is nil without a daemon-wide one.
	invMem, daemonMem *Budget

	rows       rowBudget
	capOnce    sync.Once
	capped     atomic.Bool
	onAuditCap func()

	onAbuse     func(kind string)
	abuseMu     sync.Mutex
	abuseCounts map[string]int64

	warnMu sync.Mutex
	warned map[string]int64 // per-connection warning lines by message
}

// reservedRows are the broker's rows outside the tool rows' share of the
// cap: one skill.protocol_abuse per kind, skill.no_connect and
// skill.audit_cap_reached.
var reservedRows = 2 + len(audit.ProtocolAbuseKinds)

// rowBudget counts the tool rows of an invocation against its share of
// the audit row cap.
type rowBudget struct {
	max   int64 // the invocation's cap as configured; 0: unbounded
	limit int64 // the tool rows' share of it
	used  atomic.Int64
}

// toolRowBudget is the tool rows' share of a cap of max rows, others of
// which are written outside the broker.
func toolRowBudget(max, others int) int64 {
	if max <= 0 {
		return 0
	}
	return int64(max - others - reservedRows)
}

// take reserves n rows; false when they would go over the cap.
func (r *rowBudget) take(n int64) bool {
	if r.max <= 0 {
		return true
	}
	for {
		u := r.used.Load()
		if u+n > r.limit {
			return false
		}
		if r.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

// give returns n reserved rows that were not written.
func (r *rowBudget) give(n int64) {
	if r.max > 0 {
		r.used.Add(-n)
	}
}

// capReached records, once, that the invocation reached its audit row cap:
// the skill.audit_cap_reached row, then OnAuditCap. Later calls are refused.
func (d *dispatcher) capReached() {
	d.capOnce.Do(func() {
		d.capped.Store(true)
		d.log.Warn("broker: audit row cap reached; further calls refused, the invocation is ended", "max_audit_rows", d.rows.max)
		if _, err := d.audit.Emit(context.Background(), audit.AuditCapReached(d.common, d.rows.max, d.toolCalls.Load())); err != nil {
			d.log.Error("broker: audit_cap_reached row not written", "err", err)
		}
		if d.onAuditCap != nil {
			d.onAuditCap()
		}
	})
}

// abuse counts one protocol abuse; the first of its kind in the invocation
// is recorded in a skill.protocol_abuse row (reserved in the row budget).
func (d *dispatcher) abuse(kind, detail string) {
	d.abuseMu.Lock()
	if d.abuseCounts == nil {
		d.abuseCounts = map[string]int64{}
	}
	d.abuseCounts[kind]++
	first := d.abuseCounts[kind] == 1
	d.abuseMu.Unlock()
	if !first {
		return
	}
	if _, err := d.audit.Emit(context.Background(), audit.ProtocolAbuse(d.common, kind, detail)); err != nil {
		d.log.Error("broker: protocol_abuse row not written", "abuse_kind", kind, "err", err)
	}
	if d.onAbuse != nil {
		d.onAbuse(kind)
	}
}

// protocolAbuse returns the abuse counts by kind, nil when none.
func (d *dispatcher) protocolAbuse() map[string]int64 {
	d.abuseMu.Lock()
	defer d.abuseMu.Unlock()
	if len(d.abuseCounts) == 0 {
		return nil
	}
	out := make(map[string]int64, len(d.abuseCounts))
	for k, n := range d.abuseCounts {
		out[k] = n
	}
	return out
}

// warn logs a warning a skill can repeat at will (one per connection or
// frame): the first logBurst lines of each message, then only a count,
// summarised by logSuppressed when the broker closes.
func (d *dispatcher) warn(msg string, args ...any) {
	d.warnMu.Lock()
	if d.warned == nil {
		d.warned = map[string]int64{}
	}
	d.warned[msg]++
	n := d.warned[msg]
	d.warnMu.Unlock()
	switch {
	case n < logBurst:
		d.log.Warn(msg, args...)
	case n == logBurst:
		d.log.Warn(msg, append(args, "further", "counted, summarised when the broker closes")...)
	}
}

// logSuppressed logs one line per warning that went over its burst.
func (d *dispatcher) logSuppressed() {
	d.warnMu.Lock()
	defer d.warnMu.Unlock()
	for msg, n := range d.warned {
		if n > logBurst {
			d.log.Warn("broker: repeated warning suppressed", "message", msg, "suppressed", n-logBurst, "total", n)
		}
	}
}

// Stats is the broker.status result.
type Stats struct {
	InvocationID string `json:"invocation_id"`
	SkillID      string `json:"skill_id"`
	ToolCalls    int64  `json:"tool_calls"`
	Denied       int64  `json:"denied"`
	UptimeMS     int64  `json:"uptime_ms"`
}

func (d *dispatcher) stats() Stats {
	return Stats{
		InvocationID: d.common.InvocationID,
		SkillID:      d.common.SkillID,
		ToolCalls:    d.toolCalls.Load(),
		Denied:       d.denied.Load(),
		UptimeMS:     d.now().Sub(d.started).Milliseconds(),
	}
}

// handle answers one frame body: a response, a batch response, or nil when
// nothing is to be sent (a notification, a batch of notifications). The
// calls hold nothing of the budgets once it returns.
func (d *dispatcher) handle(ctx context.Context, body []byte) []byte {
	f := d.frameMem()
	defer f.release()
	parts := d.respond(ctx, body, f)
	if parts == nil {
		return nil
	}
	return bytes.Join(parts, nil)
}

// frameMem is the budget holding of one response frame.
func (d *dispatcher) frameMem() *frameMem { return &frameMem{inv: d.invMem, daemon: d.daemonMem} }

// respond answers one frame body as the parts of the response frame's body
// (written with one writev; a large result is never copied into an
// envelope), or nil when nothing is to be sent. The bytes its calls hold
// stay in f until the caller, having written the parts, releases it.
func (d *dispatcher) respond(ctx context.Context, body []byte, f *frameMem) [][]byte {
	if tooDeep(body, MaxDepth) {
		d.abuse(audit.AbuseInvalidRequest, "JSON nested too deep")
		return d.encodeParts(d.errorResponse(nullID, errTooDeep))
	}
	if !json.Valid(body) {
		d.abuse(audit.AbuseNotJSONRPC, "a frame that is not JSON")
		return d.encodeParts(d.errorResponse(nullID, errParse))
	}
	switch jsonKind(body) {
	case '{':
		resp := d.one(ctx, body, f)
		if resp == nil {
			return nil
		}
		return d.encodeCapped([]*response{resp}, false, resp.ID)
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(body, &items); err != nil {
			d.abuse(audit.AbuseNotJSONRPC, "a batch that is not JSON")
			return d.encodeParts(d.errorResponse(nullID, errParse))
		}
		switch {
		case len(items) == 0:
			d.abuse(audit.AbuseInvalidRequest, "an empty batch")
			return d.encodeParts(d.errorResponse(nullID, errEmptyBatch))
		case len(items) > MaxBatch:
			d.abuse(audit.AbuseInvalidRequest, fmt.Sprintf("a batch over %d entries", MaxBatch))
			return d.encodeParts(d.errorResponse(nullID, errBatchTooLarge))
		}
		var out []*response
		for _, item := range items {
			if resp := d.one(ctx, item, f); resp != nil {
				out = append(out, resp)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return d.encodeCapped(out, true, nullID)
	default:
		d.abuse(audit.AbuseInvalidRequest, "a frame that is not an object or a batch")
		return d.encodeParts(d.errorResponse(nullID, fmt.Errorf("%w: not an object or a batch", errInvalidRequest)))
	}
}

// one answers one request object (or a batch entry, which may be anything).
func (d *dispatcher) one(ctx context.Context, raw json.RawMessage, f *frameMem) *response {
	req, err := decodeRequest(raw)
	if err != nil {
		d.abuse(audit.AbuseInvalidRequest, "not a JSON-RPC 2.0 request")
		return d.errorResponse(req.id, err)
	}
	var result any
	switch req.method {
	case MethodToolCall:
		result, err = d.toolCall(ctx, req, f)
	case MethodToolList:
		result, err = d.toolList(ctx, req)
	case MethodBrokerStatus:
		result, err = d.status(req)
	default:
		err = errMethodNotFound
		d.abuse(audit.AbuseUnknownMethod, "a method the broker does not serve")
	}
	var pe *paramsError
	if errors.As(err, &pe) {
		d.abuse(audit.AbuseInvalidParams, "params the broker cannot decode")
	}
	if req.notification() {
		return nil
	}
	if err != nil {
		return d.errorResponse(req.id, err)
	}
	raw, _, err = marshalResult(result)
	if err != nil {
		return d.errorResponse(req.id, err)
	}
	return &response{JSONRPC: "2.0", ID: req.id, Result: raw}
}

// marshalResult encodes a result; canonical says it is RFC 8785 canonical
// JSON already (a tools.Canonical, passed on as it is). A result over the
// response cap returns errResponseTooLarge, with the encoding (for its
// size).
func marshalResult(v any) (raw json.RawMessage, canonical bool, err error) {
	switch r := v.(type) {
	case tools.Canonical:
		raw, canonical = json.RawMessage(r), true
	case json.RawMessage:
		if !json.Valid(r) {
			return nil, false, fmt.Errorf("%w: result is not JSON", tools.ErrFailed)
		}
		raw = r
	default:
		if raw, err = encodeJSON(v); err != nil {
			// Flattened: the call fails as ErrFailed whatever the encoder's
			// error wraps (errorObject must not classify it by that).
			return nil, false, fmt.Errorf("%w: result does not encode: %v", tools.ErrFailed, err) //nolint:errorlint // see above
		}
	}
	if len(raw) > MaxResponse {
		return raw, canonical, errResponseTooLarge
	}
	return raw, canonical, nil
}

// encodeJSON is json.Marshal without HTML escaping: '<', '>' and '&' are
// one byte each, not six.
func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// hashResult is the audit's result_hash of raw: SHA-256 over its RFC 8785
// form, which a canonical encoding already is.
func hashResult(raw []byte, canonical bool) (string, error) {
	if canonical {
		sum := sha256.Sum256(raw)
		return hex.EncodeToString(sum[:]), nil
	}
	return audit.HashJSON(raw)
}

func (d *dispatcher) errorResponse(id json.RawMessage, err error) *response {
	e := errorObject(err)
	if e.Data != nil {
		e.Data.SkillID = d.common.SkillID
	}
	if id == nil {
		id = nullID
	}
	return &response{JSONRPC: "2.0", ID: id, Error: e}
}

// encode marshals a response or batch. What the broker builds always
// encodes; a failure here is a bug, answered as an internal error.
func (d *dispatcher) encode(v any) []byte {
	b, err := encodeJSON(v)
	if err != nil {
		d.log.Error("broker: response does not encode", "err", err)
		return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"internal error"}}`)
	}
	return b
}

// encodeParts is encode as a frame's parts.
func (d *dispatcher) encodeParts(v any) [][]byte { return [][]byte{d.encode(v)} }

// encodeCapped encodes a response (batch false, one entry) or a batch as a
// frame's parts and applies the response cap: a result is a part of its
// own, between its envelope's, never copied; an encoding over MaxResponse
// is cut to a response_too_large error for id (a batch is cut as a whole,
// with a null id), logged and counted.
func (d *dispatcher) encodeCapped(rs []*response, batch bool, id json.RawMessage) [][]byte {
	var parts [][]byte
	if batch {
		parts = append(parts, []byte("["))
	}
	for i, r := range rs {
		if i > 0 {
			parts = append(parts, []byte(","))
		}
		if r.Result == nil {
			parts = append(parts, d.encode(r))
			continue
		}
		// The envelope of encoding/json's field order, around the result.
		rid := r.ID
		if rid == nil {
			rid = nullID
		}
		head := append(append([]byte(`{"jsonrpc":"2.0","id":`), rid...), `,"result":`...)
		parts = append(parts, head, r.Result, []byte("}"))
	}
	if batch {
		parts = append(parts, []byte("]"))
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n > MaxResponse {
		d.truncated(d.log, n)
		b := d.encode(d.errorResponse(id, errResponseTooLarge))
		if len(b) > MaxResponse { // only an absurd id could do this
			b = d.encode(d.errorResponse(nullID, errResponseTooLarge))
		}
		return [][]byte{b}
	}
	return parts
}

// noParams accepts absent, {} or [] params.
func noParams(req *request) error {
	switch string(req.params) {
	case "", "{}", "[]":
		return nil
	}
	var obj map[string]json.RawMessage
	var arr []json.RawMessage
	if json.Unmarshal(req.params, &obj) == nil && len(obj) == 0 || json.Unmarshal(req.params, &arr) == nil && len(arr) == 0 {
		return nil
	}
	return invalidParams("%s takes no params", req.method)
}

// ToolInfo is one entry of the tool.list result. InputSchema is set for
// tools that carry one (MCP tools).
type ToolInfo struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
}

func (d *dispatcher) toolList(ctx context.Context, req *request) (any, error) {
	if err := noParams(req); err != nil {
		return nil, err
	}
	list := []ToolInfo{}
	for _, name := range d.env.Enforcer.Tools() {
		if t, ok := d.tools[name]; ok {
			list = append(list, ToolInfo{Name: string(name), Description: t.Description()})
		}
	}
	for _, src := range d.sources {
		for _, t := range src.Tools(ctx, d.env.Enforcer) {
			info := ToolInfo{Name: string(t.Name()), Description: t.Description()}
			if sc, ok := t.(tools.Schemed); ok {
				info.InputSchema = sc.InputSchema()
			}
			list = append(list, info)
		}
	}
	return struct {
		Tools []ToolInfo `json:"tools"`
	}{list}, nil
}

func (d *dispatcher) status(req *request) (any, error) {
	if err := noParams(req); err != nil {
		return nil, err
	}
	return d.stats(), nil
}

// window is the per-invocation rate limit: at most limit admitted calls in
// any 60 s. It keeps the admission times of the last minute, so its memory
// is bounded by the calls actually made.
type window struct {
	mu    sync.Mutex
	limit int // 0: unbounded
	times []time.Time
}

func (w *window) allow(now time.Time) bool {
	if w == nil || w.limit <= 0 {
		return true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	cut := 0
	for cut < len(w.times) && now.Sub(w.times[cut]) >= time.Minute {
		cut++
	}
	w.times = w.times[cut:]
	if len(w.times) >= w.limit {
		return false
	}
	w.times = append(w.times, now)
	return true
}
