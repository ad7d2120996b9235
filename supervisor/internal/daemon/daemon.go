package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	sddaemon "github.com/coreos/go-systemd/v22/daemon"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/internal/unixsock"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/config"
	"cyberos.dev/telemetry"
)

// SkillIDPattern is what a skill id (its folder name) must match; compiled
// on first use (see policy.nameRE).
var SkillIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`) })

// APIError is the body of every non-200 answer.
type APIError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Daemon is a running supervisor daemon.
type Daemon struct {
	cfg      config.Config
	sup      *supervisor.Supervisor
	store    *auditstore.Store
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
	reloadedDefaults atomic.Pointer[config.Defaults]
	starts           startGate  // sandbox creations in progress
	scav             *scavenger // hands a burst's memory back to the OS

	// reloadedMCP is the mcp_servers of the last SIGHUP that applied one.
	reloadedMCP atomic.Pointer[config.MCPServers]

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
	Store      *auditstore.Store
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
func New(cfg config.Config, o Options) (*Daemon, error) {
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
			apiErr(w, kindForbidden, fmt.Errorf("uid %d is neither root nor in the admin group", p.uid))
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
		apiErr(w, kindBadRequest, fmt.Errorf("invocation id %q is malformed", id))
		return
	}
	calls, found, err := Replay(r.Context(), d.store, id)
	switch {
	case err != nil:
		apiErr(w, kindInternal, err)
	case !found:
		apiErr(w, kindNotFound, fmt.Errorf("no audit rows for invocation %s", id))
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
		apiErr(w, kindBadRequest, fmt.Errorf("invocation id %q is malformed", id))
		return
	}
	past, truncated, sub, live := d.hub.subscribe(id)
	if !live {
		calls, found, err := Replay(r.Context(), d.store, id)
		if err != nil {
			apiErr(w, kindInternal, err)
			return
		}
		if !found {
			apiErr(w, kindNotFound, fmt.Errorf("no invocation %s", id))
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
		apiErr(w, kindBadRequest, fmt.Errorf("skill %q must match %s", skill, SkillIDPattern()))
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

func (d *Daemon) handleSkills(w http.ResponseWriter, _ *http.Request) {
	skills, problems, err := InstalledSkills(d.cfg.SkillsDir)
	if err != nil {
		apiErr(w, kindInternal, fmt.Errorf("skills_dir: %w", err))
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
