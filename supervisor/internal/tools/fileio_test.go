package tools

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"cyberos.dev/policy"
)

// ftWorld is a test's host: an allowed folder (x-allowed-files
// "<allowed>/**") and, beside it, an outside folder holding a secret.
type ftWorld struct {
	env     *Env
	root    string // t.TempDir()
	allowed string // root/allowed
	outside string // root/outside
	secret  string // outside/secret, content ftSecret
}

const ftSecret = "root:secret\n"

// ftNew builds the world; extra are more frontmatter lines, "{root}" in
// them replaced by the test's root. allowed_tools defaults to the file tools
// and x-allowed-files to "<allowed>/**" unless extra sets them.
func ftNew(t *testing.T, extra ...string) *ftWorld {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the host file tools need openat2 (Linux); elsewhere they refuse by design")
	}
	root := t.TempDir()
	w := &ftWorld{root: root, allowed: filepath.Join(root, "allowed"), outside: filepath.Join(root, "outside")}
	w.secret = filepath.Join(w.outside, "secret")
	for _, d := range []string{w.allowed, w.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ftWrite(t, w.secret, ftSecret)
	var lines []string
	hasTools, hasFiles := false, false
	for i, l := range extra {
		extra[i] = strings.ReplaceAll(l, "{root}", root)
		hasTools = hasTools || strings.HasPrefix(l, "allowed_tools:")
		hasFiles = hasFiles || strings.HasPrefix(l, "x-allowed-files:")
	}
	if !hasFiles {
		lines = append(lines, "x-allowed-files: ["+strconv.Quote(w.allowed+"/**")+"]")
	}
	if !hasTools {
		lines = append(lines, "allowed_tools: [Read, Write, Edit, Glob, Grep]")
	}
	src := "---\nname: ft-skill\ndescription: file tools test\n" + strings.Join(append(lines, extra...), "\n") + "\n---\n"
	p, err := policy.Parse([]byte(src))
	if err != nil {
		t.Fatalf("policy.Parse: %v\n%s", err, src)
	}
	w.env = &Env{SkillID: p.Name, InvocationID: "inv-ft", TenantID: "tenant-ft", Policy: p,
		Enforcer: policy.NewEnforcer(p, policy.EnforcerOptions{})}
	return w
}

// in returns a path below the allowed folder.
func (w *ftWorld) in(rel string) string { return filepath.Join(w.allowed, rel) }

// call runs tool with args (marshalled unless already a string).
func (w *ftWorld) call(t *testing.T, tool Tool, args any) (any, error) {
	t.Helper()
	return w.callWith(t, tool, args, nil)
}

// callWith is call with mem as the call's budget.
func (w *ftWorld) callWith(t *testing.T, tool Tool, args any, mem Memory) (any, error) {
	t.Helper()
	raw, ok := args.(string)
	if !ok {
		b, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	return tool.Call(context.Background(), &Call{Env: w.env, Args: json.RawMessage(raw), Mem: mem})
}

func ftWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func ftRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func ftSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// ftDenied asserts err is a *policy.Denial with reason (and, when detail is
// not empty, exactly that detail).
func ftDenied(t *testing.T, err error, reason policy.Reason, detail string) {
	t.Helper()
	var d *policy.Denial
	if !errors.As(err, &d) {
		t.Fatalf("err = %v, want a *policy.Denial (%s)", err, reason)
	}
	if d.Reason != reason {
		t.Fatalf("denial reason = %s (%v), want %s", d.Reason, d, reason)
	}
	if detail != "" && d.Detail != detail {
		t.Fatalf("denial detail = %q, want %q", d.Detail, detail)
	}
}

func ftIs(t *testing.T, err, class error) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Fatalf("err = %v, want %v", err, class)
	}
	var d *policy.Denial
	if errors.As(err, &d) {
		t.Fatalf("err = %v is a denial, want only %v", err, class)
	}
}

// ftNoTemps asserts no temporary file of a write is left in dir.
func ftNoTemps(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".cyberos-") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestWalkRoots(t *testing.T) {
	for _, c := range []struct {
		globs []string
		p     string
		want  []string
	}{
		{[]string{"/srv/data/**"}, "/srv/data/x", []string{"/srv/data/x"}},
		{[]string{"/srv/data/**"}, "/srv", []string{"/srv/data"}},
		{[]string{"/srv/data/**"}, "/", []string{"/srv/data"}},
		{[]string{"/srv/data/**"}, "/srv/database", nil},
		{[]string{"/srv/data/**"}, "/etc", nil},
		{[]string{"/srv/data/*.txt", "/srv/data/sub/**", "/srv/logs/{a,b}/x"}, "/srv", []string{"/srv/data", "/srv/logs"}},
		{[]string{"/srv/a/**", "/srv/b/**"}, "/srv/a/x", []string{"/srv/a/x"}},
		{[]string{"/**"}, "/etc", []string{"/etc"}},
		{nil, "/", nil},
	} {
		got := walkRoots(c.globs, c.p)
		if strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("walkRoots(%q, %q) = %q, want %q", c.globs, c.p, got, c.want)
		}
	}
}

// Every file tool decodes its args strictly.
func TestFileToolsStrictArgs(t *testing.T) {
	w := ftNew(t)
	ftWrite(t, w.in("a.txt"), "x\n")
	p := strconv.Quote(w.in("a.txt"))
	for _, c := range []struct {
		tool Tool
		args string
	}{
		{NewRead(), `{"path":` + p + `,"extra":1}`},
		{NewRead(), `{"PATH":` + p + `}`},
		{NewRead(), `{"path":` + p + `,"path":` + p + `}`},
		{NewRead(), `{"path":` + p + `} {}`},
		{NewRead(), `[` + p + `]`},
		{NewRead(), `{"path":7}`},
		{NewRead(), `{}`},
		{NewRead(), ``},
		{NewWrite(), `{"path":` + p + `,"content":"x","mode":"0777"}`},
		{NewWrite(), `{"path":` + p + `}`},
		{NewEdit(), `{"path":` + p + `,"old_string":"x","new_string":"y","replace_all":true}`},
		{NewEdit(), `{"path":` + p + `,"old_string":"x"}`},
		{NewEdit(), `{"path":` + p + `,"old_string":"","new_string":"y"}`},
		{NewEdit(), `{"path":` + p + `,"old_string":"x","new_string":"x"}`},
		{NewGlob(), `{"pattern":"/**","follow":true}`},
		{NewGlob(), `{"pattern":"relative/**"}`},
		{NewGlob(), `{"pattern":"/[a"}`},
		{NewGrep(), `{"pattern":"x","path":` + p + `,"context":3}`},
		{NewGrep(), `{"pattern":"(","path":` + p + `}`},
		{NewGrep(), `{"pattern":"x","path":` + p + `,"max_matches":0}`},
		{NewGrep(), `{"pattern":"x","path":` + p + `,"max_matches":10001}`},
		{NewGrep(), `{"pattern":"x","path":` + p + `,"glob":"[a"}`},
		{NewGrep(), `{"pattern":"x"}`},
		{NewGlob(), `{"pattern":"/` + strings.Repeat("a", policy.MaxPathBytes) + `"}`},
	} {
		_, err := w.call(t, c.tool, c.args)
		if !errors.Is(err, ErrInvalidParams) {
			t.Errorf("%s %s: err = %v, want ErrInvalidParams", c.tool.Name(), c.args, err)
		}
	}
	if got := ftRead(t, w.in("a.txt")); got != "x\n" {
		t.Errorf("a.txt = %q after refused calls", got)
	}
}

func TestFileToolsWithoutEnforcer(t *testing.T) {
	for _, tool := range []Tool{NewRead(), NewWrite(), NewEdit(), NewGlob(), NewGrep(), NewBash()} {
		_, err := tool.Call(context.Background(), &Call{Env: &Env{}, Args: json.RawMessage(`{}`)})
		if !errors.Is(err, ErrFailed) {
			t.Errorf("%s without enforcer: err = %v, want ErrFailed", tool.Name(), err)
		}
	}
}

// A tool the skill may not use is refused by the tool's own check too.
func TestFileToolsNotAllowed(t *testing.T) {
	w := ftNew(t, "allowed_tools: [Read]")
	ftWrite(t, w.in("a.txt"), "x\n")
	for _, c := range []struct {
		tool Tool
		args any
	}{
		{NewWrite(), map[string]any{"path": w.in("a.txt"), "content": "y"}},
		{NewEdit(), map[string]any{"path": w.in("a.txt"), "old_string": "x", "new_string": "y"}},
		{NewGlob(), map[string]any{"pattern": w.allowed + "/**"}},
		{NewGrep(), map[string]any{"pattern": "x", "path": w.allowed}},
	} {
		_, err := w.call(t, c.tool, c.args)
		ftDenied(t, err, policy.ReasonToolNotAllowed, "")
	}
	if got := ftRead(t, w.in("a.txt")); got != "x\n" {
		t.Errorf("a.txt = %q", got)
	}
}
