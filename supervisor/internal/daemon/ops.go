package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
)

// Operator read endpoints (issue 41.2): the recent invocations (`cyberos
// ps -a`), one invocation's record from the audit (`inspect`) and its
// stderr (`logs`), so an operator needs no access to state_dir.

// recentDefault and recentMax bound GET /v1/invocations?limit=.
const (
	recentDefault = 20
	recentMax     = 1000
)

func (d *Daemon) routesOps(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/invocations", d.handleRecent)
	mux.HandleFunc("GET /v1/invocations/{id}", d.handleInspect)
	mux.HandleFunc("GET /v1/invocations/{id}/logs", d.handleLogs)
}

// handleRecent lists the last ?limit= ended invocations of this host,
// newest first, from their skill.invoked_completed rows.
func (d *Daemon) handleRecent(w http.ResponseWriter, r *http.Request) {
	limit := recentDefault
	if s := r.URL.Query().Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > recentMax {
			apiErr(w, kindBadRequest, fmt.Errorf("limit %q: want 1 to %d", s, recentMax))
			return
		}
		limit = n
	}
	out, err := RecentEnded(r.Context(), d.store, limit)
	if err != nil {
		apiErr(w, kindInternal, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// RecentEnded is the last limit ended invocations in src, newest first.
func RecentEnded(ctx context.Context, src RowSource, limit int) ([]Recent, error) {
	ring := make([]Recent, 0, limit)
	err := src.Each(ctx, auditstore.Filter{Kind: audit.KindInvokedCompleted}, func(row audit.Row) error {
		var p Recent
		if json.Unmarshal(row.Payload, &p) != nil {
			return nil
		}
		p.EndedAt = row.TS
		if len(ring) == limit {
			ring = append(ring[:0], ring[1:]...)
		}
		ring = append(ring, p)
		return nil
	})
	out := make([]Recent, 0, len(ring))
	for i := len(ring) - 1; i >= 0; i-- {
		out = append(out, ring[i])
	}
	return out, err
}

// handleInspect answers an invocation's record: its skill.invoked_started
// and skill.invoked_completed payloads merged (started_at, ended_at and
// running added), and its decided tool calls counted.
func (d *Daemon) handleInspect(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !invocationIDPattern().MatchString(id) {
		apiErr(w, kindBadRequest, fmt.Errorf("invocation id %q is malformed", id))
		return
	}
	src := RowSource(d.store)
	rec, found, err := Inspect(r.Context(), src, id)
	switch {
	case err != nil:
		apiErr(w, kindInternal, err)
	case !found:
		apiErr(w, kindNotFound, fmt.Errorf("no audit rows for invocation %s", id))
	default:
		writeJSON(w, http.StatusOK, rec)
	}
}

// Inspect is invocation id's record from src's rows: its started and
// completed payloads merged, started_at, ended_at, running, and its
// decided tool calls and denials counted.
func Inspect(ctx context.Context, src RowSource, id string) (map[string]any, bool, error) {
	rec := map[string]any{}
	found := false
	calls, denied := 0, 0
	rp := NewReplayer()
	err := src.Each(ctx, auditstore.Filter{InvocationID: id}, func(row audit.Row) error {
		found = true
		if c, ok := rp.Add(row); ok {
			calls++
			if c.Outcome == "denied" {
				denied++
			}
		}
		switch row.Kind {
		case audit.KindInvokedStarted, audit.KindInvokedCompleted:
			var m map[string]any
			if err := json.Unmarshal(row.Payload, &m); err != nil {
				return fmt.Errorf("%s row %d: %w", row.Kind, row.Seq, err)
			}
			for k, v := range m {
				rec[k] = v
			}
			if row.Kind == audit.KindInvokedStarted {
				rec["started_at"] = row.TS
			} else {
				rec["ended_at"] = row.TS
			}
		}
		return nil
	})
	_, ended := rec["ended_at"]
	rec["running"] = found && !ended
	rec["tool_calls"], rec["denied"] = calls, denied
	return rec, found, err
}

// handleLogs answers an invocation's kept stderr (<state_dir>/logs/ID.stderr,
// empty when the skill wrote none). With ?follow=1 on a running
// invocation it waits for the end, when the log is written, and answers
// it then.
func (d *Daemon) handleLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !invocationIDPattern().MatchString(id) {
		apiErr(w, kindBadRequest, fmt.Errorf("invocation id %q is malformed", id))
		return
	}
	if r.URL.Query().Get("follow") == "1" {
		if _, _, sub, live := d.hub.subscribe(id); live {
			func() {
				defer d.hub.unsubscribe(id, sub)
				for {
					select {
					case _, ok := <-sub.ch:
						if !ok {
							return
						}
					case <-r.Context().Done():
						return
					}
				}
			}()
			if r.Context().Err() != nil {
				return
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(d.cfg.StateDir, "logs", id+".stderr"))
	if errors.Is(err, fs.ErrNotExist) {
		// No log: the skill wrote no stderr, or the invocation is unknown.
		if _, found, rerr := Replay(r.Context(), d.store, id); rerr == nil && !found && !d.hub.running(id) {
			apiErr(w, kindNotFound, fmt.Errorf("no invocation %s", id))
			return
		}
		b, err = nil, nil
	}
	if err != nil {
		apiErr(w, kindInternal, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
}
