package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/telemetry"
)

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
	ctx, c, err := d.newCall(ctx, req)
	if err != nil {
		return nil, err
	}
	defer d.finish(c.obs)
	if err := d.decideCall(ctx, c); err != nil {
		return nil, err
	}
	if err := d.auditStart(ctx, c); err != nil {
		return nil, err
	}
	err = d.runCall(ctx, c, f)
	return d.auditEnd(ctx, c, err)
}

// toolCallState is one tool.call as its phases hand it on.
type toolCallState struct {
	p        *callParams
	name     policy.Tool
	tp       string                 // the call's traceparent: its own, else the invocation's
	tc       telemetry.TraceContext // tp parsed
	common   audit.Common           // the invocation's, with the call's trace id
	argsHash string
	// logBase is the broker's logger; logger adds the call's tool and
	// trace id, built only when something is logged.
	logBase *slog.Logger
	logOnce sync.Once // completed's background wait may log too
	log     *slog.Logger
	obs     *callObs
	// Set by decideCall: the tool, the name it is counted under, and an
	// MCP tool's row fields.
	tool       tools.Tool
	metricTool string
	mcpRow     audit.MCP
	// Set by auditStart: the call's id, the context its rows are written
	// in, and for an effect-free call whose started row is only queued,
	// how to wait for it and write the completed row after it (nil: the
	// started row is durable).
	callID        string
	actx          context.Context
	startedWait   func() (audit.Row, error)
	emitCompleted func(context.Context, audit.Draft) (audit.Row, error)
	// Set by runCall: what the tool returned, marshalled (raw, nil when
	// cut for the response cap), and how long it ran.
	result    any
	raw       json.RawMessage
	canonical bool
	durMS     int64
}

// logger is the broker's logger with the call's tool and trace id.
func (c *toolCallState) logger() *slog.Logger {
	c.logOnce.Do(func() { c.log = c.logBase.With("tool", c.p.tool, "trace_id", c.tc.TraceID) })
	return c.log
}

// newCall decodes the call's params, its traceparent and the hash of its
// args, and starts its span.
func (d *dispatcher) newCall(ctx context.Context, req *request) (context.Context, *toolCallState, error) {
	if req.params == nil {
		return ctx, nil, invalidParams("tool.call needs params")
	}
	p, err := decodeCallParams(req.params)
	if err != nil {
		return ctx, nil, err
	}
	tp, tc := d.traceparent, d.tc
	if p.traceparent != "" {
		own, err := telemetry.ParseTraceparent(p.traceparent)
		if err != nil {
			return ctx, nil, invalidParams("traceparent is not a valid W3C traceparent")
		}
		tp, tc = p.traceparent, own
	} else if tc == (telemetry.TraceContext{}) {
		tc, _ = telemetry.ParseTraceparent(tp) // d.traceparent is valid by construction
	}
	common := d.common
	common.TraceID = tc.TraceID
	argsHash, err := audit.HashJSON(p.args)
	if err != nil {
		return ctx, nil, invalidParams("args cannot be canonicalised (RFC 8785)")
	}
	c := &toolCallState{p: p, name: policy.Tool(p.tool), tp: tp, tc: tc, common: common, argsHash: argsHash,
		logBase: d.log}
	c.obs = &callObs{tool: p.tool, argsHash: argsHash, argsSize: len(p.args), start: time.Now()}
	ctx, c.obs.span = tracerOrNoop(d.tracer).Start(d.spanParentFor(ctx, p.traceparent != "", tc), "skill.broker.tool_call",
		trace.WithSpanKind(trace.SpanKindServer))
	return ctx, c, nil
}

// decideCall finds the tool and asks the enforcer and the rate limit; a
// refusal is audited as skill.tool_denied and returned. A tool outside the
// native registry is looked up in the sources only once the enforcer allows
// its name: a refused call never starts an MCP server.
func (d *dispatcher) decideCall(ctx context.Context, c *toolCallState) error {
	name := c.name
	tool, ok := d.tools[name]
	metricTool := string(name)
	var mcpRow audit.MCP
	var err error
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
	c.tool, c.metricTool, c.mcpRow = tool, metricTool, mcpRow
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
	if err == nil {
		return nil
	}
	var denial *policy.Denial
	if !errors.As(err, &denial) { // CheckTool returns only denials; fail closed anyway
		denial = &policy.Denial{Reason: policy.ReasonToolNotAllowed, Tool: name}
		err = denial
	}
	c.obs.tool, c.obs.outcome, c.obs.reason = deniedTool(denial, metricTool), telemetry.ToolCallDenied, string(denial.Reason)
	if !d.rows.take(1) {
		c.obs.unaudited = true
		d.capReached()
		return errAuditCap
	}
	d.deny(ctx, c.logger(), c.common, metricTool, denial, c.argsHash, mcpRow)
	return err
}

// auditStart reserves the call's rows (started, completed and, should the
// tool refuse it inside, its tool_denied row) and writes its started row;
// without it the tool must not run. An effect-free call's started row is
// only queued: the reply is its one effect, and it waits in auditEnd for
// the completed row, which follows it (see pair).
func (d *dispatcher) auditStart(ctx context.Context, c *toolCallState) error {
	if !d.rows.take(3) {
		c.obs.outcome, c.obs.reason, c.obs.unaudited = telemetry.ToolCallDenied, ReasonAuditCapReached, true
		d.capReached()
		return errAuditCap
	}
	c.callID = ulid.Make().String()
	c.actx = context.WithoutCancel(ctx)
	startedRow := audit.ToolCallStartedMCP(c.common, c.callID, c.p.tool, c.argsHash, c.mcpRow)
	var aerr error
	if q, ok := d.audit.(enqueuer); ok && policy.EffectFree(c.name) {
		c.startedWait, c.emitCompleted, aerr = q.EnqueueFollowed(c.actx, startedRow)
	} else {
		t0 := time.Now()
		_, aerr = d.audit.Emit(c.actx, startedRow)
		if d.metrics != nil {
			d.metrics.AuditEmitDuration.WithLabelValues(stageToolCallStarted).Observe(time.Since(t0).Seconds())
		}
	}
	if aerr != nil {
		return d.startedFailed(c.logger(), c.metricTool, c.obs, aerr, 3)
	}
	return nil
}

// stageToolCallStarted is cyberos_audit_emit_duration_seconds's stage for
// a tool call's started row made durable before its tool runs (an
// effect-free call's, written with its completed row, is not counted).
const stageToolCallStarted = "tool_call_started"

// runCall runs the tool and marshals its result.
func (d *dispatcher) runCall(ctx context.Context, c *toolCallState, f *frameMem) error {
	start := time.Now()
	call := &tools.Call{Env: d.env, Args: c.p.args, Traceparent: c.tp, TraceID: c.tc.TraceID}
	if f != nil {
		call.Mem = f.call(c.name)
	}
	result, err := d.run(ctx, c.tool, c.name, call)
	var raw json.RawMessage
	var canonical bool
	if err == nil {
		raw, canonical, err = marshalResult(result)
		if errors.Is(err, errResponseTooLarge) {
			d.truncated(c.logger(), len(raw))
			raw = nil
		}
	}
	c.result, c.raw, c.canonical = result, raw, canonical
	c.durMS = time.Since(start).Milliseconds()
	c.obs.durMS, c.obs.resultSize = c.durMS, len(raw)
	return err
}

// auditEnd writes the call's completed row, on every path, and answers:
// the result, or err (a refusal inside the tool audited as every other
// one, a timeout with what the tool had so far).
func (d *dispatcher) auditEnd(ctx context.Context, c *toolCallState, err error) (any, error) {
	log := c.logger
	outcome, metricOutcome, resultHash, msg := audit.OutcomeSuccess, telemetry.ToolCallSuccess, "", ""
	var denial *policy.Denial
	switch {
	case err == nil:
		if resultHash, err = hashResult(c.raw, c.canonical); err != nil {
			// Flattened, as marshalResult's: the call fails as ErrFailed.
			err = fmt.Errorf("%w: result cannot be canonicalised: %v", tools.ErrFailed, err) //nolint:errorlint // see above
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
			log().Warn("broker: tool failed", "err", err) // the operator's to mend
		case !errors.Is(err, errToolPanic):
			log().Info("broker: tool failed", "err", err) // the host-side detail stays in the log
		}
	}
	completedRow := audit.ToolCallCompletedMCP(c.common, c.callID, c.p.tool, outcome, c.durMS, resultHash, msg, c.mcpRow)
	if c.startedWait == nil {
		d.completed(c.actx, log, c.callID, completedRow)
	} else if perr := d.pair(c.actx, log, c.callID, completedRow, c.startedWait, c.emitCompleted, c.metricTool, c.obs); perr != nil {
		return nil, perr
	}
	if denial != nil {
		d.deny(ctx, log(), c.common, c.metricTool, denial, c.argsHash, c.mcpRow)
		c.obs.outcome, c.obs.reason = telemetry.ToolCallDenied, string(denial.Reason)
		return nil, err
	}
	d.rows.give(1)
	d.count(c.metricTool, metricOutcome)
	c.obs.outcome = metricOutcome
	if err != nil {
		// A tool that timed out may still hand back what it had (Bash's
		// output so far): the skill gets it beside the error.
		if errors.Is(err, tools.ErrTimeout) && c.result != nil {
			if partial, _, merr := marshalResult(c.result); merr == nil && len(partial) <= MaxResponse/2 {
				return nil, &partialError{err: err, partial: partial}
			}
		}
		return nil, err
	}
	return c.raw, nil
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
	EnqueueNotify(ctx context.Context, d audit.Draft, done func(error)) error
	EnqueueFollowed(ctx context.Context, d audit.Draft) (func() (audit.Row, error), func(context.Context, audit.Draft) (audit.Row, error), error)
}

// completed writes a tool_call_completed row. With a queueing sink the
// response goes back as soon as the row is queued: the store writes in
// queue order, so the skill's next call (whose started row must be durable
// before its tool runs, or, effect-free, before its reply) commits after
// this row — one fsync per call instead of two. The store reports the
// row's outcome itself (no goroutine waits for it); a failure is never
// reversed (the tool ran): sev-1 for the operator.
func (d *dispatcher) completed(ctx context.Context, log func() *slog.Logger, callID string, row audit.Draft) {
	fail := func(err error) {
		log().Error("broker: tool_call_completed row not written", "call_id", callID, "err", err, "severity", "sev-1")
	}
	q, ok := d.audit.(enqueuer)
	if !ok {
		if _, err := d.audit.Emit(ctx, row); err != nil {
			fail(err)
		}
		return
	}
	d.pending.Add(1)
	err := q.EnqueueNotify(ctx, row, func(err error) {
		if err == nil {
			d.pending.Done()
			return
		}
		// Logged off the committer, which must not block on a slow log.
		go func() {
			defer d.pending.Done()
			fail(err)
		}()
	})
	if err != nil {
		d.pending.Done()
		fail(err)
	}
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
func (d *dispatcher) pair(ctx context.Context, log func() *slog.Logger, callID string, row audit.Draft, startedWait func() (audit.Row, error), emitCompleted func(context.Context, audit.Draft) (audit.Row, error), metricTool string, obs *callObs) error {
	_, cerr := emitCompleted(ctx, row)
	if _, serr := startedWait(); serr != nil {
		if cerr == nil { // the store's rule broken: say so
			log().Error("broker: tool_call_completed row written without its started row", "call_id", callID, "err", serr, "severity", "sev-1")
			return d.startedFailed(log(), metricTool, obs, serr, 2)
		}
		return d.startedFailed(log(), metricTool, obs, serr, 3)
	}
	if cerr != nil {
		// The started row stands: as for any call, a missing completed
		// row is the operator's to investigate, and the reply still goes.
		log().Error("broker: tool_call_completed row not written", "call_id", callID, "err", cerr, "severity", "sev-1")
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
