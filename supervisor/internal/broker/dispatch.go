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
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/telemetry"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
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

// callObs is what one tool.call tells operators when it is decided: the
// Decided event and the skill.broker.tool_call span.
type callObs struct {
	tool       string
	outcome    string
	reason     string
	argsHash   string
	argsSize   int
	resultSize int
	start      time.Time
	durMS      int64
	span       trace.Span
	// unaudited: refused for the audit cap, with no row; operators' live
	// views (built to match the rows) do not see it.
	unaudited bool
}

// finish ends the call's span and publishes its Decided event.
func (d *dispatcher) finish(o *callObs) {
	if o.outcome == "" { // a path that returned without deciding (cannot happen)
		o.outcome = telemetry.ToolCallError
	}
	o.span.SetAttributes(telemetry.Attrs(
		attribute.String("skill_id", d.common.SkillID),
		attribute.String("tool_name", o.tool),
		attribute.String("outcome", o.outcome),
		attribute.Int64("duration_ms", o.durMS),
		attribute.Int("args_size_bytes", o.argsSize),
		attribute.Int("result_size_bytes", o.resultSize),
	)...)
	if o.reason != "" {
		o.span.SetAttributes(telemetry.Attrs(attribute.String("reason", o.reason))...)
	}
	if o.outcome == telemetry.ToolCallDenied && o.reason != "" && d.metrics != nil {
		d.metrics.ToolDenials.WithLabelValues(d.common.SkillID, o.reason).Inc()
	}
	if o.outcome != telemetry.ToolCallSuccess {
		o.span.SetStatus(codes.Error, o.outcome)
	}
	o.span.End()
	if d.onDecided != nil && !o.unaudited {
		d.onDecided(Decided{
			TS: d.now().UTC().Format(audit.TimeFormat), InvocationID: d.common.InvocationID,
			Tool: o.tool, Outcome: o.outcome, DurationMS: o.durMS, ArgsHash: o.argsHash, Reason: o.reason,
		})
	}
}

// spanParentFor is the context a call's span starts from: the skill's own
// traceparent when it sent one, else the invocation's span (or, without
// one, the invocation's traceparent as a remote parent).
func (d *dispatcher) spanParentFor(ctx context.Context, own bool, tc telemetry.TraceContext) context.Context {
	if !own && d.spanParent != nil {
		return trace.ContextWithSpan(ctx, trace.SpanFromContext(d.spanParent))
	}
	return telemetry.ContextWithRemoteParent(ctx, tc)
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
	limiter     *window
	started     time.Time
	now         func() time.Time

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
			return nil, false, fmt.Errorf("%w: result does not encode: %v", tools.ErrFailed, err)
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

// callParams are tool.call's params after decoding.
type callParams struct {
	tool        string
	args        json.RawMessage // a JSON object
	traceparent string          // "" when neither params nor _meta has one
}

// decodeCallParams reads {tool, args?, traceparent?, _meta?: {traceparent?}}
// strictly. Absent or null args are {}. A traceparent in params wins over
// _meta's (MCP carries it there).
func decodeCallParams(raw json.RawMessage) (*callParams, error) {
	if jsonKind(raw) != '{' {
		return nil, invalidParams("params must be an object")
	}
	members, err := objectMembers(raw)
	if err != nil {
		return nil, invalidParams("params: duplicate or malformed member")
	}
	p := &callParams{args: json.RawMessage("{}")}
	var haveTool bool
	var metaTP string
	for _, m := range members {
		switch m.key {
		case "tool":
			if jsonKind(m.val) != '"' || json.Unmarshal(m.val, &p.tool) != nil {
				return nil, invalidParams("tool must be a string")
			}
			haveTool = true
		case "args":
			switch jsonKind(m.val) {
			case '{':
				p.args = m.val
			case 'n':
			default:
				return nil, invalidParams("args must be an object")
			}
		case "traceparent":
			if jsonKind(m.val) != '"' || json.Unmarshal(m.val, &p.traceparent) != nil {
				return nil, invalidParams("traceparent must be a string")
			}
		case "_meta":
			if metaTP, err = metaTraceparent(m.val); err != nil {
				return nil, err
			}
		default:
			return nil, invalidParams("unexpected member %q", m.key)
		}
	}
	if p.traceparent == "" {
		p.traceparent = metaTP
	}
	switch {
	case !haveTool || p.tool == "":
		return nil, invalidParams("tool is required")
	case len(p.tool) > maxToolName || !utf8.ValidString(p.tool) || hasControl(p.tool):
		return nil, invalidParams("tool is not a tool name")
	}
	return p, nil
}

// metaTraceparent reads _meta (MCP's request metadata): an object, whose
// "traceparent", when present, must be a string. Other members are ignored.
func metaTraceparent(raw json.RawMessage) (string, error) {
	if jsonKind(raw) != '{' {
		return "", invalidParams("_meta must be an object")
	}
	var meta map[string]json.RawMessage
	if err := json.Unmarshal(raw, &meta); err != nil {
		return "", invalidParams("_meta must be an object")
	}
	v, ok := meta["traceparent"]
	if !ok {
		return "", nil
	}
	var tp string
	if jsonKind(v) != '"' || json.Unmarshal(v, &tp) != nil {
		return "", invalidParams("_meta.traceparent must be a string")
	}
	return tp, nil
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

// toolCall runs one tool.call: decide, audit, run, audit. The order is the
// contract (DESIGN.md step 5): a refusal is audited as skill.tool_denied and
// nothing runs; an allowed call's started row is durable before any effect
// leaves the supervisor — before the tool runs, or, for a tool whose only
// effect is its reply (policy.EffectFree), before the reply, in the same
// append as its completed row — and every started row gets its completed
// row.
func (d *dispatcher) toolCall(ctx context.Context, req *request, f *frameMem) (any, error) {
	if d.capped.Load() {
		return nil, errAuditCap
	}
	if req.params == nil {
		return nil, invalidParams("tool.call needs params")
	}
	p, err := decodeCallParams(req.params)
	if err != nil {
		return nil, err
	}
	tp := d.traceparent
	if p.traceparent != "" {
		if _, err := telemetry.ParseTraceparent(p.traceparent); err != nil {
			return nil, invalidParams("traceparent is not a valid W3C traceparent")
		}
		tp = p.traceparent
	}
	tc, _ := telemetry.ParseTraceparent(tp) // d.traceparent is valid by construction
	common := d.common
	common.TraceID = tc.TraceID
	argsHash, err := audit.HashJSON(p.args)
	if err != nil {
		return nil, invalidParams("args cannot be canonicalised (RFC 8785)")
	}
	name := policy.Tool(p.tool)
	log := d.log.With("tool", p.tool, "trace_id", tc.TraceID)
	obs := &callObs{tool: p.tool, argsHash: argsHash, argsSize: len(p.args), start: time.Now()}
	ctx, obs.span = tracerOrNoop(d.tracer).Start(d.spanParentFor(ctx, p.traceparent != "", tc), "skill.broker.tool_call",
		trace.WithSpanKind(trace.SpanKindServer))
	defer d.finish(obs)

	// Decide. A tool outside the native registry is looked up in the
	// sources only once the enforcer allows its name: a refused call never
	// starts an MCP server.
	tool, ok := d.tools[name]
	metricTool := string(name)
	var mcpRow audit.MCP
	if !ok && len(d.sources) > 0 {
		if err = d.env.Enforcer.CheckTool(name); err == nil {
			tool, ok, err = d.lookup(ctx, name)
		}
		mcpRow = mcpFields(name, tool, ok)
	}
	var denial0 *policy.Denial
	if err != nil && !errors.As(err, &denial0) {
		// Found but unavailable (a server that will not start): the call
		// is made, audited, and fails.
		tool, err = failedTool{name: name, err: err}, nil
		if server, _, valid := name.SplitMCP(); valid {
			metricTool = policy.MCPPrefix + server // the tool's name is unverified
		}
	}
	if !ok {
		metricTool = metricUnknownTool
	}
	switch {
	case err != nil:
	case !ok:
		err = &policy.Denial{Reason: policy.ReasonUnknownTool, Tool: name}
	default:
		err = d.env.Enforcer.CheckTool(name)
	}
	if err == nil && !d.limiter.allow(d.now()) {
		err = &policy.Denial{Reason: policy.ReasonRateLimited, Tool: name,
			Detail: fmt.Sprintf("over %d calls per minute", d.limiter.limit)}
	}
	d.toolCalls.Add(1)
	if err != nil {
		var denial *policy.Denial
		if !errors.As(err, &denial) { // CheckTool returns only denials; fail closed anyway
			denial = &policy.Denial{Reason: policy.ReasonToolNotAllowed, Tool: name}
			err = denial
		}
		obs.tool, obs.outcome, obs.reason = deniedTool(denial, metricTool), telemetry.ToolCallDenied, string(denial.Reason)
		if !d.rows.take(1) {
			obs.unaudited = true
			d.capReached()
			return nil, errAuditCap
		}
		d.deny(ctx, log, common, metricTool, denial, argsHash, mcpRow)
		return nil, err
	}

	// Reserve the call's rows: started, completed and, should the tool
	// refuse it inside, its tool_denied row.
	if !d.rows.take(3) {
		obs.outcome, obs.reason, obs.unaudited = telemetry.ToolCallDenied, ReasonAuditCapReached, true
		d.capReached()
		return nil, errAuditCap
	}

	// Audit the start; without it the tool must not run. An effect-free
	// call's started row is only queued: the reply is its one effect, and
	// it waits below for the completed row, which follows it (see pair).
	callID := ulid.Make().String()
	actx := context.WithoutCancel(ctx)
	startedRow := audit.ToolCallStartedMCP(common, callID, p.tool, argsHash, mcpRow)
	var startedWait func() (audit.Row, error) // nil: the started row is durable
	var emitCompleted func(context.Context, audit.Draft) (audit.Row, error)
	var aerr error
	if q, ok := d.audit.(enqueuer); ok && policy.EffectFree(name) {
		startedWait, emitCompleted, aerr = q.EnqueueFollowed(actx, startedRow)
	} else {
		_, aerr = d.audit.Emit(actx, startedRow)
	}
	if aerr != nil {
		return nil, d.startedFailed(log, metricTool, obs, aerr, 3)
	}

	// Run.
	start := time.Now()
	call := &tools.Call{Env: d.env, Args: p.args, Traceparent: tp, TraceID: tc.TraceID}
	if f != nil {
		call.Mem = f.call(name)
	}
	result, err := d.run(ctx, tool, name, call)
	var raw json.RawMessage
	var canonical bool
	if err == nil {
		raw, canonical, err = marshalResult(result)
		if errors.Is(err, errResponseTooLarge) {
			d.truncated(log, len(raw))
			raw = nil
		}
	}
	dur := time.Since(start).Milliseconds()
	obs.durMS, obs.resultSize = dur, len(raw)

	// Audit the end, on every path.
	outcome, metricOutcome, resultHash, msg := audit.OutcomeSuccess, telemetry.ToolCallSuccess, "", ""
	var denial *policy.Denial
	switch {
	case err == nil:
		if resultHash, err = hashResult(raw, canonical); err != nil {
			err = fmt.Errorf("%w: result cannot be canonicalised: %v", tools.ErrFailed, err)
			outcome, metricOutcome, msg = audit.OutcomeError, telemetry.ToolCallError, errorObject(err).Message
		}
	case errors.As(err, &denial):
		// A resource check inside the tool refused it, after the started
		// row: close the pair, and record the refusal as every other one.
		outcome, metricOutcome, msg = audit.OutcomeError, telemetry.ToolCallDenied, "denied: "+string(denial.Reason)
	case errors.Is(err, tools.ErrTimeout):
		outcome, metricOutcome, msg = audit.OutcomeTimeout, telemetry.ToolCallTimeout, errorObject(err).Message
	default:
		outcome, metricOutcome, msg = audit.OutcomeError, telemetry.ToolCallError, errorObject(err).Message
		switch {
		case errors.Is(err, tools.ErrHostFault):
			log.Warn("broker: tool failed", "err", err) // the operator's to mend
		case !errors.Is(err, errToolPanic):
			log.Info("broker: tool failed", "err", err) // the host-side detail stays in the log
		}
	}
	completedRow := audit.ToolCallCompletedMCP(common, callID, p.tool, outcome, dur, resultHash, msg, mcpRow)
	if startedWait == nil {
		d.completed(actx, log, callID, completedRow)
	} else if perr := d.pair(actx, log, callID, completedRow, startedWait, emitCompleted, metricTool, obs); perr != nil {
		return nil, perr
	}
	if denial != nil {
		d.deny(ctx, log, common, metricTool, denial, argsHash, mcpRow)
		obs.outcome, obs.reason = telemetry.ToolCallDenied, string(denial.Reason)
		return nil, err
	}
	d.rows.give(1)
	d.count(metricTool, metricOutcome)
	obs.outcome = metricOutcome
	if err != nil {
		// A tool that timed out may still hand back what it had (Bash's
		// output so far): the skill gets it beside the error.
		if errors.Is(err, tools.ErrTimeout) && result != nil {
			if partial, _, merr := marshalResult(result); merr == nil && len(partial) <= MaxResponse/2 {
				return nil, &partialError{err: err, partial: partial}
			}
		}
		return nil, err
	}
	return raw, nil
}

// partialError carries a timed-out tool's partial result to errorObject.
type partialError struct {
	err     error
	partial json.RawMessage
}

func (e *partialError) Error() string { return e.err.Error() }
func (e *partialError) Unwrap() error { return e.err }

// enqueuer is an audit sink that can queue a row without waiting for its
// commit, and one that another row must follow (auditstore.Store).
type enqueuer interface {
	Enqueue(ctx context.Context, d audit.Draft) (func() (audit.Row, error), error)
	EnqueueFollowed(ctx context.Context, d audit.Draft) (func() (audit.Row, error), func(context.Context, audit.Draft) (audit.Row, error), error)
}

// completed writes a tool_call_completed row. With a queueing sink the
// response goes back as soon as the row is queued: the store writes in
// queue order, so the skill's next call (whose started row must be durable
// before its tool runs, or, effect-free, before its reply) commits after
// this row — one fsync per call instead of two. A failure is never
// reversed (the tool ran): sev-1 for the operator.
func (d *dispatcher) completed(ctx context.Context, log *slog.Logger, callID string, row audit.Draft) {
	fail := func(err error) {
		log.Error("broker: tool_call_completed row not written", "call_id", callID, "err", err, "severity", "sev-1")
	}
	q, ok := d.audit.(enqueuer)
	if !ok {
		if _, err := d.audit.Emit(ctx, row); err != nil {
			fail(err)
		}
		return
	}
	wait, err := q.Enqueue(ctx, row)
	if err != nil {
		fail(err)
		return
	}
	d.pending.Add(1)
	go func() {
		defer d.pending.Done()
		if _, err := wait(); err != nil {
			fail(err)
		}
	}()
}

// startedFailed refuses a call whose tool_call_started row was not
// written: the rows reserved for it that were not written go back, and
// the skill gets audit_unavailable.
func (d *dispatcher) startedFailed(log *slog.Logger, metricTool string, obs *callObs, err error, unwritten int64) error {
	d.rows.give(unwritten)
	log.Error("broker: tool_call_started row not written; call refused", "err", err)
	d.count(metricTool, telemetry.ToolCallError)
	obs.outcome = telemetry.ToolCallError
	return errAuditUnavailable
}

// pair writes the completed row of an effect-free call whose started row
// was only queued, and returns once both are durable: rows are durable in
// the order they were added, so when the completed row's batch is, the
// started row's is too, and in the usual case (a short tool) both went in
// one append, one fdatasync. Only then may the reply go. When the started
// row failed, the result is withheld (the tool's only effect) and the call
// is refused as if it had not run; the store never writes the completed
// row then (it follows the started row: auditstore.Store.EnqueueFollowed).
func (d *dispatcher) pair(ctx context.Context, log *slog.Logger, callID string, row audit.Draft, startedWait func() (audit.Row, error), emitCompleted func(context.Context, audit.Draft) (audit.Row, error), metricTool string, obs *callObs) error {
	_, cerr := emitCompleted(ctx, row)
	if _, serr := startedWait(); serr != nil {
		if cerr == nil { // the store's rule broken: say so
			log.Error("broker: tool_call_completed row written without its started row", "call_id", callID, "err", serr, "severity", "sev-1")
			return d.startedFailed(log, metricTool, obs, serr, 2)
		}
		return d.startedFailed(log, metricTool, obs, serr, 3)
	}
	if cerr != nil {
		// The started row stands: as for any call, a missing completed
		// row is the operator's to investigate, and the reply still goes.
		log.Error("broker: tool_call_completed row not written", "call_id", callID, "err", cerr, "severity", "sev-1")
	}
	return nil
}

// deny records a refusal: the skill.tool_denied row, the counters.
func (d *dispatcher) deny(ctx context.Context, log *slog.Logger, common audit.Common, metricTool string, denial *policy.Denial, argsHash string, m audit.MCP) {
	d.denied.Add(1)
	d.count(metricTool, telemetry.ToolCallDenied)
	tool := deniedTool(denial, metricTool)
	if _, err := d.audit.Emit(context.WithoutCancel(ctx), audit.ToolDeniedMCP(common, tool, string(denial.Reason), argsHash, m)); err != nil {
		// The refusal stands; only its record is missing.
		log.Error("broker: tool_denied row not written", "reason", denial.Reason, "err", err)
	}
	log.Debug("broker: call denied", "reason", denial.Reason)
}

// deniedTool is the tool name a denial is recorded under.
func deniedTool(denial *policy.Denial, metricTool string) string {
	if denial.Tool == "" {
		return metricTool
	}
	return string(denial.Tool)
}

// run calls the tool inside its skill.tool.<tool>.exec span (an MCP
// tool's is skill.tool.mcp.call, with its server and tool), turning a
// panic into errToolPanic.
func (d *dispatcher) run(ctx context.Context, t tools.Tool, name policy.Tool, c *tools.Call) (result any, err error) {
	spanName := "skill.tool." + strings.ToLower(string(name)) + ".exec"
	var attrs []attribute.KeyValue
	if server, tool, ok := name.SplitMCP(); ok {
		spanName, attrs = "skill.tool.mcp.call", telemetry.Attrs(attribute.String("mcp_server", server), attribute.String("mcp_tool", tool))
	}
	ctx, span := tracerOrNoop(d.tracer).Start(ctx, spanName, trace.WithAttributes(attrs...))
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, "tool failed")
		}
		span.End()
	}()
	defer func() {
		if r := recover(); r != nil {
			d.log.Error("broker: tool panicked", "tool", t.Name(), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			result, err = nil, errToolPanic
		}
	}()
	return t.Call(ctx, c)
}

func (d *dispatcher) count(tool, outcome string) {
	if d.metrics != nil {
		d.metrics.ToolCalls.WithLabelValues(d.common.SkillID, tool, outcome).Inc()
	}
}

// truncated records a response cut for the response cap.
func (d *dispatcher) truncated(log *slog.Logger, n int) {
	log.Warn("broker: response over the cap replaced by response_too_large", "cap", MaxResponse, "bytes", n)
	if d.metrics != nil {
		d.metrics.ResponseTruncated.Inc()
	}
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
