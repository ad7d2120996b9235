package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"cyberos.dev/audit"
	"cyberos.dev/internal/unixsock"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/telemetry"
)

// SkillIDPattern is what a skill id (its folder name) must match; compiled
// on first use (see policy.nameRE).
var SkillIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })

// DefaultTenant is the tenant of a request that names none.
const DefaultTenant = "00000000-0000-0000-0000-000000000000"

// InvokeRequest is the body of POST /v1/invocations.
type InvokeRequest struct {
	SkillID       string          `json:"skill_id"`
	Version       string          `json:"version,omitempty"`
	Args          json.RawMessage `json:"args,omitempty"`
	TenantID      string          `json:"tenant_id,omitempty"`
	CallerPersona string          `json:"caller_persona,omitempty"`
	// Traceparent is the caller's W3C traceparent. It wins over the
	// request's traceparent header (and that header's tracestate is then
	// not used): the body is what the caller wrote for this invocation.
	// An invalid one here is a 400; an invalid header is ignored, as W3C
	// Trace Context asks.
	Traceparent string `json:"traceparent,omitempty"`
	// DeadlineMS shortens effort_minutes like `skill run --deadline`; at
	// most MaxDeadlineMS, 0 keeps effort_minutes.
	DeadlineMS int64  `json:"deadline_ms,omitempty"`
	RequestID  string `json:"request_id,omitempty"`
	// CancelOnDisconnect: a caller that goes away before the answer
	// cancels the invocation (outcome cancelled), as an MCP client's
	// notifications/cancelled does. Without it the invocation runs on.
	CancelOnDisconnect bool `json:"cancel_on_disconnect,omitempty"`
}

// APIError is the body of every non-200 answer.
type APIError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Daemon is a running supervisor daemon.
type Daemon struct {
	cfg      Config
	sup      *supervisor.Supervisor
	store    *audit.Store
	metrics  *telemetry.Metrics
	log      *slog.Logger
	adminGID int
	hub      *hub
	cancels  cancels // running invocations' cancel switches
	mcpStop  func()  // ends the MCP server's watch of skills_dir
	// requests holds the idempotency records; nil when idempotency_window is 0.
	requests *requests

	inflight atomic.Int64
	// reloadedDefaults are the defaults of the last SIGHUP (reload.go).
	reloadedDefaults atomic.Pointer[Defaults]
	starts           startGate  // sandbox creations in progress
	scav             *scavenger // hands a burst's memory back to the OS

	// reloadedMCP is the mcp_servers of the last SIGHUP that applied one.
	reloadedMCP atomic.Pointer[MCPServers]

	// gate orders the admission of an invocation (wg.Add) before shutdown's
	// wg.Wait: once draining is set under it, nothing is added.
	gate     sync.Mutex
	draining atomic.Bool
	wg       sync.WaitGroup // running invocations
	stop     chan struct{}  // closed: end invocations through the timeout path
	stopOnce sync.Once

	admin   *http.Server
	adminLn net.Listener
	metrSrv *http.Server
	metrLn  net.Listener
	mcpSrv  *http.Server // mcp_http's loopback listener (mcptcp.go); nil when off
	mcpLn   net.Listener
	mcpH    http.Handler // /mcp, served on the admin socket and on mcpLn
}

// Options are what New needs besides the config.
type Options struct {
	Supervisor *supervisor.Supervisor // Audit must be Store; Metrics set
	Store      *audit.Store
	Log        *slog.Logger
}

// MaxInvokeBody is the largest invocation body (413 beyond).
const MaxInvokeBody = 2 << 20

// adminTimeouts are the admin socket's bounds besides
// Config.AdminMaxConnections: how long a request's headers, and the whole
// request with its body, may take to arrive, and how long a keep-alive
// connection may sit idle. Past one, the connection is closed.
type adminTimeouts struct{ header, request, idle time.Duration }

// defaultAdminTimeouts are the timeouts New uses. They are not config keys:
// the callers are local, their requests small (MaxInvokeBody), and no
// operator has a reason to wait longer; tests shorten them (adminServer).
var defaultAdminTimeouts = adminTimeouts{header: 10 * time.Second, request: 30 * time.Second, idle: 2 * time.Minute}

// New prepares a daemon: today's counters from the audit rows, the admin
// socket (mode 0660, root:admin_group) and the metrics listener. Serve runs it.
func New(cfg Config, o Options) (*Daemon, error) {
	gid, err := cfg.AdminGID()
	if err != nil {
		return nil, err
	}
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.Supervisor.Metrics == nil {
		o.Supervisor.Metrics = telemetry.NewMetrics()
	}
	d := &Daemon{cfg: cfg, sup: o.Supervisor, store: o.Store, metrics: o.Supervisor.Metrics, log: log, adminGID: gid,
		hub: newHub(nil), stop: make(chan struct{}), starts: newStartGate(cfg.ConcurrentStarts()), scav: newScavenger()}
	d.metrics.WatchAuditDamage(func() bool { return o.Store.Damage() != nil })
	day := utcDay(time.Now())
	calls, denied, err := CountDay(context.Background(), o.Store, day)
	if err != nil {
		return nil, fmt.Errorf("count today's tool calls from the audit rows: %w", err)
	}
	abuse, err := CountDayKind(context.Background(), o.Store, day, audit.KindProtocolAbuse)
	if err != nil {
		return nil, fmt.Errorf("count today's protocol abuse from the audit rows: %w", err)
	}
	d.hub.seed(day, calls, denied, abuse)
	if cfg.IdempotencyWindow > 0 {
		if d.requests, err = newRequests(cfg.StateDir, time.Duration(cfg.IdempotencyWindow)); err != nil {
			return nil, err
		}
		if err := d.requests.resolveUnnamed(context.Background(), o.Store); err != nil {
			return nil, err
		}
	}
	d.exposeSkills()

	ln, err := listenAdmin(cfg.AdminSocket, gid)
	if err != nil {
		return nil, err
	}
	d.admin, d.adminLn = adminServer(ln, cfg.AdminConnections(), defaultAdminTimeouts, d.routes(), log)
	if cfg.MetricsListen != "" {
		if d.metrLn, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			d.adminLn.Close()
			return nil, fmt.Errorf("metrics_listen %s: %w", cfg.MetricsListen, err)
		}
		mm := http.NewServeMux()
		mm.Handle("GET /metrics", d.metrics.Handler())
		// For probes that reach TCP only (a Kubernetes kubelet's).
		mm.HandleFunc("GET /healthz", healthz)
		d.metrSrv = &http.Server{Handler: mm, ReadHeaderTimeout: 10 * time.Second}
	}
	if cfg.MCPHTTP.Listen != "" {
		if err := d.listenMCPHTTP(d.mcpH); err != nil {
			d.adminLn.Close()
			if d.metrLn != nil {
				d.metrLn.Close()
			}
			return nil, err
		}
	}
	return d, nil
}

// routes is the admin API, behind the peer check.
func (d *Daemon) routes() http.Handler {
	mux := http.NewServeMux()
	d.mcpH = d.mcpHandler()
	mux.Handle("/mcp", d.mcpH)
	mux.HandleFunc("POST /v1/invocations", d.handleInvoke)
	mux.HandleFunc("GET /v1/status", d.handleStatus)
	mux.HandleFunc("GET /v1/mcp/servers", d.handleMCPServers)
	mux.HandleFunc("GET /v1/invocations/{id}/tail", d.handleTail)
	mux.HandleFunc("GET /v1/events", d.handleEvents)
	mux.HandleFunc("GET /v1/skills", d.handleSkills)
	mux.HandleFunc("GET /v1/skills/{id}/files", d.handleSkillFiles)
	mux.HandleFunc("GET /v1/skills/{id}/files/{path...}", d.handleSkillFile)
	mux.HandleFunc("GET /v1/invocations/{id}/replay", d.handleReplay)
	mux.HandleFunc("POST /v1/invocations/{id}/cancel", d.handleCancel)
	d.routesOps(mux)
	mux.HandleFunc("GET /healthz", healthz)
	return d.countRequests(d.authorize(mux))
}

// countRequests counts each admin request in cyberos_admin_requests_total
// by the route pattern it matched ("unmatched" when none did, or the peer
// was refused first) and the status code it got.
func (d *Daemon) countRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := r.Pattern // set by the mux on this request
		if route == "" {
			route = "unmatched"
		}
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		if d.metrics != nil {
			d.metrics.AdminRequests.WithLabelValues(route, strconv.Itoa(code)).Inc()
		}
	})
}

// refused counts an invocation the admin API turned away, by reason.
func (d *Daemon) refused(reason string) {
	if d.metrics != nil {
		d.metrics.AdmissionRefused.WithLabelValues(reason).Inc()
	}
}

// statusWriter remembers the status code written through it; it flushes
// (the tail and events streams) and unwraps as the writer it holds.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// adminServer serves h on ln as the admin socket: at most max connections
// (connCap), and every wait on a caller bounded by t. It returns the server
// and the capped listener to serve it on.
func adminServer(ln net.Listener, max int, t adminTimeouts, h http.Handler, log *slog.Logger) (*http.Server, *connCap) {
	capped := newConnCap(ln, max)
	return &http.Server{
		Handler:           capped.Track(h),
		ReadHeaderTimeout: t.header,
		// Bounds reading the request only: net/http lifts the deadline
		// once the body is in (or at once without one), so a long
		// invocation or a tail stream keeps its connection and context
		// (TestAdminRequestTimeoutSparesTheAnswer).
		// Left in place when a body is not in, it also bounds net/http's
		// reading of what the handler left of it before it answers (which
		// without a deadline waits for ever on a small body held open);
		// past it, the answer says Connection: close.
		ReadTimeout: t.request,
		IdleTimeout: t.idle,
		ConnState:   capped.ConnState,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return capped.ConnContext(context.WithValue(ctx, peerKey{}, peerOf(c)), c)
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}, capped
}

// healthz answers 200 while the daemon serves.
func healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]string{"status": "ok"})
}

// exposeSkills creates the labelled series of every skill installed at
// start at 0, so rates and alerts see them before the first call. Label
// values come only from the registry (folder = frontmatter name).
func (d *Daemon) exposeSkills() {
	skills, problems, err := InstalledSkills(d.cfg.SkillsDir)
	if err != nil {
		d.log.Warn("skills_dir", "err", err)
		return
	}
	for _, p := range problems {
		d.log.Warn("skill not usable", "skill_id", p.ID, "err", p.Err)
	}
	for _, sk := range skills {
		id := sk.Name
		for _, o := range telemetry.InvocationOutcomes() {
			d.metrics.InvokedTotal.WithLabelValues(id, o)
		}
		d.metrics.InvokedDuration.WithLabelValues(id)
		for _, t := range policy.NewEnforcer(sk, policy.EnforcerOptions{}).Tools() {
			for _, o := range telemetry.ToolCallOutcomes() {
				d.metrics.ToolCalls.WithLabelValues(id, string(t), o)
			}
		}
	}
}

// SkillProblem is a folder of skills_dir that is not a usable skill.
type SkillProblem struct {
	ID  string
	Err error
}

// InstalledSkills loads every skill folder of dir, in name order: the
// usable skills (folder name = frontmatter name), and why each other
// folder with a valid skill id as its name is not usable.
func InstalledSkills(dir string) ([]*policy.Policy, []SkillProblem, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var skills []*policy.Policy
	var problems []SkillProblem
	for _, e := range ents {
		id := e.Name()
		if !e.IsDir() || !SkillIDPattern().MatchString(id) {
			continue
		}
		pol, err := policy.LoadSkill(filepath.Join(dir, id))
		if err == nil && pol.Name != id {
			err = fmt.Errorf("the frontmatter name %q is not the folder name", pol.Name)
		}
		if err != nil {
			problems = append(problems, SkillProblem{ID: id, Err: err})
			continue
		}
		skills = append(skills, pol)
	}
	return skills, problems, nil
}

// MetricsAddr is where /metrics listens ("" when disabled).
func (d *Daemon) MetricsAddr() string {
	if d.metrLn == nil {
		return ""
	}
	return d.metrLn.Addr().String()
}

// listenAdmin creates the admin socket: a stale socket file is replaced, any
// other file at the path is an error; the socket is root:gid 0660.
func listenAdmin(path string, gid int) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("admin_socket: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("admin_socket: %s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("admin_socket: %s is in use by another daemon", path)
		}
		os.Remove(path)
	}
	ln, err := unixsock.Listen(path, 0o660) // root's group until the chown
	if err != nil {
		return nil, fmt.Errorf("admin_socket: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if gid < 0 {
		gid = 0
	}
	if err := os.Chown(path, 0, gid); err != nil {
		ln.Close()
		return nil, fmt.Errorf("admin_socket: chown: %w", err)
	}
	return ln, nil
}

type peerKey struct{}

// authorize lets root and members of admin_group through; others get 403
// and the connection is closed.
func (d *Daemon) authorize(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, _ := r.Context().Value(peerKey{}).(peer)
		if !p.ok || !(p.uid == 0 || (d.adminGID >= 0 && p.inGroup(d.adminGID))) {
			d.log.Warn("admin socket: peer refused", "pid", p.pid, "uid", p.uid, "gid", p.gid)
			w.Header().Set("Connection", "close")
			writeJSON(w, http.StatusForbidden, APIError{Error: fmt.Sprintf("uid %d is neither root nor in the admin group", p.uid), Code: "forbidden"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Serve runs until ctx ends (SIGTERM), then shuts down gracefully: new
// requests are refused, running invocations get shutdown_grace to finish,
// then the rest are ended through the timeout path (each gets its
// skill.timeout and completed rows) before Serve returns.
func (d *Daemon) Serve(ctx context.Context) error {
	errc := make(chan error, 3)
	go func() { errc <- d.admin.Serve(d.adminLn) }()
	if d.metrSrv != nil {
		go func() { errc <- d.metrSrv.Serve(d.metrLn) }()
	}
	if d.mcpSrv != nil {
		go func() { errc <- d.mcpSrv.Serve(d.mcpLn) }()
	}
	d.log.Info("supervisor serving", "admin_socket", d.cfg.AdminSocket, "metrics", d.MetricsAddr(), "mcp_http", d.MCPHTTPAddr(), "skills_dir", d.cfg.SkillsDir)
	if err := d.store.Damage(); err != nil {
		d.log.Error("audit store damaged: invocations are refused until it is repaired", "err", err, "severity", "sev-1")
	}
	scrubCtx, stopScrub := context.WithCancel(context.Background())
	scrubDone := make(chan struct{})
	if every := time.Duration(d.cfg.Audit.ScrubInterval); every > 0 && d.store != nil {
		go func() { defer close(scrubDone); d.scrubLoop(scrubCtx, every) }()
	} else {
		close(scrubDone)
	}
	defer func() { stopScrub(); <-scrubDone }()
	// The admin socket has listened since New: connections queue until
	// Serve accepts them, so systemd may start what depends on us.
	d.notify(sddaemon.SdNotifyReady)
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
		if errors.Is(serveErr, http.ErrServerClosed) {
			serveErr = nil
		}
	}
	d.shutdown()
	return serveErr
}

// notify tells systemd (Type=notify, $NOTIFY_SOCKET) of a state change;
// without systemd it does nothing.
func (d *Daemon) notify(state string) {
	if _, err := sddaemon.SdNotify(false, state); err != nil {
		d.log.Warn("sd_notify", "state", state, "err", err)
	}
}

func (d *Daemon) shutdown() {
	d.notify(sddaemon.SdNotifyStopping)
	if d.mcpStop != nil {
		d.mcpStop()
	}
	d.gate.Lock()
	d.draining.Store(true)
	d.gate.Unlock()
	d.log.Info("supervisor stopping: no new invocations", "running", d.inflight.Load(), "grace", time.Duration(d.cfg.ShutdownGrace))
	// Stop accepting connections; requests in progress go on.
	shutCtx, cancel := context.WithCancel(context.Background())
	shutDone := make(chan struct{})
	go func() {
		_ = d.admin.Shutdown(shutCtx)
		close(shutDone)
	}()
	if d.mcpSrv != nil {
		go func() { _ = d.mcpSrv.Shutdown(shutCtx) }()
	}
	done := make(chan struct{})
	go func() {
		d.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Duration(d.cfg.ShutdownGrace)):
		d.log.Warn("shutdown grace over: ending running invocations through the timeout path", "running", d.inflight.Load())
		d.stopOnce.Do(func() { close(d.stop) })
		<-done
	}
	// Every invocation has ended: its sandbox and every warm one are
	// destroyed before the daemon exits.
	d.sup.Drain()
	if d.sup.Warm != nil {
		d.sup.Warm.Close()
	}
	// Give the answers to finished invocations a moment to be written,
	// then close what is left (tail streams of other clients).
	select {
	case <-shutDone:
	case <-time.After(2 * time.Second):
	}
	cancel()
	_ = d.admin.Close()
	if d.mcpSrv != nil {
		_ = d.mcpSrv.Close()
	}
	if d.metrSrv != nil {
		ctx, c := context.WithTimeout(context.Background(), time.Second)
		_ = d.metrSrv.Shutdown(ctx)
		c()
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeRaw sends an answer already encoded by writeJSON's encoder.
func writeRaw(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func apiErr(w http.ResponseWriter, code int, kind string, err error) {
	writeJSON(w, code, APIError{Error: err.Error(), Code: kind})
}

func validText(s string, max int) bool {
	if len(s) > max {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// MaxDeadlineMS bounds deadline_ms: a day, far below the milliseconds a
// time.Duration can hold, so no deadline overflows into a short one.
const MaxDeadlineMS = 86_400_000

func (d *Daemon) handleInvoke(w http.ResponseWriter, r *http.Request) {
	if d.draining.Load() {
		d.refused(telemetry.RefusedShuttingDown)
		apiErr(w, http.StatusServiceUnavailable, "shutting_down", errors.New("the supervisor is shutting down"))
		return
	}
	if err := d.store.Damage(); err != nil {
		d.refused(telemetry.RefusedAuditDamaged)
		apiErr(w, http.StatusServiceUnavailable, "audit_damaged", err)
		return
	}
	tooLarge := func() {
		// The rest of the body is not read: the connection ends with this
		// answer.
		w.Header().Set("Connection", "close")
		apiErr(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Errorf("body: over %d bytes", MaxInvokeBody))
	}
	// A body declared larger than the limit is refused before any of it
	// is read; one without a length (chunked) when it passes the limit.
	if r.ContentLength > MaxInvokeBody {
		tooLarge()
		return
	}
	// The body is read up to MaxInvokeBody bytes, within the admin
	// socket's request timeout (adminServer).
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxInvokeBody))
	if tooBig := (*http.MaxBytesError)(nil); errors.As(err, &tooBig) {
		tooLarge()
		return
	} else if err != nil {
		apiErr(w, http.StatusBadRequest, "bad_request", fmt.Errorf("body: %v", err))
		return
	}
	// A key given twice is refused, as the broker refuses it: the decoder
	// below would keep the last one silently.
	if err := broker.CheckObject(raw); errors.Is(err, broker.ErrDuplicateKey) {
		apiErr(w, http.StatusBadRequest, "bad_request", fmt.Errorf("body: %v", err))
		return
	}
	var req InvokeRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		apiErr(w, http.StatusBadRequest, "bad_request", fmt.Errorf("body: %v", err))
		return
	}
	switch {
	case !SkillIDPattern().MatchString(req.SkillID):
		apiErr(w, http.StatusBadRequest, "bad_request", fmt.Errorf("skill_id %q must match %s", req.SkillID, SkillIDPattern()))
		return
	case !validText(req.TenantID, 128) || !validText(req.CallerPersona, 256) || !validText(req.Version, 64) || !validText(req.RequestID, 128):
		apiErr(w, http.StatusBadRequest, "bad_request", errors.New("tenant_id, caller_persona, version or request_id: too long or holds control characters"))
		return
	case req.DeadlineMS < 0 || req.DeadlineMS > MaxDeadlineMS:
		apiErr(w, http.StatusBadRequest, "bad_request", fmt.Errorf("deadline_ms %d: must be a whole number of milliseconds from 1 to %d (24 h)", req.DeadlineMS, MaxDeadlineMS))
		return
	}
	dir := filepath.Join(d.cfg.SkillsDir, req.SkillID)
	if fi, err := os.Stat(filepath.Join(dir, "SKILL.md")); err != nil || !fi.Mode().IsRegular() {
		apiErr(w, http.StatusNotFound, "not_found", fmt.Errorf("no skill %q in %s", req.SkillID, d.cfg.SkillsDir))
		return
	}
	tenant := req.TenantID
	if tenant == "" {
		tenant = DefaultTenant
	}
	// reply sends the answer; a claimed request_id records it first (an
	// invocation that ran) or forgets the claim (nothing ran).
	var cl claim
	reply := func(code int, v any, ran bool) {
		b := mustJSON(v)
		if cl.own {
			if ran {
				if err := d.requests.finish(cl.key, code, b); err != nil {
					d.log.Error("idempotency record not written", "request_id", req.RequestID, "err", err)
				}
			} else {
				d.requests.drop(cl.key, code, b)
			}
		}
		writeRaw(w, code, b)
	}
	if req.RequestID != "" && d.requests != nil {
		var err error
		cl, err = d.requests.claim(&req, tenant)
		switch {
		case errors.Is(err, errRequestConflict):
			apiErr(w, http.StatusConflict, "request_id_conflict", fmt.Errorf("request_id %q: %w", req.RequestID, err))
			return
		case err != nil:
			apiErr(w, http.StatusServiceUnavailable, "refused", err)
			return
		case cl.wait != nil:
			select {
			case <-cl.wait.done:
				writeRaw(w, cl.wait.status, cl.wait.answer)
			case <-r.Context().Done():
			}
			return
		case cl.rec != nil && cl.rec.Status != 0:
			writeRaw(w, cl.rec.Status, cl.rec.Answer)
			return
		case cl.rec != nil:
			writeJSON(w, http.StatusOK, lostEnvelope(cl.rec))
			return
		}
	}
	n := d.inflight.Add(1)
	if n > int64(d.cfg.MaxConcurrent) {
		d.inflight.Add(-1)
		d.refused(telemetry.RefusedMaxConcurrent)
		reply(http.StatusTooManyRequests, APIError{Code: "too_many_invocations", Error: fmt.Sprintf("max_concurrent (%d) invocations are running", d.cfg.MaxConcurrent)}, false)
		return
	}
	d.scav.admitted(n)
	d.gate.Lock()
	if d.draining.Load() { // raced with the start of shutdown
		d.gate.Unlock()
		d.inflight.Add(-1)
		d.refused(telemetry.RefusedShuttingDown)
		reply(http.StatusServiceUnavailable, APIError{Code: "shutting_down", Error: "the supervisor is shutting down"}, false)
		return
	}
	d.wg.Add(1)
	d.gate.Unlock()
	defer func() {
		d.scav.ended(d.inflight.Add(-1), d.inflight.Load)
		d.wg.Done()
	}()
	traceparent, tracestate := req.Traceparent, ""
	if traceparent == "" {
		traceparent, tracestate = telemetry.FromHeaders(r.Header)
	}
	var id string
	cancel := d.cancels.open()
	defer d.cancels.close(cancel)
	if req.CancelOnDisconnect {
		stop := context.AfterFunc(r.Context(), cancel.fire)
		defer stop()
	}
	def := supervisor.Defaults(d.currentDefaults())
	env, err := d.sup.Run(supervisor.Request{
		SkillDir: dir, SkillID: req.SkillID, Version: req.Version, Args: req.Args,
		TenantID: tenant, Persona: req.CallerPersona, Traceparent: traceparent, Tracestate: tracestate,
		Deadline: time.Duration(req.DeadlineMS) * time.Millisecond, RequestID: req.RequestID,
		Defaults: &def,
		Ceilings: d.cfg.Limits.Ceilings(),
		OnStarted: func(s supervisor.Started) {
			id = s.InvocationID
			d.cancels.name(cancel, id)
			if cl.own {
				d.requests.started(cl.key, s.InvocationID)
			}
			d.hub.startedAs(s, req.RequestID)
		},
		OnToolCall:      d.hub.decided,
		OnProtocolAbuse: func(kind string) { d.hub.protocolAbuse(id, kind) },
		Stop:            d.stop,
		Cancel:          cancel.ch,
		// Admitted; a cold sandbox is created once a start slot is free. A
		// caller that gives up meanwhile leaves the line, and nothing runs.
		StartSlot: func() (func(), error) { return d.starts.enter(r.Context(), d.stop) },
	})
	if id != "" {
		outcome := string(env.Outcome)
		if err != nil && outcome == "" {
			outcome = "error"
		}
		d.hub.ended(id, outcome)
	}
	switch {
	case errors.Is(err, supervisor.ErrNotFound):
		reply(http.StatusNotFound, APIError{Code: "not_found", Error: err.Error()}, false)
	case errors.Is(err, supervisor.ErrInvalidSkill), errors.Is(err, supervisor.ErrInvalidRequest):
		reply(http.StatusBadRequest, APIError{Code: "invalid", Error: err.Error()}, false)
	case errors.Is(err, supervisor.ErrAuditIncomplete):
		// The skill ran; its record is not durable: never a success.
		reply(http.StatusServiceUnavailable, APIError{Code: "audit_incomplete", Error: err.Error()}, true)
	case errors.Is(err, supervisor.ErrNotStarted):
		reply(http.StatusServiceUnavailable, APIError{Code: "not_started", Error: err.Error()}, false)
	case errors.Is(err, supervisor.ErrRefused):
		reply(http.StatusServiceUnavailable, APIError{Code: "refused", Error: err.Error()}, false)
	case err != nil:
		reply(http.StatusInternalServerError, APIError{Code: "internal", Error: err.Error()}, false)
	default:
		reply(http.StatusOK, env, true)
	}
}

func (d *Daemon) handleStatus(w http.ResponseWriter, _ *http.Request) {
	st := d.hub.status()
	if r, ok := d.sup.Runner.(interface{ CgroupWhere() string }); ok {
		st.SandboxCgroups = r.CgroupWhere()
	}
	writeJSON(w, http.StatusOK, st)
}

// invocationIDPattern is what an invocation id in a path must match;
// compiled on first use (see policy.nameRE).
var invocationIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })

func (d *Daemon) handleReplay(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !invocationIDPattern().MatchString(id) {
		apiErr(w, http.StatusBadRequest, "bad_request", fmt.Errorf("invocation id %q is malformed", id))
		return
	}
	calls, found, err := Replay(r.Context(), d.store, id)
	switch {
	case err != nil:
		apiErr(w, http.StatusInternalServerError, "internal", err)
	case !found:
		apiErr(w, http.StatusNotFound, "not_found", fmt.Errorf("no audit rows for invocation %s", id))
	default:
		writeJSON(w, http.StatusOK, calls)
	}
}

// handleTail streams one JSON line per decided tool call: the calls so far,
// then live ones until the invocation ends. A finished invocation's calls
// come from its audit rows. A reader too slow to keep up is cut off with an
// error line rather than ever blocking the broker.
func (d *Daemon) handleTail(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !invocationIDPattern().MatchString(id) {
		apiErr(w, http.StatusBadRequest, "bad_request", fmt.Errorf("invocation id %q is malformed", id))
		return
	}
	past, truncated, sub, live := d.hub.subscribe(id)
	if !live {
		calls, found, err := Replay(r.Context(), d.store, id)
		if err != nil {
			apiErr(w, http.StatusInternalServerError, "internal", err)
			return
		}
		if !found {
			apiErr(w, http.StatusNotFound, "not_found", fmt.Errorf("no invocation %s", id))
			return
		}
		past = calls
	} else {
		defer d.hub.unsubscribe(id, sub)
	}
	line := ndjson(w)
	if truncated {
		line(map[string]string{"warning": fmt.Sprintf("only the first %d calls were kept for late tails; see replay", historyCap)})
	}
	for _, ev := range past {
		if !line(ev) {
			return
		}
	}
	if !live {
		return
	}
	for {
		select {
		case ev, ok := <-sub.ch:
			if !ok {
				if d.hub.overflowed(sub) {
					line(APIError{Error: "tail fell behind by more than the buffer; events dropped, stream ended (see replay)", Code: "overflow"})
				}
				return
			}
			if !line(ev) {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

func sortViews(v []ActiveView) {
	sort.Slice(v, func(i, j int) bool {
		if v[i].StartedAt != v[j].StartedAt {
			return v[i].StartedAt < v[j].StartedAt
		}
		return strings.Compare(v[i].InvocationID, v[j].InvocationID) < 0
	})
}

// handleEvents streams every invocation's start, tool calls and end as
// they happen (?skill=ID: that skill's only), one JSON object per line,
// after a first "watching" line; like `docker events`, it has no past.
func (d *Daemon) handleEvents(w http.ResponseWriter, r *http.Request) {
	skill := r.URL.Query().Get("skill")
	if skill != "" && !SkillIDPattern().MatchString(skill) {
		apiErr(w, http.StatusBadRequest, "bad_request", fmt.Errorf("skill %q must match %s", skill, SkillIDPattern()))
		return
	}
	wt := d.hub.watch(skill)
	defer d.hub.unwatch(wt)
	line := ndjson(w)
	if !line(Event{Type: EventWatching, SkillID: skill}) {
		return
	}
	for {
		select {
		case ev, ok := <-wt.ch:
			if !ok {
				if d.hub.watcherOverflowed(wt) {
					line(APIError{Error: "events fell behind by more than the buffer; events dropped, stream ended", Code: "overflow"})
				}
				return
			}
			if !line(ev) {
				return
			}
		case <-r.Context().Done():
			return
		case <-d.stop:
			return
		}
	}
}

// SkillList is GET /v1/skills: the skills of skills_dir as the next
// invocation would load them (SKILL.md is read again now), and the
// folders that are not usable, with why.
type SkillList struct {
	Skills   []*policy.Policy `json:"skills"`
	Unusable []UnusableSkill  `json:"unusable"`
}

// UnusableSkill is a folder of skills_dir that is not a usable skill.
type UnusableSkill struct {
	SkillID string `json:"skill_id"`
	Error   string `json:"error"`
}

func (d *Daemon) handleSkills(w http.ResponseWriter, _ *http.Request) {
	skills, problems, err := InstalledSkills(d.cfg.SkillsDir)
	if err != nil {
		apiErr(w, http.StatusInternalServerError, "internal", fmt.Errorf("skills_dir: %w", err))
		return
	}
	list := SkillList{Skills: skills, Unusable: []UnusableSkill{}}
	if list.Skills == nil {
		list.Skills = []*policy.Policy{}
	}
	for _, p := range problems {
		list.Unusable = append(list.Unusable, UnusableSkill{SkillID: p.ID, Error: p.Err.Error()})
	}
	writeJSON(w, http.StatusOK, list)
}

// ndjson starts a 200 application/x-ndjson answer and returns the function
// that writes one line of it and flushes it to the reader (false once the
// reader is gone).
func ndjson(w http.ResponseWriter) func(v any) bool {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	return func(v any) bool {
		if err := enc.Encode(v); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		return true
	}
}
