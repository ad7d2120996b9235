package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/broker"
)

// inToolDenialPrefix marks a tool_call_completed row closing a call that a
// resource check inside the tool refused; a skill.tool_denied row follows it
// and stands for the call (the broker writes both).
const inToolDenialPrefix = "denied: "

type rowPayload struct {
	InvocationID      string  `json:"invocation_id"`
	CallID            string  `json:"call_id"`
	ToolName          string  `json:"tool_name"` // spec §8; rows written before it say tool
	Tool              string  `json:"tool"`
	PolicyHash        string  `json:"policy_hash"`
	ArgsHash          string  `json:"args_hash"`
	AttemptedArgsHash string  `json:"attempted_args_hash"`
	Outcome           string  `json:"outcome"`
	DurationMS        int64   `json:"duration_ms"`
	Reason            string  `json:"reason"`
	ErrorMessage      *string `json:"error_message"`
}

// Replayer turns audit rows into the tool-call sequence that tail shows.
type Replayer struct {
	argsHash map[string]string // call_id → args_hash of its started row
	pending  map[string]int64  // tool → duration of an in-tool denial awaiting its denied row
	policy   string            // policy_hash of the invocation's started row
}

// NewReplayer starts a replay of one invocation's rows (fed in seq order).
func NewReplayer() *Replayer {
	return &Replayer{argsHash: map[string]string{}, pending: map[string]int64{}}
}

// Add takes the next row and returns the decided call it completes, if any.
func (r *Replayer) Add(row audit.Row) (broker.Decided, bool) {
	var p rowPayload
	if err := json.Unmarshal(row.Payload, &p); err != nil {
		return broker.Decided{}, false
	}
	if p.ToolName != "" {
		p.Tool = p.ToolName
	}
	switch row.Kind {
	case audit.KindInvokedStarted:
		r.policy = p.PolicyHash
	case audit.KindToolCallStarted:
		r.argsHash[p.CallID] = p.ArgsHash
	case audit.KindToolCallCompleted:
		hash := r.argsHash[p.CallID]
		delete(r.argsHash, p.CallID)
		if p.ErrorMessage != nil && strings.HasPrefix(*p.ErrorMessage, inToolDenialPrefix) {
			r.pending[p.Tool] = p.DurationMS
			return broker.Decided{}, false
		}
		return broker.Decided{TS: row.TS, InvocationID: p.InvocationID, Tool: p.Tool, Outcome: p.Outcome,
			DurationMS: p.DurationMS, ArgsHash: hash, PolicyHash: r.policy}, true
	case audit.KindToolDenied:
		dur := r.pending[p.Tool]
		delete(r.pending, p.Tool)
		return broker.Decided{TS: row.TS, InvocationID: p.InvocationID, Tool: p.Tool, Outcome: "denied",
			DurationMS: dur, ArgsHash: p.AttemptedArgsHash, Reason: p.Reason, PolicyHash: r.policy}, true
	}
	return broker.Decided{}, false
}

// RowSource reads audit rows (auditstore.Store).
type RowSource interface {
	Each(ctx context.Context, f auditstore.Filter, fn func(audit.Row) error) error
}

// Replay reads an invocation's decided tool calls from the audit rows, in
// seq order. found is false when the store has no row of that invocation.
func Replay(ctx context.Context, src RowSource, invocationID string) (calls []broker.Decided, found bool, err error) {
	r := NewReplayer()
	calls = []broker.Decided{}
	err = src.Each(ctx, auditstore.Filter{InvocationID: invocationID}, func(row audit.Row) error {
		found = true
		if d, ok := r.Add(row); ok {
			calls = append(calls, d)
		}
		return nil
	})
	return calls, found, err
}

// CountDay counts the decided tool calls and the denied ones whose rows
// carry a ts of day (YYYY-MM-DD, UTC): what status reports as *_today.
func CountDay(ctx context.Context, src RowSource, day string) (calls, denied int64, err error) {
	for _, k := range []audit.Kind{audit.KindToolCallCompleted, audit.KindToolDenied} {
		err = src.Each(ctx, auditstore.Filter{Kind: k}, func(row audit.Row) error {
			if !strings.HasPrefix(row.TS, day) {
				return nil
			}
			if k == audit.KindToolDenied {
				calls++
				denied++
				return nil
			}
			var p rowPayload
			if json.Unmarshal(row.Payload, &p) == nil && p.ErrorMessage != nil && strings.HasPrefix(*p.ErrorMessage, inToolDenialPrefix) {
				return nil // its skill.tool_denied row counts the call
			}
			calls++
			return nil
		})
		if err != nil {
			return 0, 0, err
		}
	}
	return calls, denied, nil
}

// CountDayKind counts the rows of kind written on day (YYYY-MM-DD, UTC).
func CountDayKind(ctx context.Context, src RowSource, day string, kind audit.Kind) (n int64, err error) {
	err = src.Each(ctx, auditstore.Filter{Kind: kind}, func(row audit.Row) error {
		if strings.HasPrefix(row.TS, day) {
			n++
		}
		return nil
	})
	return n, err
}

// Verdicts of a re-judged call.
const (
	VerdictDenied      = "denied"
	VerdictAllowed     = "allowed"
	VerdictUndecidable = "undecidable"
)

// Judged is a recorded call re-judged against another policy.
type Judged struct {
	broker.Decided
	Verdict string `json:"verdict"`
	// Why: the denial reason, or why the verdict could not be reached.
	Why string `json:"why,omitempty"`
}

// Rejudge re-judges recorded calls against pol. Audit rows hold an args
// hash, never the args, so only what the tool name decides is decidable:
// a tool the policy does not allow at all is denied (with the reason the
// broker would give); a tool allowed without any argument-level rule
// (a bare Bash grant with no Bash denials) is allowed; every other allowed
// tool checks its arguments (paths, scopes, hosts, commands), which were
// not recorded: undecidable, never guessed.
func Rejudge(calls []broker.Decided, pol *policy.Policy) []Judged {
	e := policy.NewEnforcer(pol, policy.EnforcerOptions{})
	out := make([]Judged, 0, len(calls))
	for _, c := range calls {
		j := Judged{Decided: c}
		if err := e.CheckTool(policy.Tool(c.Tool)); err != nil {
			j.Verdict, j.Why = VerdictDenied, denialReason(err)
		} else if argFree(pol, policy.Tool(c.Tool)) {
			j.Verdict = VerdictAllowed
		} else {
			j.Verdict, j.Why = VerdictUndecidable, "args not recorded: "+c.Tool+"'s argument rules cannot be re-checked"
		}
		out = append(out, j)
	}
	return out
}

func denialReason(err error) string {
	if d, ok := errors.AsType[*policy.Denial](err); ok {
		return string(d.Reason)
	}
	return err.Error()
}

// argFree reports whether every call of t is allowed whatever its args:
// only Bash can be, by a bare allowed rule and no Bash rule in
// disallowed_tools. The file, memory and Http tools always check their
// resource against x-allowed-files, scopes or domains.
func argFree(pol *policy.Policy, t policy.Tool) bool {
	if t != policy.ToolBash {
		return false
	}
	bare := false
	for _, r := range pol.AllowedTools {
		if r.Tool == t && r.Pattern == "" {
			bare = true
		}
	}
	for _, r := range pol.DisallowedTools {
		if r.Tool == t {
			return false
		}
	}
	return bare
}
