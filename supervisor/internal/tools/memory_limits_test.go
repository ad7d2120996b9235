package tools

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"cyberos.dev/memory"
	"cyberos.dev/policy"
)

// mtSkillErr is err's SkillError of class, failing t otherwise.
func mtSkillErr(t *testing.T, err error, class error) *SkillError {
	t.Helper()
	var se *SkillError
	if !errors.As(err, &se) || !errors.Is(err, class) {
		t.Fatalf("error = %v, want a SkillError of class %v", err, class)
	}
	return se
}

// A limit the call hit is named to the skill: the body limit as "too
// large" with its figure, the query limits as invalid params with theirs.
func TestMemoryLimitsNamed(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	ctx := context.Background()
	args, _ := json.Marshal(map[string]string{"path": "memories/projects/cyberos/big.md", "body": strings.Repeat("a", memory.MaxBodyBytes+1)})
	_, err := NewMemoryEmit().Call(ctx, mtCall(env, string(args)))
	if se := mtSkillErr(t, err, ErrTooLarge); !strings.Contains(se.Msg, strconv.Itoa(memory.MaxBodyBytes)) {
		t.Errorf("body over the limit: %q, want the limit %d named", se.Msg, memory.MaxBodyBytes)
	}
	for _, tc := range []struct{ query, limit string }{
		{strings.Repeat("a", memory.MaxQueryBytes+1), strconv.Itoa(memory.MaxQueryBytes)},
		{strings.Repeat("a ", memory.MaxQueryTerms+1), strconv.Itoa(memory.MaxQueryTerms)},
	} {
		args, _ := json.Marshal(map[string]string{"query": tc.query})
		_, err := NewMemorySearch().Call(ctx, mtCall(env, string(args)))
		if se := mtSkillErr(t, err, ErrInvalidParams); !strings.Contains(se.Msg, tc.limit) {
			t.Errorf("query over a limit: %q, want %s named", se.Msg, tc.limit)
		}
	}
}

// A store that refuses the write for good is not "try again later": the
// skill is told a retry will not help, and the error is a host fault
// (logged at WARN by the broker).
func TestMemoryStoreFaultNotRetryable(t *testing.T) {
	dir := t.TempDir()
	env := mtEnv(t, mtScopedPolicy(t))
	st, err := memory.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	env.Memory = st
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, memory.FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON docs BEGIN SELECT RAISE(ABORT, 'refused'); END`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	_, err = NewMemoryEmit().Call(context.Background(), mtCall(env, `{"path":"memories/projects/cyberos/n.md","body":"x"}`))
	se := mtSkillErr(t, err, ErrFailed)
	if strings.Contains(se.Msg, "try again") || !errors.Is(err, ErrHostFault) {
		t.Errorf("a permanent store fault: %v (%q), want a host fault the skill is not told to retry", err, se.Msg)
	}
}

// A tenant over its memory write rate is refused as rate_limited, with
// the reason named.
func TestMemoryEmitRateLimited(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	l := memory.DefaultLimits()
	l.WritesPerSecond, l.WriteBurst = 0.001, 2
	if err := env.Memory.SetLimits(l); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := range 3 {
		_, err = NewMemoryEmit().Call(context.Background(), mtCall(env, `{"path":"memories/projects/cyberos/n`+strconv.Itoa(i)+`.md","body":"x"}`))
	}
	d := mtDenial(t, err, policy.ReasonRateLimited, policy.ToolMemoryEmit)
	if !strings.Contains(d.Detail, "tenant memory write rate exceeded") {
		t.Errorf("detail %q", d.Detail)
	}
}
