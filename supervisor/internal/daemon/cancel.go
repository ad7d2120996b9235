package daemon

import (
	"fmt"
	"net/http"
	"sync"
)

// cancels holds the cancel switch of every running invocation, by
// invocation id once it has one: POST /v1/invocations/{id}/cancel and a
// caller that leaves (cancel_on_disconnect) fire it, and the supervisor
// ends the invocation through the deadline path with outcome cancelled.
type cancels struct {
	mu   sync.Mutex
	byID map[string]*cancelSwitch
}

// cancelSwitch is one invocation's: ch is closed once, by fire.
type cancelSwitch struct {
	ch   chan struct{}
	once sync.Once
	id   string
}

func (s *cancelSwitch) fire() { s.once.Do(func() { close(s.ch) }) }

func (c *cancels) open() *cancelSwitch { return &cancelSwitch{ch: make(chan struct{})} }

// name files the switch under the invocation id the start gave it.
func (c *cancels) name(s *cancelSwitch, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil {
		c.byID = map[string]*cancelSwitch{}
	}
	s.id = id
	c.byID[id] = s
}

// close forgets the switch once its invocation has answered.
func (c *cancels) close(s *cancelSwitch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.id != "" && c.byID[s.id] == s {
		delete(c.byID, s.id)
	}
}

// fire cancels the running invocation id; false when none runs.
func (c *cancels) fire(id string) bool {
	c.mu.Lock()
	s := c.byID[id]
	c.mu.Unlock()
	if s == nil {
		return false
	}
	s.fire()
	return true
}

// handleCancel is POST /v1/invocations/{id}/cancel: 202 when the
// invocation runs here and is being ended, 404 when it does not run.
func (d *Daemon) handleCancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !invocationIDPattern().MatchString(id) {
		apiErr(w, kindBadRequest, fmt.Errorf("invocation id %q is malformed", id))
		return
	}
	if !d.cancels.fire(id) {
		apiErr(w, kindNotFound, fmt.Errorf("invocation %s is not running here", id))
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]string{"invocation_id": id, "status": "cancelling"})
}
