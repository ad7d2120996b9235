package supervisor

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/sandbox"
)

// gatedAuditor holds every Emit of kind until gate is closed.
type gatedAuditor struct {
	inner Auditor
	kind  audit.Kind
	gate  chan struct{}
}

func (g gatedAuditor) Emit(ctx context.Context, d audit.Draft) (audit.Row, error) {
	if d.Kind == g.kind {
		<-g.gate
	}
	return g.inner.Emit(ctx, d)
}

// TestNoCallReadBeforeTheStartedRowIsDurable: the broker starts while the
// started row is being made durable, and a call that reaches its socket
// then is not read (no answer, no row) until the row is durable; after it,
// the call is judged and its row follows the started row.
func TestNoCallReadBeforeTheStartedRowIsDurable(t *testing.T) {
	inSkill := make(chan struct{})
	f := &fakeRunner{stdout: "{}"}
	f.during = func(sandbox.Spec) { <-inSkill }
	s := newSup(t, f)
	store := s.Audit
	gate := make(chan struct{})
	s.Audit = gatedAuditor{inner: store, kind: audit.KindInvokedStarted, gate: gate}
	type result struct {
		env Envelope
		err error
	}
	done := make(chan result, 1)
	go func() {
		env, err := s.Run(t.Context(), Request{SkillDir: skillDir(t, "")})
		done <- result{env, err}
	}()
	var sock string
	testutil.WaitFor(t, 5*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(s.SocketDir, "*"))
		if len(m) == 1 {
			sock = m[0]
		}
		return sock != ""
	})
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tool.call","params":{"tool":"Bash","args":{"cmd":"true"}}}`)
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	if _, err := c.Write(append(frame, body...)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Fatal("the broker answered a call before the started row was durable")
	}
	if rows, _ := store.(*auditstore.Store).Rows(context.Background(), auditstore.Filter{}); len(rows) != 0 {
		t.Fatalf("%d rows before the started row was durable: %s", len(rows), kinds(rows))
	}
	close(gate)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("no answer once the started row was durable: %v", err)
	}
	close(inSkill)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	s.Audit = store
	if got := kinds(rowsOf(t, s, r.env.InvocationID)); got != "skill.invoked_started,skill.tool_denied,skill.invoked_completed" {
		t.Errorf("rows %s; want the started row, the denied call, the completed row", got)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Error("the broker's socket is left after the invocation")
	}
}
