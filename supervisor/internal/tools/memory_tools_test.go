package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"reflect"
	"sort"
	"strings"
	"testing"

	"cyberos.dev/memory"
	"cyberos.dev/policy"
)

const (
	memTenant  = "tenant-a"
	memTraceID = "0af7651916cd43dd8448eb211c80319c"
)

// memPolicy parses a SKILL.md whose frontmatter is the given lines.
func mtPolicy(t *testing.T, lines ...string) *policy.Policy {
	t.Helper()
	src := "---\nname: mem-skill\ndescription: memory tools test\n" + strings.Join(lines, "\n") + "\n---\nbody\n"
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatalf("policy.Parse: %v", err)
	}
	return p
}

// memEnv opens a real store in a temp dir and seeds it (scopes "**", so the
// seeding itself is unrestricted): two documents of memTenant, one in and
// one out of the test skill's scope, and one of another tenant.
func mtEnv(t *testing.T, p *policy.Policy) *Env {
	t.Helper()
	st, err := memory.Open(t.TempDir())
	if err != nil {
		t.Fatalf("memory.Open: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	for _, e := range []memory.Entry{
		{Tenant: memTenant, Path: "memories/projects/cyberos/x.md", Body: "hello auth design notes"},
		{Tenant: memTenant, Path: "memories/people/y.md", Body: "hello founder salary"},
		{Tenant: "tenant-b", Path: "memories/projects/cyberos/other.md", Body: "hello from tenant b"},
	} {
		e.Scopes = []string{"**"}
		if _, err := st.Emit(context.Background(), e); err != nil {
			t.Fatalf("seed %s: %v", e.Path, err)
		}
	}
	return &Env{
		SkillID:      p.Name,
		InvocationID: "inv-1",
		TenantID:     memTenant,
		Policy:       p,
		Enforcer:     policy.NewEnforcer(p, policy.EnforcerOptions{}),
		Memory:       st,
	}
}

func mtScopedPolicy(t *testing.T, extra ...string) *policy.Policy {
	return mtPolicy(t, append([]string{
		"allowed_tools: [MemoryRead, MemorySearch, MemoryEmit]",
		`allowed_memory_scopes: ["memories/projects/cyberos/**"]`,
	}, extra...)...)
}

func mtCall(env *Env, args string) *Call {
	return &Call{Env: env, Args: json.RawMessage(args), TraceID: memTraceID,
		Traceparent: "00-" + memTraceID + "-b7ad6b7169203331-01"}
}

// jsonKeys marshals a tool result as the broker would and returns its keys.
func mtKeys(t *testing.T, v any) (map[string]any, []string) {
	t.Helper()
	b, ok := v.(Canonical)
	if !ok {
		var err error
		if b, err = json.Marshal(v); err != nil {
			t.Fatalf("marshal result: %v", err)
		}
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("result is not a JSON object: %s", b)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return m, keys
}

func mtDenial(t *testing.T, err error, reason policy.Reason, tool policy.Tool) *policy.Denial {
	t.Helper()
	var d *policy.Denial
	if !errors.As(err, &d) {
		t.Fatalf("error = %v, want a *policy.Denial %s", err, reason)
	}
	if d.Reason != reason || d.Tool != tool {
		t.Fatalf("denial = %+v, want reason %s tool %s", d, reason, tool)
	}
	return d
}

func mtSHA(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// AC 1 and AC 4 (in scope): the result is exactly {"body","content_hash"}.
func TestMemoryReadInScope(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	res, err := NewMemoryRead().Call(context.Background(), mtCall(env, `{"path":"memories/projects/cyberos/x.md"}`))
	if err != nil {
		t.Fatalf("MemoryRead: %v", err)
	}
	m, keys := mtKeys(t, res)
	if !reflect.DeepEqual(keys, []string{"body", "content_hash"}) {
		t.Fatalf("result keys = %v, want [body content_hash]", keys)
	}
	if m["body"] != "hello auth design notes" || m["content_hash"] != mtSHA("hello auth design notes") {
		t.Fatalf("result = %v", m)
	}
}

// AC 4 (out of scope) and AC 5 (".." canonicalised, then refused). The
// spec's AC 5 says memories/projects/cyberos/../people/y.md becomes
// memories/people/y.md; one ".." removes one segment, so it is
// memories/projects/people/y.md, outside the scope all the same.
func TestMemoryReadScopeViolation(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	for _, tc := range []struct{ path, canonical string }{
		{"memories/people/y.md", "memories/people/y.md"},
		{"memories/projects/cyberos/../people/y.md", "memories/projects/people/y.md"},
		{"memories/projects/cyberos/../../people/./y.md", "memories/people/y.md"},
		{"/memories//projects/cyberos/../../people/y.md", "memories/people/y.md"},
	} {
		args, _ := json.Marshal(map[string]string{"path": tc.path})
		_, err := NewMemoryRead().Call(context.Background(), mtCall(env, string(args)))
		d := mtDenial(t, err, policy.ReasonScope, policy.ToolMemoryRead)
		if !strings.Contains(d.Detail, `"`+tc.canonical+`"`) {
			t.Errorf("%s: denial detail %q does not name the canonical path %q", tc.path, d.Detail, tc.canonical)
		}
	}
	// Climbing above the root is refused as a scope violation too.
	_, err := NewMemoryRead().Call(context.Background(), mtCall(env, `{"path":"../memories/projects/cyberos/x.md"}`))
	mtDenial(t, err, policy.ReasonScope, policy.ToolMemoryRead)
}

func TestMemoryReadCanonicalisedInScope(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	res, err := NewMemoryRead().Call(context.Background(), mtCall(env, `{"path":"memories/projects/./cyberos/notes/../x.md"}`))
	if err != nil {
		t.Fatalf("MemoryRead: %v", err)
	}
	if m, _ := mtKeys(t, res); m["body"] != "hello auth design notes" {
		t.Fatalf("result = %v", m)
	}
}

func TestMemoryReadNotFound(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	for _, p := range []string{
		"memories/projects/cyberos/missing.md",
		"memories/projects/cyberos/other.md", // exists for tenant-b only
	} {
		_, err := NewMemoryRead().Call(context.Background(), mtCall(env, `{"path":"`+p+`"}`))
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s: error = %v, want ErrNotFound", p, err)
		}
	}
}

func TestMemoryToolsDenyWithoutScopes(t *testing.T) {
	env := mtEnv(t, mtPolicy(t, "allowed_tools: [MemoryRead, MemorySearch, MemoryEmit]"))
	ctx := context.Background()
	_, err := NewMemoryRead().Call(ctx, mtCall(env, `{"path":"memories/projects/cyberos/x.md"}`))
	mtDenial(t, err, policy.ReasonScope, policy.ToolMemoryRead)
	_, err = NewMemorySearch().Call(ctx, mtCall(env, `{"query":"hello"}`))
	mtDenial(t, err, policy.ReasonScope, policy.ToolMemorySearch)
	_, err = NewMemoryEmit().Call(ctx, mtCall(env, `{"path":"memories/projects/cyberos/z.md","body":"b"}`))
	mtDenial(t, err, policy.ReasonScope, policy.ToolMemoryEmit)
}

func TestMemoryToolsStrictArgs(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	ctx := context.Background()
	for _, tc := range []struct {
		tool Tool
		args string
	}{
		{NewMemoryRead(), `{}`},
		{NewMemoryRead(), `{"path":"memories/projects/cyberos/x.md","extra":1}`},
		{NewMemoryRead(), `{"PATH":"memories/projects/cyberos/x.md"}`},
		{NewMemoryRead(), `{"path":"memories/people/y.md","Path":"memories/projects/cyberos/x.md"}`},
		{NewMemoryRead(), `{"path":"memories/people/y.md","path":"memories/projects/cyberos/x.md"}`},
		{NewMemoryRead(), `{"path":"memories/projects/cyberos/x.md"} {}`},
		{NewMemoryRead(), `{"path":7}`},
		{NewMemoryRead(), `["memories/projects/cyberos/x.md"]`},
		{NewMemoryRead(), `null`},
		{NewMemoryRead(), ``},
		{NewMemorySearch(), `{}`},
		{NewMemorySearch(), `{"query":"hello","limit":0}`},
		{NewMemorySearch(), `{"query":"hello","limit":101}`},
		{NewMemorySearch(), `{"query":"hello","limit":1.5}`},
		{NewMemorySearch(), `{"query":"hello","scopes":["**"]}`},
		{NewMemorySearch(), `{"query":"  ...  "}`}, // no words: memory.ErrInvalid
		{NewMemoryEmit(), `{"path":"memories/projects/cyberos/z.md"}`},
		{NewMemoryEmit(), `{"body":"b"}`},
		{NewMemoryEmit(), `{"path":"memories/projects/cyberos/z.md","body":"b","trace_id":"x"}`},
	} {
		_, err := tc.tool.Call(ctx, mtCall(env, tc.args))
		if !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s %s: error = %v, want ErrInvalidParams", tc.tool.Name(), tc.args, err)
		}
	}
}

func TestMemoryToolsWithoutEnforcer(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	env.Enforcer = nil
	for _, tool := range []Tool{NewMemoryRead(), NewMemorySearch(), NewMemoryEmit()} {
		_, err := tool.Call(context.Background(), mtCall(env, `{"path":"memories/projects/cyberos/x.md","query":"x","body":"b"}`))
		if !errors.Is(err, ErrFailed) {
			t.Errorf("%s without an enforcer: error = %v, want ErrFailed", tool.Name(), err)
		}
	}
}

// A patterned rule narrows MemoryRead below allowed_memory_scopes' reach for
// the other tools: the store's own check uses MemoryScopes(MemoryRead).
func TestMemoryReadPatternedRule(t *testing.T) {
	env := mtEnv(t, mtPolicy(t,
		`allowed_tools: ["MemoryRead(memories/people/**)"]`,
		`allowed_memory_scopes: ["memories/projects/cyberos/**"]`,
	))
	res, err := NewMemoryRead().Call(context.Background(), mtCall(env, `{"path":"memories/people/y.md"}`))
	if err != nil {
		t.Fatalf("MemoryRead: %v", err)
	}
	if m, _ := mtKeys(t, res); m["body"] != "hello founder salary" {
		t.Fatalf("result = %v", m)
	}
	_, err = NewMemoryRead().Call(context.Background(), mtCall(env, `{"path":"memories/projects/cyberos/x.md"}`))
	mtDenial(t, err, policy.ReasonScope, policy.ToolMemoryRead)
}

func TestMemorySearchScoped(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	res, err := NewMemorySearch().Call(context.Background(), mtCall(env, `{"query":"hello"}`))
	if err != nil {
		t.Fatalf("MemorySearch: %v", err)
	}
	m, keys := mtKeys(t, res)
	if !reflect.DeepEqual(keys, []string{"hits"}) {
		t.Fatalf("result keys = %v, want [hits]", keys)
	}
	hits := m["hits"].([]any)
	if len(hits) != 1 {
		t.Fatalf("hits = %v, want only the in-scope document of this tenant", hits)
	}
	hit := hits[0].(map[string]any)
	_, hk := mtKeys(t, hit)
	if !reflect.DeepEqual(hk, []string{"content_hash", "path", "score", "snippet"}) {
		t.Fatalf("hit keys = %v", hk)
	}
	if hit["path"] != "memories/projects/cyberos/x.md" || hit["content_hash"] != mtSHA("hello auth design notes") {
		t.Fatalf("hit = %v", hit)
	}
	if !strings.Contains(hit["snippet"].(string), "hello") {
		t.Fatalf("snippet = %q", hit["snippet"])
	}

	// No match is an empty list, not null.
	res, err = NewMemorySearch().Call(context.Background(), mtCall(env, `{"query":"salary"}`))
	if err != nil {
		t.Fatalf("MemorySearch: %v", err)
	}
	if b, _ := json.Marshal(res); string(b) != `{"hits":[]}` {
		t.Fatalf("out-of-scope match leaked or bad shape: %s", b)
	}
}

func TestMemorySearchLimit(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	for i := range 12 {
		_, err := NewMemoryEmit().Call(context.Background(),
			mtCall(env, `{"path":"memories/projects/cyberos/n`+string(rune('a'+i))+`.md","body":"needle"}`))
		if err != nil {
			t.Fatalf("MemoryEmit: %v", err)
		}
	}
	for _, tc := range []struct {
		args string
		want int
	}{
		{`{"query":"needle"}`, DefaultSearchLimit},
		{`{"query":"needle","limit":3}`, 3},
		{`{"query":"needle","limit":100}`, 12},
	} {
		res, err := NewMemorySearch().Call(context.Background(), mtCall(env, tc.args))
		if err != nil {
			t.Fatalf("%s: %v", tc.args, err)
		}
		if n := len(res.(memorySearchResult).Hits); n != tc.want {
			t.Errorf("%s: %d hits, want %d", tc.args, n, tc.want)
		}
	}
}

// AC 19: the emitted document carries the call's trace id.
func TestMemoryEmitTraceID(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	res, err := NewMemoryEmit().Call(context.Background(),
		mtCall(env, `{"path":"memories/projects/cyberos/notes/../new.md","body":"fresh note"}`))
	if err != nil {
		t.Fatalf("MemoryEmit: %v", err)
	}
	m, keys := mtKeys(t, res)
	if !reflect.DeepEqual(keys, []string{"body_withheld", "content_hash", "path"}) {
		t.Fatalf("result keys = %v", keys)
	}
	if m["path"] != "memories/projects/cyberos/new.md" || m["content_hash"] != mtSHA("fresh note") || m["body_withheld"] != false {
		t.Fatalf("result = %v", m)
	}
	d, err := env.Memory.Read(context.Background(), memTenant, "memories/projects/cyberos/new.md", []string{"**"})
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if d.TraceID != memTraceID || d.InvocationID != "inv-1" || d.SkillID != "mem-skill" || d.Body != "fresh note" {
		t.Fatalf("stored doc = %+v", d)
	}
	// And MemoryRead sees it.
	res, err = NewMemoryRead().Call(context.Background(), mtCall(env, `{"path":"memories/projects/cyberos/new.md"}`))
	if err != nil {
		t.Fatalf("MemoryRead: %v", err)
	}
	if got, _ := mtKeys(t, res); got["body"] != "fresh note" {
		t.Fatalf("read = %v", got)
	}
}

func TestMemoryEmitScopeViolation(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	_, err := NewMemoryEmit().Call(context.Background(),
		mtCall(env, `{"path":"memories/projects/cyberos/../people/y.md","body":"overwritten"}`))
	mtDenial(t, err, policy.ReasonScope, policy.ToolMemoryEmit)
	d, err := env.Memory.Read(context.Background(), memTenant, "memories/people/y.md", []string{"**"})
	if err != nil || d.Body != "hello founder salary" {
		t.Fatalf("refused emit changed the store: %+v, %v", d, err)
	}
}

func TestMemoryEmitTooLarge(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t))
	args, _ := json.Marshal(map[string]string{
		"path": "memories/projects/cyberos/big.md",
		"body": strings.Repeat("a", memory.MaxBodyBytes+1),
	})
	_, err := NewMemoryEmit().Call(context.Background(), mtCall(env, string(args)))
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("error = %v, want ErrTooLarge", err)
	}
}

// A compensation skill's body is hashed and withheld: the emit says so, a
// read returns an empty body with "body_withheld": true, search never finds it.
func TestMemoryEmitCompensation(t *testing.T) {
	env := mtEnv(t, mtScopedPolicy(t, "x-compensation: true"))
	const body = "compensation band 7 salary figures"
	res, err := NewMemoryEmit().Call(context.Background(),
		mtCall(env, `{"path":"memories/projects/cyberos/comp.md","body":"`+body+`"}`))
	if err != nil {
		t.Fatalf("MemoryEmit: %v", err)
	}
	if m, _ := mtKeys(t, res); m["body_withheld"] != true || m["content_hash"] != mtSHA(body) {
		t.Fatalf("emit result = %v", m)
	}
	d, err := env.Memory.Read(context.Background(), memTenant, "memories/projects/cyberos/comp.md", []string{"**"})
	if err != nil || d.Body != "" || !d.BodyWithheld || d.TraceID != memTraceID {
		t.Fatalf("stored doc = %+v, %v", d, err)
	}

	res, err = NewMemoryRead().Call(context.Background(), mtCall(env, `{"path":"memories/projects/cyberos/comp.md"}`))
	if err != nil {
		t.Fatalf("MemoryRead: %v", err)
	}
	m, keys := mtKeys(t, res)
	if !reflect.DeepEqual(keys, []string{"body", "body_withheld", "content_hash"}) ||
		m["body"] != "" || m["body_withheld"] != true || m["content_hash"] != mtSHA(body) {
		t.Fatalf("read result = %v", m)
	}

	res, err = NewMemorySearch().Call(context.Background(), mtCall(env, `{"query":"salary"}`))
	if err != nil {
		t.Fatalf("MemorySearch: %v", err)
	}
	if n := len(res.(memorySearchResult).Hits); n != 0 {
		t.Fatalf("search found a withheld body: %v", res)
	}
}

func TestMemoryToolNames(t *testing.T) {
	for _, tc := range []struct {
		tool Tool
		want policy.Tool
	}{
		{NewMemoryRead(), policy.ToolMemoryRead},
		{NewMemorySearch(), policy.ToolMemorySearch},
		{NewMemoryEmit(), policy.ToolMemoryEmit},
	} {
		if tc.tool.Name() != tc.want || tc.tool.Description() == "" {
			t.Errorf("%T: name %q, description %q", tc.tool, tc.tool.Name(), tc.tool.Description())
		}
	}
}

// TestMemorySearchHonoursDisallowedPatterns: a disallowed_tools pattern on
// MemorySearch hides the documents it names from the search, as it refuses
// them to a MemoryRead: an attack test, the hit and its snippet once came
// back.
func TestMemorySearchHonoursDisallowedPatterns(t *testing.T) {
	env := mtEnv(t, mtPolicy(t,
		"allowed_tools: [MemorySearch, MemoryRead]",
		`allowed_memory_scopes: ["memories/**"]`,
		`disallowed_tools: ["MemorySearch(memories/people/**)", "MemoryRead(memories/people/**)"]`))
	res, err := NewMemorySearch().Call(context.Background(), mtCall(env, `{"query":"hello"}`))
	if err != nil {
		t.Fatalf("MemorySearch: %v", err)
	}
	b, _ := json.Marshal(res)
	if strings.Contains(string(b), "people") || strings.Contains(string(b), "salary") {
		t.Fatalf("a disallowed document came back from MemorySearch: %s", b)
	}
	if !strings.Contains(string(b), "memories/projects/cyberos/x.md") {
		t.Fatalf("the allowed document is missing: %s", b)
	}
}
