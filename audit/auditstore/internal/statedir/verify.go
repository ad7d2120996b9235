package statedir

import (
	"encoding/json"
	"fmt"
	"slices"

	"cyberos.dev/audit"
)

// Report is what Verify found.
type Report struct {
	Rows     int       `json:"rows"`
	OK       bool      `json:"ok"` // no problems (in-flight invocations are not problems)
	Problems []Problem `json:"problems"`
	// InFlight lists, in start order, the invocation ids with a
	// skill.invoked_started and no skill.invoked_completed.
	InFlight []string `json:"in_flight"`
	// LastSeq and LastHash are the chain head. Deleting rows from the end of
	// a chain leaves a valid shorter chain; only a head recorded elsewhere
	// (a log line, a previous report) shows that.
	LastSeq  int64  `json:"last_seq"`
	LastHash string `json:"last_hash"`
	// Checkpoints counts the chain's checkpoint rows, each checked: its
	// head is in the chain and its signature verifies. SigningKeys are the
	// public keys that signed them, in first-seen order; LastCheckpoint is
	// the head_seq of the last one (0: none).
	Checkpoints    int      `json:"checkpoints"`
	SigningKeys    []string `json:"signing_keys,omitempty"`
	LastCheckpoint int64    `json:"last_checkpoint"`
	// Notes are facts that are not problems (e.g. the index lags the
	// journal, which the next start catches up).
	Notes []string `json:"notes,omitempty"`
}

// Problem names a row that fails verification and why. File and Line say
// where the bad copy is (VerifyDir sets them; Line counts from 1 in the
// journal) and Field, when known, which field differs.
type Problem struct {
	Seq    int64  `json:"seq"`
	RowID  string `json:"row_id"`
	File   string `json:"file,omitempty"`
	Line   int    `json:"line,omitempty"`
	Field  string `json:"field,omitempty"`
	Reason string `json:"reason"`

	lost bool // the chain ends before its anchor (Repair may accept that)
}

// Lost reports whether p is rows lost past the anchor or a recorded head:
// the chain ends before it (Repair may accept that).
func (p Problem) Lost() bool { return p.lost }

// Verify checks a complete chain, in order: seq runs 1, 2, 3… without gaps;
// row 1's prev_hash is GenesisHash and every other row's prev_hash is the
// row_hash of the row before; every row_hash recomputes; every payload is
// its kind's payload in canonical form (so one altered byte anywhere in a
// row — payload, kind, ts, row_id, a hash — names that row); every
// skill.invoked_completed follows a skill.invoked_started of the same
// invocation and every skill.tool_call_completed a skill.tool_call_started of
// the same call. Started invocations never completed are listed in InFlight.
//
// Verify needs every row: an export filtered by invocation or kind is not a
// chain and fails at its first row.
func Verify(rows []audit.Row) Report {
	v := NewVerifier()
	for _, r := range rows {
		v.Add(r)
	}
	return v.Report()
}

// Verifier is Verify one row at a time, for chains too long to hold in
// memory. It keeps only the previous row and the pairing state.
type Verifier struct {
	rows        int
	prev        *audit.Row
	problems    []Problem
	invocations map[string]invocationState
	startOrder  []string
	openCalls   map[string]int // invocation_id + "\x00" + call_id → started, not yet completed

	// Checkpoints: the pinned public key (hex; "" checks signatures against
	// the key each checkpoint carries), the recent rows' hashes their heads
	// are looked up in, and what was found.
	pinned      string
	recent      []seqHash // ring of the last len(recent) rows, by seq
	checkpoints int
	keys        []string
	lastCP      int64 // head_seq of the last good checkpoint
	lastCPRow   int64 // its own seq
}

type seqHash struct {
	seq  int64
	hash string
}

// recentRows is how far back a checkpoint's head may lie: a writer signs
// the head its index has reached, which trails the journal by far less.
const recentRows = 1 << 16

// PinKey makes v require every checkpoint to be signed by the hex Ed25519
// public key pub (as KEY.pub holds it).
func (v *Verifier) PinKey(pub string) { v.pinned = pub }

type invocationState struct {
	startedSeq int64
	completed  bool
}

// NewVerifier returns a Verifier expecting the row with seq 1 first.
func NewVerifier() *Verifier {
	return &Verifier{invocations: map[string]invocationState{}, openCalls: map[string]int{}}
}

// Add checks the next row of the chain.
func (v *Verifier) Add(r audit.Row) {
	v.rows++
	reasons, payloadOK := audit.RowProblems(v.prev, r)
	if payloadOK {
		reasons = append(reasons, v.pair(r)...)
		if r.Kind == audit.KindCheckpoint {
			reasons = append(reasons, v.checkpoint(r)...)
		}
	}
	for _, reason := range reasons {
		v.problems = append(v.problems, Problem{Seq: r.Seq, RowID: r.RowID, Reason: reason})
	}
	v.setPrev(r)
}

// AddProblem records a problem with r found by a check outside the chain
// (the store's comparison of its two copies).
func (v *Verifier) AddProblem(r audit.Row, reason string) {
	v.problems = append(v.problems, Problem{Seq: r.Seq, RowID: r.RowID, Reason: reason})
}

// Report returns what the rows added so far show.
func (v *Verifier) Report() Report {
	rep := Report{Rows: v.rows, OK: len(v.problems) == 0, Problems: v.problems, InFlight: []string{}}
	if rep.Problems == nil {
		rep.Problems = []Problem{}
	}
	for _, id := range v.startOrder {
		if st := v.invocations[id]; !st.completed {
			rep.InFlight = append(rep.InFlight, id)
		}
	}
	if v.prev != nil {
		rep.LastSeq, rep.LastHash = v.prev.Seq, v.prev.RowHash
	}
	rep.Checkpoints, rep.SigningKeys, rep.LastCheckpoint = v.checkpoints, v.keys, v.lastCP
	return rep
}

// hashAt is the row_hash of the chain's row seq, if it is among the recent
// rows.
func (v *Verifier) hashAt(seq int64) (string, bool) {
	if v.recent == nil || seq < 1 {
		return "", false
	}
	e := v.recent[uint64(seq)%recentRows]
	return e.hash, e.seq == seq
}

// checkpoint checks a checkpoint row (its payload is valid): its head is an
// earlier row of this chain, and its signature verifies.
func (v *Verifier) checkpoint(r audit.Row) []string {
	var cp audit.Checkpoint
	if err := json.Unmarshal(r.Payload, &cp); err != nil {
		return []string{fmt.Sprintf("checkpoint: %v", err)}
	}
	v.checkpoints++
	if !slices.Contains(v.keys, cp.PublicKey) {
		v.keys = append(v.keys, cp.PublicKey)
	}
	var out []string
	if err := cp.Check(v.pinned); err != nil {
		out = append(out, "checkpoint: "+err.Error())
	}
	switch h, ok := v.hashAt(cp.Seq); {
	case cp.Seq >= r.Seq:
		out = append(out, fmt.Sprintf("checkpoint: head_seq %d is not before the checkpoint itself", cp.Seq))
	case !ok:
		out = append(out, fmt.Sprintf("checkpoint: head_seq %d is not among the %d rows before it", cp.Seq, recentRows))
	case h != cp.RowHash:
		out = append(out, fmt.Sprintf("checkpoint: seq %d's row_hash is not the signed one (%.12s…): the chain was rewritten", cp.Seq, cp.RowHash))
	}
	if len(out) == 0 {
		v.lastCP, v.lastCPRow = cp.Seq, r.Seq
	}
	return out
}

// pair tracks started/completed pairs; r's payload is valid.
func (v *Verifier) pair(r audit.Row) []string {
	var ids struct {
		InvocationID string `json:"invocation_id"`
		CallID       string `json:"call_id"`
	}
	if err := json.Unmarshal(r.Payload, &ids); err != nil {
		return nil
	}
	inv := ids.InvocationID
	switch r.Kind {
	case audit.KindInvokedStarted:
		if st, ok := v.invocations[inv]; ok {
			return []string{fmt.Sprintf("second skill.invoked_started for invocation %q (first at seq %d)", inv, st.startedSeq)}
		}
		v.invocations[inv] = invocationState{startedSeq: r.Seq}
		v.startOrder = append(v.startOrder, inv)
	case audit.KindInvokedCompleted:
		st, ok := v.invocations[inv]
		switch {
		case !ok:
			return []string{fmt.Sprintf("skill.invoked_completed without an earlier skill.invoked_started for invocation %q", inv)}
		case st.completed:
			return []string{fmt.Sprintf("second skill.invoked_completed for invocation %q", inv)}
		}
		st.completed = true
		v.invocations[inv] = st
	case audit.KindToolCallStarted:
		// call ids may come from the skill and be reused, so calls are
		// counted, not required to be unique.
		v.openCalls[inv+"\x00"+ids.CallID]++
	case audit.KindToolCallCompleted:
		key := inv + "\x00" + ids.CallID
		if v.openCalls[key] == 0 {
			return []string{fmt.Sprintf("skill.tool_call_completed without an open skill.tool_call_started for call %q of invocation %q", ids.CallID, inv)}
		}
		if v.openCalls[key]--; v.openCalls[key] == 0 {
			delete(v.openCalls, key)
		}
	}
	return nil
}
