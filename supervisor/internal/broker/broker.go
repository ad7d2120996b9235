// Package broker is the only way a skill reaches tools: a per-invocation
// Unix socket speaking length-prefixed JSON-RPC 2.0, where every tool.call
// is enforced against the skill's policy, audited before and after it runs,
// and refused with -32603 and a data.reason when it may not run.
package broker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/internal/unixsock"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/telemetry"
	"cyberos.dev/wire"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func tracerOrNoop(t trace.Tracer) trace.Tracer {
	if t == nil {
		return noop.NewTracerProvider().Tracer("")
	}
	return t
}

// Defaults of Config's zero values.
const (
	DefaultNoConnectAfter = 60 * time.Second
	DefaultFrameTimeout   = 10 * time.Second
	DefaultMaxConns       = 16
	// DefaultAcceptsPerSecond bounds how fast one invocation's connections
	// are accepted (DefaultAcceptBurst at once): a connect/close loop costs
	// the supervisor at most that many connections' work per second, and
	// the skill's connect(2) waits in the listen backlog meanwhile.
	DefaultAcceptsPerSecond = 100
	DefaultAcceptBurst      = 100
	// logBurst is how many lines of one repeated per-connection warning an
	// invocation logs before the rest are only counted (and summarised
	// when the broker closes).
	logBurst = 5
)

// SocketName returns the socket's file name for an invocation.
func SocketName(invocationID string) string {
	return "cyberos-skill-broker." + invocationID + ".sock"
}

// maxSocketPath is sun_path's size less its NUL (104 on the BSDs).
const maxSocketPath = 103

// invocationIDPattern keeps the invocation id a single, tame path element;
// compiled on first use (see policy.nameRE).
var invocationIDPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })

// Config is one invocation's broker.
type Config struct {
	// Socket, when set, is the socket to serve, made beforehand with
	// Listen (SocketDir, SocketUID and SocketGID are then not used).
	Socket *Socket
	// SocketDir holds the socket. It must exist, be a real directory (not a
	// symlink) owned by the user running the broker (root in production)
	// and have mode 0700 or 0711.
	SocketDir string
	// Common is carried by every audit row (InvocationID and SkillID are
	// required); each call's row gets the call's own trace id.
	Common audit.Common
	// Traceparent is the invocation's W3C traceparent, used by calls that
	// bring none. Empty: one is made from Common.TraceID, or a new trace.
	Traceparent string
	// Env is given to every tool call; Env.Enforcer is required.
	Env *tools.Env
	// Tools is the registry; it must pass tools.CheckRegistry.
	Tools map[policy.Tool]tools.Tool
	// Sources hold the tools registered besides the native ones (MCP
	// servers'), looked up by name once the enforcer allows the call. A
	// source that is an io.Closer is closed by Close, once every call
	// ended (per-invocation servers end with their invocation).
	Sources []tools.Source
	// Audit makes rows durable. Required.
	Audit Auditor
	// Metrics may be nil (no metrics).
	Metrics *telemetry.Metrics
	// Log may be nil (no logs). It carries the invocation's attributes
	// (the supervisor's does: invocation_id, skill_id, tenant_id,
	// trace_id); the broker adds none of its own to every line.
	Log *slog.Logger
	// SocketUID and SocketGID own the socket file: the uid the sandbox's
	// skill is seen as on the host (the mapped uid under a user namespace).
	// A peer must be this uid or root.
	SocketUID, SocketGID int
	// AllowPeer, when set, must accept the pid of every connecting process
	// (from SO_PEERCRED), e.g. "is in the invocation's cgroup". Refused
	// peers are closed at once and logged. Nil accepts any pid of an
	// allowed uid.
	AllowPeer func(pid int32) bool
	// Hold, when set, keeps the broker from accepting a connection until
	// it is closed: the supervisor starts the broker while the started row
	// is made durable, and closes Hold once it is, so that no call is read
	// before. Connections wait in the listen backlog meanwhile.
	Hold <-chan struct{}
	// NoConnectAfter: when no accepted connection arrived this long after
	// Start, a skill.no_connect row is emitted (once) and OnNoConnect
	// called; the broker keeps listening. Default 60 s; negative disables.
	NoConnectAfter time.Duration
	OnNoConnect    func()
	// RatePerMinute caps admitted tool calls in any 60 s window of this
	// invocation (the policy's x-rate-limit-per-minute); 0 is unbounded.
	RatePerMinute int
	// FrameTimeout bounds reading one frame once its first byte arrived,
	// and writing one response. Default 10 s.
	FrameTimeout time.Duration
	// MaxConns bounds simultaneous connections; more are closed at once
	// (and recorded as protocol abuse). Default 16.
	MaxConns int
	// AcceptsPerSecond bounds the rate connections are accepted at (burst
	// AcceptBurst). Defaults DefaultAcceptsPerSecond, DefaultAcceptBurst.
	AcceptsPerSecond, AcceptBurst int
	// MaxAuditRows caps the rows this broker writes for the invocation
	// (tool rows, protocol abuse, no_connect and the cap's own row); 0 is
	// unbounded. The rows of one call are reserved before it is decided, so
	// every call up to the cap is audited in full. The call that would go
	// over is refused unaudited with audit_cap_reached, as is every later
	// one; a skill.audit_cap_reached row is written once and OnAuditCap
	// called (the supervisor ends the invocation).
	MaxAuditRows int
	OnAuditCap   func()
	// OtherAuditRows are the invocation's rows written outside the broker
	// (the supervisor's started, timeout and completed rows), counted
	// against MaxAuditRows.
	OtherAuditRows int
	// OnProtocolAbuse, when set, is called at the first abuse of each kind
	// (when its skill.protocol_abuse row is written). It must not block.
	OnProtocolAbuse func(kind string)
	// OnDecided, when set, is called once for every tool.call that was
	// decided (completed, in any outcome, or denied), after its rows were
	// handed to the audit sink. It runs on the dispatch path: it must not
	// block (the daemon's fan-out drops events for slow subscribers).
	OnDecided func(Decided)
	// Tracer makes the skill.broker.tool_call spans and their per-tool
	// children (skill.tool.<tool>.exec). Nil: no spans.
	Tracer trace.Tracer
	// Budget, when set, is the daemon's budget of response bytes in flight,
	// shared by every invocation's broker (NewBudget); nil: none.
	Budget *Budget
	// InvocationBudget is this invocation's budget of response bytes in
	// flight (budget.go). Default DefaultInvocationBudget.
	InvocationBudget int64
	// SpanParent, when set, carries the span that calls bringing no
	// traceparent of their own are children of (the invocation's
	// skill.invoke span). A call with its own traceparent is a child of that.
	SpanParent context.Context
}

// Broker is one invocation's running broker.
type Broker struct {
	cfg  Config
	path string
	ln   *net.UnixListener
	d    *dispatcher
	log  *slog.Logger

	ctx    context.Context // cancelled by Close: tools still running hurry up
	cancel context.CancelFunc

	mu        sync.Mutex
	conns     map[*net.UnixConn]struct{}
	closed    bool
	wg        sync.WaitGroup // the accept loop and every connection
	closeOnce sync.Once

	connected   atomic.Bool
	noConnTimer *time.Timer
	accepts     bucket // touched by the accept loop only
}

// Start validates cfg, creates the socket and starts serving.
func Start(cfg Config) (*Broker, error) {
	if err := tools.CheckRegistry(cfg.Tools); err != nil {
		return nil, fmt.Errorf("broker: tool registry: %w", err)
	}
	switch {
	case cfg.Env == nil || cfg.Env.Enforcer == nil:
		return nil, errors.New("broker: no enforcer (Env.Enforcer is required)")
	case cfg.Audit == nil:
		return nil, errors.New("broker: no audit sink")
	case cfg.Common.InvocationID == "" || cfg.Common.SkillID == "":
		return nil, errors.New("broker: Common.InvocationID and Common.SkillID are required")
	case !invocationIDPattern().MatchString(cfg.Common.InvocationID):
		return nil, fmt.Errorf("broker: invocation id %q is not usable in a socket name", cfg.Common.InvocationID)
	case cfg.RatePerMinute < 0:
		return nil, errors.New("broker: negative RatePerMinute")
	case cfg.MaxAuditRows < 0 || cfg.OtherAuditRows < 0 || cfg.MaxAuditRows > 0 && toolRowBudget(cfg.MaxAuditRows, cfg.OtherAuditRows) < 3:
		return nil, fmt.Errorf("broker: MaxAuditRows %d: want 0 (unbounded) or at least %d", cfg.MaxAuditRows, cfg.OtherAuditRows+reservedRows+3)
	}
	tp, err := invocationTraceparent(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.NoConnectAfter == 0 {
		cfg.NoConnectAfter = DefaultNoConnectAfter
	}
	if cfg.FrameTimeout <= 0 {
		cfg.FrameTimeout = DefaultFrameTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.AcceptsPerSecond <= 0 {
		cfg.AcceptsPerSecond = DefaultAcceptsPerSecond
	}
	if cfg.AcceptBurst <= 0 {
		cfg.AcceptBurst = DefaultAcceptBurst
	}
	if cfg.InvocationBudget <= 0 {
		cfg.InvocationBudget = DefaultInvocationBudget
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}

	var ln *net.UnixListener
	var path string
	if cfg.Socket != nil {
		ln, path = cfg.Socket.ln, cfg.Socket.path
	} else {
		sock, err := Listen(cfg.SocketDir, cfg.Common.InvocationID, cfg.SocketUID, cfg.SocketGID)
		if err != nil {
			return nil, err
		}
		ln, path = sock.ln, sock.path
	}

	tc, _ := telemetry.ParseTraceparent(tp) // valid: invocationTraceparent checked it
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		cfg: cfg, path: path, ln: ln, log: log, ctx: ctx, cancel: cancel,
		conns: map[*net.UnixConn]struct{}{},
		d: &dispatcher{
			common: cfg.Common, env: cfg.Env, tools: cfg.Tools, sources: cfg.Sources, audit: cfg.Audit,
			metrics: cfg.Metrics, log: log, traceparent: tp, tc: tc,
			onDecided: cfg.OnDecided, tracer: tracerOrNoop(cfg.Tracer), spanParent: cfg.SpanParent,
			limiter: &window{limit: cfg.RatePerMinute},
			started: time.Now(), now: time.Now,
			rows:       rowBudget{max: int64(cfg.MaxAuditRows), limit: toolRowBudget(cfg.MaxAuditRows, cfg.OtherAuditRows)},
			onAuditCap: cfg.OnAuditCap,
			onAbuse:    cfg.OnProtocolAbuse,
			invMem:     NewBudget(cfg.InvocationBudget, "the invocation's"),
			daemonMem:  cfg.Budget,
		},
		accepts: bucket{rate: float64(cfg.AcceptsPerSecond), burst: float64(cfg.AcceptBurst), tokens: float64(cfg.AcceptBurst), last: time.Now()},
	}
	if cfg.NoConnectAfter > 0 {
		b.noConnTimer = time.AfterFunc(cfg.NoConnectAfter, b.noConnect)
	}
	b.wg.Add(1)
	go b.accept()
	log.Debug("broker: listening", "socket", path)
	return b, nil
}

// invocationTraceparent is the traceparent calls without their own get.
func invocationTraceparent(cfg Config) (string, error) {
	if cfg.Traceparent != "" {
		tc, err := telemetry.ParseTraceparent(cfg.Traceparent)
		if err != nil {
			return "", fmt.Errorf("broker: invocation traceparent: %w", err)
		}
		return tc.String(), nil
	}
	tc := telemetry.NewTraceContext()
	if cfg.Common.TraceID != "" {
		tc.TraceID = cfg.Common.TraceID
		if _, err := telemetry.ParseTraceparent(tc.String()); err != nil {
			return "", fmt.Errorf("broker: Common.TraceID %q is not a W3C trace id", cfg.Common.TraceID)
		}
	}
	return tc.String(), nil
}

// checkSocketDir refuses a socket directory others could write to or swap.
func checkSocketDir(dir string) error {
	if dir == "" || !filepath.IsAbs(dir) {
		return fmt.Errorf("broker: socket dir %q must be an absolute path", dir)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("broker: socket dir: %w", err)
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("broker: socket dir %s is a symlink", dir)
	case !fi.IsDir():
		return fmt.Errorf("broker: socket dir %s is not a directory", dir)
	case fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0o700 &&
		fi.Mode()&(os.ModePerm|os.ModeSetuid|os.ModeSetgid|os.ModeSticky) != 0o711:
		return fmt.Errorf("broker: socket dir %s has mode %04o, want 0700 or 0711", dir, fi.Mode().Perm())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("broker: socket dir %s: no owner information", dir)
	}
	if int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("broker: socket dir %s is owned by uid %d, want %d", dir, st.Uid, os.Geteuid())
	}
	return nil
}

// Socket is a broker socket made before its broker: a warm sandbox's,
// bind-mounted into it when it is made. Config.Socket hands it to the
// broker, which serves and closes it; Close discards an unused one.
type Socket struct {
	ln   *net.UnixListener
	path string
}

// Listen makes the socket of sandbox id in dir (SocketName(id)), owned by
// uid:gid, for a broker started later.
func Listen(dir, id string, uid, gid int) (*Socket, error) {
	if !invocationIDPattern().MatchString(id) {
		return nil, fmt.Errorf("broker: sandbox id %q is not usable in a socket name", id)
	}
	if err := checkSocketDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, SocketName(id))
	ln, err := listen(path, uid, gid)
	if err != nil {
		return nil, err
	}
	return &Socket{ln: ln, path: path}, nil
}

// Path is the socket's host path.
func (s *Socket) Path() string { return s.path }

// Close closes and unlinks a socket no broker took.
func (s *Socket) Close() error { return s.ln.Close() }

// listen binds the socket, which must not exist yet (bind(2) never
// replaces a file, so an attacker's file or symlink is refused, not
// unlinked), with mode 0600 from the moment it exists (unixsock.Listen),
// then gives it its owner.
func listen(path string, uid, gid int) (*net.UnixListener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("broker: socket path %s is longer than %d bytes", path, maxSocketPath)
	}
	if _, err := os.Lstat(path); err == nil {
		return nil, fmt.Errorf("broker: %s already exists; refusing to replace it", path)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("broker: %w", err)
	}
	ln, err := unixsock.Listen(path, 0o600)
	if err != nil {
		return nil, fmt.Errorf("broker: listen: %w", err)
	}
	if err := os.Lchown(path, uid, gid); err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker: socket owner: %w", err)
	}
	return ln, nil
}

// Path is the socket's host path (bind-mount it into the sandbox).
func (b *Broker) Path() string { return b.path }

// ProtocolAbuse returns the invocation's protocol abuse counts by kind
// (nil when none).
func (b *Broker) ProtocolAbuse() map[string]int64 { return b.d.protocolAbuse() }

// AuditCapReached reports whether the invocation reached its audit row cap.
func (b *Broker) AuditCapReached() bool { return b.d.capped.Load() }

// Stats are the invocation's counters (also the broker.status result).
func (b *Broker) Stats() Stats { return b.d.stats() }

// Close stops accepting, removes the socket, tells running tools to stop
// (their context is cancelled), closes every connection and waits for the
// calls in flight to finish and be audited. It is idempotent.
func (b *Broker) Close() error {
	var err error
	b.closeOnce.Do(func() {
		if b.noConnTimer != nil {
			b.noConnTimer.Stop()
		}
		b.mu.Lock()
		b.closed = true
		err = b.ln.Close() // unlinks the socket file
		for c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.cancel()
		b.wg.Wait()
		for _, src := range b.cfg.Sources {
			if c, ok := src.(io.Closer); ok {
				if cerr := c.Close(); cerr != nil {
					b.log.Warn("broker: closing a tool source", "err", cerr)
				}
			}
		}
		b.d.pending.Wait() // every queued completed row is durable (or logged)
		b.d.logSuppressed()
		if _, serr := os.Lstat(b.path); serr == nil {
			if rerr := os.Remove(b.path); rerr != nil && err == nil {
				err = rerr
			}
		}
		b.log.Debug("broker: closed", "tool_calls", b.d.toolCalls.Load(), "denied", b.d.denied.Load())
	})
	return err
}

// noConnect fires NoConnectAfter after Start unless a connection came.
func (b *Broker) noConnect() {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed || b.connected.Load() {
		return
	}
	waited := b.cfg.NoConnectAfter.Milliseconds()
	b.log.Warn("broker: the skill never connected", "waited", b.cfg.NoConnectAfter)
	if _, err := b.cfg.Audit.Emit(context.Background(), audit.NoConnect(b.cfg.Common, waited)); err != nil { // reserved in the row budget
		b.log.Error("broker: no_connect row not written", "err", err)
	}
	if b.cfg.OnNoConnect != nil {
		b.cfg.OnNoConnect()
	}
}

func (b *Broker) accept() {
	defer b.wg.Done()
	if b.cfg.Hold != nil {
		select {
		case <-b.cfg.Hold:
		case <-b.ctx.Done():
			return
		}
	}
	var backoff time.Duration
	for {
		c, err := b.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: wait a little rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			b.d.warn("broker: accept", "err", err)
			select {
			case <-time.After(backoff):
			case <-b.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		if wait := b.accepts.take(time.Now()); wait > 0 {
			// Over the accept rate: this connection waits its turn, and the
			// next ones wait in the listen backlog.
			select {
			case <-time.After(wait):
			case <-b.ctx.Done():
				c.Close()
				return
			}
		}
		if !b.admit(c) {
			c.Close()
			continue
		}
		b.wg.Add(1)
		go b.serve(c)
	}
}

// admit checks the peer (SO_PEERCRED) and the connection count, and
// registers the connection.
func (b *Broker) admit(c *net.UnixConn) bool {
	cred, err := peerCred(c)
	if err != nil {
		b.d.warn("broker: peer refused: credentials unavailable", "err", err)
		b.d.abuse(audit.AbuseRefusedPeer, "peer credentials unavailable")
		return false
	}
	if cred.uid != 0 && int64(cred.uid) != int64(b.cfg.SocketUID) {
		b.d.warn("broker: peer refused: uid", "pid", cred.pid, "uid", cred.uid)
		b.d.abuse(audit.AbuseRefusedPeer, fmt.Sprintf("peer pid %d (host) uid %d is not the skill's", cred.pid, cred.uid))
		return false
	}
	if b.cfg.AllowPeer != nil && !b.cfg.AllowPeer(cred.pid) {
		b.d.warn("broker: peer refused: pid not allowed", "pid", cred.pid, "uid", cred.uid)
		b.d.abuse(audit.AbuseRefusedPeer, fmt.Sprintf("peer pid %d (host) is not in the sandbox", cred.pid))
		return false
	}
	b.mu.Lock()
	closed, full := b.closed, len(b.conns) >= b.cfg.MaxConns
	if !closed && !full {
		b.conns[c] = struct{}{}
		b.connected.Store(true)
	}
	b.mu.Unlock()
	if full && !closed {
		b.d.warn("broker: connection refused: too many connections", "max", b.cfg.MaxConns, "pid", cred.pid)
		b.d.abuse(audit.AbuseTooManyConns, fmt.Sprintf("over %d simultaneous connections", b.cfg.MaxConns))
	}
	return !closed && !full
}

// serve reads frames and answers them in order until the peer goes, a frame
// breaks the stream, or the broker closes. Between frames a connection may
// idle; once a frame's first byte arrives the rest must follow within
// FrameTimeout.
func (b *Broker) serve(c *net.UnixConn) {
	defer b.wg.Done()
	defer func() {
		b.mu.Lock()
		delete(b.conns, c)
		b.mu.Unlock()
		c.Close()
	}()
	br := bufio.NewReaderSize(c, 4<<10) // a longer body is read past the buffer
	for {
		if err := c.SetReadDeadline(time.Time{}); err != nil {
			return
		}
		if _, err := br.Peek(1); err != nil {
			return // EOF, or closed by Close
		}
		if err := c.SetReadDeadline(time.Now().Add(b.cfg.FrameTimeout)); err != nil {
			return
		}
		if hdr, err := br.Peek(wire.HeaderLen); err == nil && textPrefix(hdr) {
			// Text where a length prefix belongs (an HTTP request, JSON
			// sent unframed): not this protocol. Say so and hang up rather
			// than wait for the gigabyte such a prefix announces.
			b.d.warn("broker: bytes that are not a framed request", "prefix_len", wire.BodyLen(hdr))
			b.d.abuse(audit.AbuseNotJSONRPC, "text where a frame's length prefix belongs")
			_ = b.write(c, b.d.encode(b.d.errorResponse(nullID, errParse)))
			return
		}
		body, err := ReadFrame(br, MaxRequest)
		var resp [][]byte
		var tl *FrameTooLargeError
		f := b.d.frameMem()
		switch {
		case err == nil:
			resp = b.d.respond(b.ctx, body, f)
		case errors.As(err, &tl):
			b.d.warn("broker: request over the cap", "bytes", tl.Length, "discarded", tl.Err == nil)
			b.d.abuse(audit.AbuseOversizedFrame, fmt.Sprintf("frame of %d bytes over the %d-byte cap", tl.Length, MaxRequest))
			resp = b.d.encodeParts(b.d.errorResponse(nullID, err))
			if tl.Err != nil { // the stream is lost: say why, then hang up
				_ = b.write(c, resp...)
				return
			}
		default:
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				b.d.warn("broker: connection dropped mid-frame", "err", err)
				b.d.abuse(audit.AbuseTruncatedFrame, "connection dropped or stalled inside a frame")
			}
			return
		}
		if resp == nil {
			f.release()
			continue
		}
		err = b.write(c, resp...)
		f.release() // the response's bytes are the kernel's now
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				b.d.warn("broker: response not written", "err", err)
			}
			return
		}
	}
}

// textPrefix reports whether a frame's 4-byte length prefix is printable
// text (every such prefix is far over MaxRequest).
func textPrefix(hdr []byte) bool {
	for _, c := range hdr {
		if (c < 0x20 || c > 0x7e) && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// bucket is a token bucket: take returns how long to wait before the
// next token (0: take it now). An empty bucket waits for acceptBatch
// tokens, so a flood wakes the accept loop a tenth as often. It is not
// safe for concurrent use.
type bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

const acceptBatch = 10

func (k *bucket) take(now time.Time) time.Duration {
	k.tokens = min(k.burst, k.tokens+now.Sub(k.last).Seconds()*k.rate)
	k.last = now
	k.tokens--
	if k.tokens >= 0 {
		return 0
	}
	return time.Duration((-k.tokens + min(acceptBatch, k.burst) - 1) / k.rate * float64(time.Second))
}

// write sends one response, the concatenation of parts, within
// FrameTimeout. The dispatcher has already cut anything over the response
// cap.
func (b *Broker) write(c *net.UnixConn, parts ...[]byte) error {
	if err := c.SetWriteDeadline(time.Now().Add(b.cfg.FrameTimeout)); err != nil {
		return err
	}
	return writeFrameParts(c, parts, MaxResponse)
}
