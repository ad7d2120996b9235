// Package daemon is the host daemon behind `cyberos serve`: the skill
// registry, the admin API over a Unix socket (invoke, status, tail,
// replay, /mcp), /metrics, and graceful shutdown. It reads its config
// file with package config; package client is the API's client.
package daemon

import (
	"sync"
	"time"

	"cyberos.dev/client"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/broker"
)

// Bounds of the live views.
const (
	// subscriberBuffer is how many events a tail stream may lag behind
	// before it is cut (with an error line): a slow reader never blocks a
	// broker.
	subscriberBuffer = 1024
	// historyCap bounds the events kept per running invocation for tails
	// that join late.
	historyCap = 10000
)

type active struct {
	info      supervisor.Started
	toolCalls int64
	abuse     []string
	history   []broker.Decided
	truncated bool
	subs      map[*subscriber]struct{}
}

// subscriber is one live tail stream. ch is closed when the invocation
// ends (done) or the reader fell behind (overflow).
type subscriber struct {
	ch       chan broker.Decided
	overflow bool
}

// Event is one line of GET /v1/events (`skill broker tail --all` or
// --skill): an invocation started, one of its tool calls decided, or the
// invocation ended. The first line of a stream is type "watching".
type Event struct {
	Type         string          `json:"type"` // watching, invocation_started, tool_call, invocation_ended
	InvocationID string          `json:"invocation_id,omitempty"`
	SkillID      string          `json:"skill_id,omitempty"`
	TenantID     string          `json:"tenant_id,omitempty"`
	RequestID    string          `json:"request_id,omitempty"` // invocation_started
	TS           string          `json:"ts,omitempty"`
	Outcome      string          `json:"outcome,omitempty"` // invocation_ended
	Call         *broker.Decided `json:"call,omitempty"`    // tool_call
}

// Event types.
const (
	EventWatching          = client.EventWatching
	EventInvocationStarted = client.EventInvocationStarted
	EventToolCall          = client.EventToolCall
	EventInvocationEnded   = client.EventInvocationEnded
)

// watcher is one events stream: every invocation's, or one skill's (skill
// set). ch is closed when the reader fell behind (overflow).
type watcher struct {
	skill    string
	ch       chan Event
	overflow bool
}

// hub is the in-memory state behind status, tail and events.
type hub struct {
	mu       sync.Mutex
	active   map[string]*active
	watchers map[*watcher]struct{}
	day      string
	calls    int64
	denied   int64
	abuse    int64
	dropped  int64
	now      func() time.Time
}

func newHub(now func() time.Time) *hub {
	if now == nil {
		now = time.Now
	}
	return &hub{active: map[string]*active{}, watchers: map[*watcher]struct{}{}, now: now}
}

func utcDay(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// seed sets today's counters (from the audit rows at start).
func (h *hub) seed(day string, calls, denied, abuse int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.day, h.calls, h.denied, h.abuse = day, calls, denied, abuse
}

// rollLocked resets the counters when the UTC day changed.
func (h *hub) rollLocked() {
	if d := utcDay(h.now()); d != h.day {
		h.day, h.calls, h.denied, h.abuse = d, 0, 0, 0
	}
}

// protocolAbuse counts the first protocol abuse of a kind in invocation id.
func (h *hub) protocolAbuse(id, kind string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rollLocked()
	h.abuse++
	if a := h.active[id]; a != nil {
		a.abuse = append(a.abuse, kind)
	}
}

func (h *hub) started(s supervisor.Started) { h.startedAs(s, "") }

// startedAs is started for a request with a request_id, which its
// invocation_started event carries (an MCP call finds its invocation by it).
func (h *hub) startedAs(s supervisor.Started, requestID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.active[s.InvocationID] = &active{info: s, subs: map[*subscriber]struct{}{}}
	h.emitLocked(Event{Type: EventInvocationStarted, InvocationID: s.InvocationID, SkillID: s.SkillID, TenantID: s.TenantID, RequestID: requestID, TS: s.StartedAt.UTC().Format(time.RFC3339Nano)})
}

// emitLocked hands ev to the watchers that want its skill; it never
// blocks: a watcher whose buffer is full is dropped (overflow).
func (h *hub) emitLocked(ev Event) {
	for w := range h.watchers {
		if w.skill != "" && w.skill != ev.SkillID {
			continue
		}
		select {
		case w.ch <- ev:
		default:
			w.overflow = true
			h.dropped++
			delete(h.watchers, w)
			close(w.ch)
		}
	}
}

// watch starts an events stream for skill ("" for all); the caller must
// unwatch.
func (h *hub) watch(skill string) *watcher {
	h.mu.Lock()
	defer h.mu.Unlock()
	w := &watcher{skill: skill, ch: make(chan Event, subscriberBuffer)}
	h.watchers[w] = struct{}{}
	return w
}

func (h *hub) unwatch(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watchers[w]; ok {
		delete(h.watchers, w)
		close(w.ch)
	}
}

func (h *hub) watcherOverflowed(w *watcher) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return w.overflow
}

// decided counts one tool call and fans it out; it never blocks.
func (h *hub) decided(ev broker.Decided) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rollLocked()
	h.calls++
	if ev.Outcome == "denied" {
		h.denied++
	}
	a := h.active[ev.InvocationID]
	if a == nil {
		return
	}
	a.toolCalls++
	call := ev
	h.emitLocked(Event{Type: EventToolCall, InvocationID: ev.InvocationID, SkillID: a.info.SkillID, TenantID: a.info.TenantID, TS: ev.TS, Call: &call})
	if len(a.history) < historyCap {
		a.history = append(a.history, ev)
	} else {
		a.truncated = true
	}
	for s := range a.subs {
		select {
		case s.ch <- ev:
		default:
			s.overflow = true
			h.dropped++
			delete(a.subs, s)
			close(s.ch)
		}
	}
}

// ended removes a finished invocation and ends its tail streams.
func (h *hub) ended(id, outcome string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.active[id]
	if a == nil {
		return
	}
	delete(h.active, id)
	h.emitLocked(Event{Type: EventInvocationEnded, InvocationID: id, SkillID: a.info.SkillID, TenantID: a.info.TenantID, TS: h.now().UTC().Format(time.RFC3339Nano), Outcome: outcome})
	for s := range a.subs {
		close(s.ch)
	}
}

// subscribe returns the events so far and a live stream, or ok false when
// the invocation is not running. The caller must unsubscribe.
func (h *hub) subscribe(id string) (past []broker.Decided, truncated bool, s *subscriber, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.active[id]
	if a == nil {
		return nil, false, nil, false
	}
	s = &subscriber{ch: make(chan broker.Decided, subscriberBuffer)}
	a.subs[s] = struct{}{}
	return append([]broker.Decided(nil), a.history...), a.truncated, s, true
}

func (h *hub) unsubscribe(id string, s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a := h.active[id]; a != nil {
		if _, ok := a.subs[s]; ok {
			delete(a.subs, s)
			close(s.ch)
		}
	}
}

func (h *hub) overflowed(s *subscriber) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return s.overflow
}

func (h *hub) status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.rollLocked()
	st := Status{ActiveInvocations: len(h.active), ToolCallsToday: h.calls, DeniedToday: h.denied, ProtocolAbuseToday: h.abuse,
		Day: h.day, Invocations: []ActiveView{}}
	for _, a := range h.active {
		st.Invocations = append(st.Invocations, ActiveView{
			InvocationID: a.info.InvocationID, SkillID: a.info.SkillID, TenantID: a.info.TenantID,
			StartedAt: a.info.StartedAt.UTC().Format(time.RFC3339Nano), ToolCalls: a.toolCalls,
			ProtocolAbuse: append([]string(nil), a.abuse...),
		})
	}
	sortViews(st.Invocations)
	return st
}

// running reports whether invocation id is running.
func (h *hub) running(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.active[id] != nil
}
