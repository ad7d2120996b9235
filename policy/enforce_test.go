package policy

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// newEnforcer parses base + yaml as a SKILL.md frontmatter and builds its
// Enforcer.
func newEnforcer(t *testing.T, yaml string, o EnforcerOptions) *Enforcer {
	t.Helper()
	p, err := Parse([]byte(doc(base + yaml)))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, yaml)
	}
	return NewEnforcer(p, o)
}

// checkReason asserts err is nil (want "") or a *Denial for tool with reason
// want.
func checkReason(t *testing.T, what string, err error, tool Tool, want Reason) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("%s: got %v, want allowed", what, err)
		}
		return
	}
	var d *Denial
	if !errors.As(err, &d) {
		t.Errorf("%s: got %v, want a *Denial %s", what, err, want)
		return
	}
	if d.Reason != want || d.Tool != tool {
		t.Errorf("%s: got %s/%s (%v), want %s/%s", what, d.Tool, d.Reason, err, tool, want)
	}
}

func TestCheckTool(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		tool Tool
		want Reason
	}{
		// AC 1, 2
		{"allowed", "allowed_tools: [MemoryRead]", ToolMemoryRead, ""},
		{"AC2 not allowed", "allowed_tools: [MemoryRead]", ToolBash, ReasonToolNotAllowed},
		{"unknown", "allowed_tools: [MemoryRead]", Tool("Nope"), ReasonUnknownTool},
		{"unknown lower case", "allowed_tools: [Bash]", Tool("bash"), ReasonUnknownTool},
		{"empty name", "allowed_tools: [Bash]", Tool(""), ReasonUnknownTool},
		{"no lists", "", ToolRead, ReasonToolNotAllowed},
		// AC 3
		{"AC3 disallowed beats allowed", "allowed_tools: [Bash]\ndisallowed_tools: [Bash]", ToolBash, ReasonToolDenied},
		{"disallowed only", "disallowed_tools: [Bash]", ToolBash, ReasonToolDenied},
		{"bare disallowed beats patterned allowed", "allowed_tools: ['Read(/srv/**)']\ndisallowed_tools: [Read]", ToolRead, ReasonToolDenied},
		{"patterned allowed grants the tool", "allowed_tools: ['Read(/srv/**)']", ToolRead, ""},
		{"patterned disallowed leaves the tool", "allowed_tools: [Read]\ndisallowed_tools: ['Read(/srv/**)']", ToolRead, ""},
		{"other tool's rule", "allowed_tools: [Read]", ToolWrite, ReasonToolNotAllowed},
		{"hyphenated form", "allowed-tools: Read, Bash(git status:*)", ToolBash, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnforcer(t, tc.yaml, EnforcerOptions{})
			checkReason(t, string(tc.tool), e.CheckTool(tc.tool), tc.tool, tc.want)
		})
	}
}

func TestTools(t *testing.T) {
	cases := []struct {
		yaml string
		want []Tool
	}{
		{"", nil},
		{"allowed_tools: [MemoryRead]", []Tool{ToolMemoryRead}},
		{"allowed_tools: [HttpPost, Read, 'Bash(git:*)']\ndisallowed_tools: [Read]", []Tool{ToolBash, ToolHttpPost}},
		{"allowed_tools: [Grep]\ndisallowed_tools: ['Grep(/x/**)']", []Tool{ToolGrep}},
		{"allowed_tools: [Bash]\ndisallowed_tools: [Bash]", nil},
		{"disallowed_tools: [Bash, Read]", nil},
		{"allowed_tools: [HttpPost, HttpFetch, MemoryEmit, MemorySearch, MemoryRead, Grep, Glob, Edit, Write, Read, Bash]", KnownTools},
	}
	for _, tc := range cases {
		e := newEnforcer(t, tc.yaml, EnforcerOptions{})
		if got := e.Tools(); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: Tools() = %v, want %v", tc.yaml, got, tc.want)
		}
	}
}

func TestPolicyAccessor(t *testing.T) {
	p, err := Parse([]byte(doc(base)))
	if err != nil {
		t.Fatal(err)
	}
	if got := NewEnforcer(p, EnforcerOptions{}).Policy(); got != p {
		t.Fatalf("Policy() = %p, want %p", got, p)
	}
}

func TestCheckBash(t *testing.T) {
	type check struct {
		cmd  string
		want Reason
	}
	cases := []struct {
		name   string
		yaml   string
		checks []check
	}{
		{"prefix and exact rules", `allowed_tools: ['Bash(git status:*)', 'Bash(ls -la)']`, []check{
			{"git status", ""},
			{"  git status \t\n", ""},
			{"git status --short", ""},
			{"git status -- 'a b' \"c\"", ""},
			{"git status $HOME", ""},
			{"git statusx", ReasonToolNotAllowed},
			{"git  status", ReasonToolNotAllowed},
			{"git status\t--short", ReasonToolNotAllowed},
			{"git", ReasonToolNotAllowed},
			{"", ReasonToolNotAllowed},
			{"ls -la", ""},
			{"ls -la /", ReasonToolNotAllowed},
			{"ls", ReasonToolNotAllowed},
			{"rm -rf /", ReasonToolNotAllowed},
			{"echo git status", ReasonToolNotAllowed},
			// metacharacters after an allowed prefix
			{"git status; rm -rf /", ReasonToolDenied},
			{"git status ;rm -rf /", ReasonToolDenied},
			{"git status && rm -rf /", ReasonToolDenied},
			{"git status || rm -rf /", ReasonToolDenied},
			{"git status & rm -rf /", ReasonToolDenied},
			{"git status | sh", ReasonToolDenied},
			{"git status `rm -rf /`", ReasonToolDenied},
			{"git status $(rm -rf /)", ReasonToolDenied},
			{"git status > /etc/passwd", ReasonToolDenied},
			{"git status 2>/tmp/x", ReasonToolDenied},
			{"git status < /etc/shadow", ReasonToolDenied},
			{"git status <(rm -rf /)", ReasonToolDenied},
			{"git status\nrm -rf /", ReasonToolDenied},
			{"git status -s\nrm -rf /", ReasonToolDenied},
			{"git status -s\rrm", ReasonToolDenied},
			{"git status \x00", ReasonToolDenied},
			{"git status '; rm'", ReasonToolDenied}, // quoted, still refused: no shell parsing
			{"git status\t; rm", ReasonToolDenied},
			{"ls -la; rm -rf /", ReasonToolDenied}, // exact rules too
			{"ls -la && rm -rf /", ReasonToolDenied},
			{"ls -la $(rm -rf /)", ReasonToolDenied},
			{"ls -la|sh", ReasonToolDenied},
			{"ls -la $HOME", ReasonToolNotAllowed},
		}},
		{"bare allow with denied prefix", `allowed_tools: [Bash]
disallowed_tools: ['Bash(rm:*)', 'Bash(shutdown now)']`, []check{
			{"ls", ""},
			{"ls; echo ok", ""},
			{"rmdir x", ""},
			{"echo rm", ""},
			{"rm", ReasonToolDenied},
			{"rm -rf /", ReasonToolDenied},
			{"  rm -rf /", ReasonToolDenied},
			{"ls; rm -rf /", ReasonToolDenied},
			{"ls;rm -rf /", ReasonToolDenied},
			{"ls && rm -rf /", ReasonToolDenied},
			{"ls || rm x", ReasonToolDenied},
			{"ls | rm x", ReasonToolDenied},
			{"ls\nrm x", ReasonToolDenied},
			{"echo $(rm x)", ReasonToolDenied},
			{"echo `rm x`", ReasonToolDenied},
			{"(rm x)", ReasonToolDenied},
			{"{ rm x; }", ReasonToolDenied},
			{"! rm x", ReasonToolDenied},
			{"shutdown now", ReasonToolDenied},
			{"sleep 1; shutdown now", ReasonToolDenied},
			{"shutdown now -r", ""}, // an exact disallowed rule is exact
		}},
		{"bare allow", "allowed_tools: [Bash]", []check{
			{"anything; goes | here", ""},
			{"", ""},
		}},
		{"AC3 disallowed bare", "allowed_tools: ['Bash(ls:*)', Bash]\ndisallowed_tools: [Bash]", []check{
			{"ls", ReasonToolDenied},
		}},
		{"AC2 not in allowed_tools", "allowed_tools: [MemoryRead]", []check{
			{"ls", ReasonToolNotAllowed},
		}},
		{"patterned allow and deny", `allowed_tools: ['Bash(git:*)']
disallowed_tools: ['Bash(git push:*)']`, []check{
			{"git log", ""},
			{"git push origin main", ReasonToolDenied},
			{"git push", ReasonToolDenied},
			{"git pushx", ""},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnforcer(t, tc.yaml, EnforcerOptions{})
			for _, c := range tc.checks {
				checkReason(t, strings.ReplaceAll(c.cmd, "\n", `\n`), e.CheckBash(c.cmd), ToolBash, c.want)
			}
		})
	}
}

func TestCheckMemory(t *testing.T) {
	type check struct {
		tool      Tool
		path      string
		want      Reason
		canonical string
	}
	const mr, ms, me = ToolMemoryRead, ToolMemorySearch, ToolMemoryEmit
	cases := []struct {
		name   string
		yaml   string
		checks []check
	}{
		{"AC4 AC5 scopes", `allowed_tools: [MemoryRead, MemorySearch]
allowed_memory_scopes: ["memories/projects/cyberos/**"]`, []check{
			{mr, "memories/projects/cyberos/x.md", "", "memories/projects/cyberos/x.md"},
			{mr, "memories/projects/cyberos/notes/x.md", "", "memories/projects/cyberos/notes/x.md"},
			{ms, "memories/projects/cyberos/notes/x.md", "", "memories/projects/cyberos/notes/x.md"},
			{mr, "memories/people/y.md", ReasonScope, ""},
			{mr, "memories/projects/cyberos/../people/y.md", ReasonScope, ""},
			{mr, "memories/projects/cyberos/notes/../../cyberos/x.md", "", "memories/projects/cyberos/x.md"},
			{mr, "/memories//projects/./cyberos/a//b.md", "", "memories/projects/cyberos/a/b.md"},
			{mr, "memories/projects/cyberosX/y.md", ReasonScope, ""},
			{mr, "memories/projects/CyberOS/y.md", ReasonScope, ""},
			{mr, "../memories/projects/cyberos/x.md", ReasonScope, ""},
			{mr, "memories/../../x", ReasonScope, ""},
			{mr, "", ReasonScope, ""},
			{mr, "/", ReasonScope, ""},
			{mr, "memories/projects/cyberos/a\x00b", ReasonScope, ""},
			{mr, "memories/projects/cyberos/\xff", ReasonScope, ""},
			{mr, "memories/projects/cyberos/" + strings.Repeat("a", MaxPathBytes), ReasonScope, ""},
			{me, "memories/projects/cyberos/x.md", ReasonToolNotAllowed, ""},
			{Tool("MemoryWipe"), "memories/projects/cyberos/x.md", ReasonUnknownTool, ""},
		}},
		{"bare rule without scopes allows nothing", "allowed_tools: [MemoryRead]", []check{
			{mr, "memories/x.md", ReasonScope, ""},
		}},
		{"patterned rule is self-contained", `allowed_tools: ['MemoryEmit(memories/inbox/*)']
allowed_memory_scopes: ["memories/**"]`, []check{
			{me, "memories/inbox/a.md", "", "memories/inbox/a.md"},
			{me, "memories/inbox/a/b.md", ReasonScope, ""},
			{me, "memories/other.md", ReasonScope, ""},
			{mr, "memories/inbox/a.md", ReasonToolNotAllowed, ""},
		}},
		{"patterned disallowed", `allowed_tools: [MemoryRead]
disallowed_tools: ['MemoryRead(memories/people/**)']
allowed_memory_scopes: ["memories/**"]`, []check{
			{mr, "memories/notes/a.md", "", "memories/notes/a.md"},
			{mr, "memories/people/founders/comp.md", ReasonToolDenied, ""},
			{mr, "memories/notes/../people/x", ReasonToolDenied, ""},
		}},
		{"wrong kind of tool", "allowed_tools: [Read]\nx-allowed-files: ['/**']", []check{
			{ToolRead, "memories/x", ReasonToolNotAllowed, ""},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnforcer(t, tc.yaml, EnforcerOptions{})
			for _, c := range tc.checks {
				got, err := e.CheckMemory(c.tool, c.path)
				checkReason(t, string(c.tool)+" "+c.path, err, c.tool, c.want)
				if got != c.canonical {
					t.Errorf("%s %q: canonical %q, want %q", c.tool, c.path, got, c.canonical)
				}
			}
		})
	}
}

func TestCheckMemoryMalformedDetail(t *testing.T) {
	e := newEnforcer(t, "allowed_tools: [MemoryRead]\nallowed_memory_scopes: ['**']", EnforcerOptions{})
	_, err := e.CheckMemory(ToolMemoryRead, "a/../../b")
	var d *Denial
	if !errors.As(err, &d) || d.Reason != ReasonScope || d.Detail != "malformed path" {
		t.Fatalf("got %#v, want scope_violation \"malformed path\"", err)
	}
}

func TestMemoryScopes(t *testing.T) {
	e := newEnforcer(t, `allowed_tools: [MemoryRead, 'MemoryRead(notes/./x/**)', 'MemorySearch(people/*)', 'Read']
allowed_memory_scopes: ["memories/a/**", "memories/b/*.md"]`, EnforcerOptions{})
	cases := []struct {
		tool Tool
		want []string
	}{
		{ToolMemoryRead, []string{"memories/a/**", "memories/b/*.md", "notes/x/**"}},
		{ToolMemorySearch, []string{"people/*"}},
		{ToolMemoryEmit, nil},
		{ToolRead, nil},
		{Tool("Nope"), nil},
	}
	for _, tc := range cases {
		got := e.MemoryScopes(tc.tool)
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("MemoryScopes(%s) = %q, want %q", tc.tool, got, tc.want)
		}
	}
	// The result is the caller's own.
	e.MemoryScopes(ToolMemoryRead)[0] = "**"
	if got := e.MemoryScopes(ToolMemoryRead)[0]; got != "memories/a/**" {
		t.Fatalf("MemoryScopes shares its slice: %q", got)
	}
}

func TestCheckFile(t *testing.T) {
	type check struct {
		tool    Tool
		path    string
		want    Reason
		cleaned string
	}
	const rd, wr, ed = ToolRead, ToolWrite, ToolEdit
	cases := []struct {
		name   string
		yaml   string
		checks []check
	}{
		{"AC6", `allowed_tools: [Read, Write]
x-allowed-files: ["/tmp/**"]`, []check{
			{rd, "/tmp/x.txt", "", "/tmp/x.txt"},
			{rd, "/tmp/a/b/c.txt", "", "/tmp/a/b/c.txt"},
			{wr, "/tmp/x.txt", "", "/tmp/x.txt"},
			{rd, "/etc/passwd", ReasonFile, ""},
			{rd, "/tmp/../etc/passwd", ReasonFile, ""},
			{rd, "/tmp/a/../../etc/passwd", ReasonFile, ""},
			{rd, "/tmp//a/./b/", "", "/tmp/a/b"},
			{rd, "/../tmp/x", "", "/tmp/x"},
			{rd, "/tmpx/a", ReasonFile, ""},
			{rd, "tmp/x.txt", ReasonFile, ""},
			{rd, "./tmp/x.txt", ReasonFile, ""},
			{rd, "", ReasonFile, ""},
			{rd, "/tmp/a\x00b", ReasonFile, ""},
			{rd, "/tmp/" + strings.Repeat("a", MaxPathBytes), ReasonFile, ""},
			{ed, "/tmp/x.txt", ReasonToolNotAllowed, ""},
			{ToolMemoryRead, "/tmp/x.txt", ReasonToolNotAllowed, ""},
		}},
		{"star does not cross slash", `allowed_tools: [Glob, Grep]
x-allowed-files: ["/data/*.txt", "/logs/**/*.log"]`, []check{
			{ToolGlob, "/data/a.txt", "", "/data/a.txt"},
			{ToolGlob, "/data/.hidden.txt", "", "/data/.hidden.txt"},
			{ToolGrep, "/data/sub/a.txt", ReasonFile, ""},
			{ToolGrep, "/data/a.txt/../../etc/x.txt", ReasonFile, ""},
			{ToolGrep, "/logs/a.log", "", "/logs/a.log"},
			{ToolGrep, "/logs/x/y/a.log", "", "/logs/x/y/a.log"},
			{ToolGrep, "/logs/x/y/a.txt", ReasonFile, ""},
		}},
		{"bare rule without files allows nothing", "allowed_tools: [Read]", []check{
			{rd, "/tmp/x", ReasonFile, ""},
		}},
		{"patterned rules are self-contained", `allowed_tools: [Read, 'Read(/srv/data/**)', 'Write(/srv/out/*.json)']
x-allowed-files: ["/tmp/**"]`, []check{
			{rd, "/srv/data/a/b", "", "/srv/data/a/b"},
			{rd, "/tmp/x", "", "/tmp/x"},
			{wr, "/srv/out/a.json", "", "/srv/out/a.json"},
			{wr, "/tmp/x", ReasonFile, ""},
			{wr, "/srv/data/a", ReasonFile, ""},
		}},
		{"patterned disallowed", `allowed_tools: [Read, Write]
disallowed_tools: ['Read(/tmp/secret/**)', 'Write(/tmp/*.sh)']
x-allowed-files: ["/tmp/**"]`, []check{
			{rd, "/tmp/secret/key", ReasonToolDenied, ""},
			{rd, "/tmp/x/../secret/key", ReasonToolDenied, ""},
			{rd, "/tmp/secret/../ok", "", "/tmp/ok"},
			{wr, "/tmp/secret/key", "", "/tmp/secret/key"},
			{wr, "/tmp/run.sh", ReasonToolDenied, ""},
			{wr, "/tmp/sub/run.sh", "", "/tmp/sub/run.sh"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnforcer(t, tc.yaml, EnforcerOptions{})
			for _, c := range tc.checks {
				got, err := e.CheckFile(c.tool, c.path)
				what := string(c.tool) + " " + c.path
				if len(what) > 80 {
					what = what[:80] + "…"
				}
				checkReason(t, what, err, c.tool, c.want)
				if got != c.cleaned {
					t.Errorf("%s: cleaned %q, want %q", what, got, c.cleaned)
				}
			}
		})
	}
}

func TestCheckFileNotAbsoluteDetail(t *testing.T) {
	e := newEnforcer(t, "allowed_tools: [Read]\nx-allowed-files: ['/**']", EnforcerOptions{})
	_, err := e.CheckFile(ToolRead, "etc/passwd")
	var d *Denial
	if !errors.As(err, &d) || d.Reason != ReasonFile || d.Detail != "not absolute" {
		t.Fatalf("got %#v, want file_violation \"not absolute\"", err)
	}
}

func TestFileGlobs(t *testing.T) {
	e := newEnforcer(t, `allowed_tools: [Grep, 'Grep(/srv/**)', 'Glob(/a/*)']
disallowed_tools: [Read]
x-allowed-files: ["/tmp/**", "/x//y/../z/*"]`, EnforcerOptions{})
	cases := []struct {
		tool Tool
		want []string
	}{
		{ToolGrep, []string{"/tmp/**", "/x/z/*", "/srv/**"}},
		{ToolGlob, []string{"/a/*"}},
		{ToolRead, nil},
		{ToolWrite, nil},
		{ToolHttpFetch, nil},
	}
	for _, tc := range cases {
		if got := e.FileGlobs(tc.tool); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("FileGlobs(%s) = %q, want %q", tc.tool, got, tc.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	type check struct {
		tool Tool
		raw  string
		want Reason
		host string // u.Host of an accepted URL
	}
	const hf, hp = ToolHttpFetch, ToolHttpPost
	cases := []struct {
		name   string
		yaml   string
		checks []check
	}{
		{"AC7 and tricks", `allowed_tools: [HttpFetch]
x-allowed-domains: ["api.example.com", "*.example.org", "10.1.2.3", "[2001:db8::1]", "xn--exmple-cua.example.net"]`, []check{
			{hf, "https://api.example.com/x", "", "api.example.com"},
			{hf, "https://evil.com/y", ReasonDomain, ""},
			{hf, "http://api.example.com/x?q=1#f", "", "api.example.com"},
			// port: allowed, but matching is on the host
			{hf, "https://api.example.com:8443/x", "", "api.example.com:8443"},
			{hf, "https://api.example.com:/x", "", "api.example.com"},
			{hf, "https://api.example.com:0/x", ReasonDomain, ""},
			{hf, "https://api.example.com:99999/x", ReasonDomain, ""},
			{hf, "https://api.example.com:x/x", ReasonDomain, ""},
			// case and trailing dot
			{hf, "HTTPS://API.Example.COM/x", "", "api.example.com"},
			{hf, "https://api.example.com./x", "", "api.example.com"},
			{hf, "https://api.example.com.:443/x", "", "api.example.com:443"},
			{hf, "https://api.example.com../x", ReasonDomain, ""},
			{hf, "https://./x", ReasonDomain, ""},
			// user info, with the allowed host on either side
			{hf, "https://api.example.com@evil.test/", ReasonDomain, ""},
			{hf, "https://user:pw@api.example.com/", ReasonDomain, ""},
			{hf, "https://@api.example.com/", ReasonDomain, ""},
			{hf, "https://api.example.com:443@evil.test/", ReasonDomain, ""},
			{hf, `https://evil.test\@api.example.com/`, ReasonDomain, ""},
			{hf, "https://evil.test#@api.example.com/", ReasonDomain, ""},
			{hf, "https://evil.test?@api.example.com/", ReasonDomain, ""},
			// suffix tricks
			{hf, "https://api.example.com.evil.test/", ReasonDomain, ""},
			{hf, "https://xapi.example.com/", ReasonDomain, ""},
			{hf, "https://sub.api.example.com/", ReasonDomain, ""},
			// wildcard
			{hf, "https://a.example.org/", "", "a.example.org"},
			{hf, "https://a.b.example.org/", "", "a.b.example.org"},
			{hf, "https://example.org/", ReasonDomain, ""},
			{hf, "https://evilexample.org/", ReasonDomain, ""},
			{hf, "https://.example.org/", ReasonDomain, ""},
			{hf, "https://a..example.org/", ReasonDomain, ""},
			// schemes and shapes
			{hf, "ftp://api.example.com/", ReasonDomain, ""},
			{hf, "file:///etc/passwd", ReasonDomain, ""},
			{hf, "api.example.com/x", ReasonDomain, ""},
			{hf, "//api.example.com/x", ReasonDomain, ""},
			{hf, "http:api.example.com", ReasonDomain, ""},
			{hf, "http:/api.example.com", ReasonDomain, ""},
			{hf, "http:///x", ReasonDomain, ""},
			{hf, "", ReasonDomain, ""},
			{hf, "https://api.example.com/\x7f", ReasonDomain, ""},
			{hf, "https://api example.com/", ReasonDomain, ""},
			// encodings
			{hf, "https://api%2eexample.com/", ReasonDomain, ""},
			{hf, "https://ex%C3%A4mple.example.org/", ReasonDomain, ""},
			{hf, "https://exämple.example.net/", ReasonDomain, ""},
			{hf, "https://xn--exmple-cua.example.net/", "", "xn--exmple-cua.example.net"},
			{hf, "https://a.example.org%00/", ReasonDomain, ""},
			// IP literals: listed exactly, canonical forms only
			{hf, "http://10.1.2.3/", "", "10.1.2.3"},
			{hf, "http://10.1.2.3:8080/", "", "10.1.2.3:8080"},
			{hf, "http://10.1.2.3./", ReasonDomain, ""},
			{hf, "http://10.1.2.4/", ReasonDomain, ""},
			{hf, "http://010.1.2.3/", ReasonDomain, ""},
			{hf, "http://10.1.515/", ReasonDomain, ""},
			{hf, "http://0xa010203/", ReasonDomain, ""},
			{hf, "http://167838211/", ReasonDomain, ""},
			{hf, "http://[2001:db8::1]/", "", "[2001:db8::1]"},
			{hf, "http://[2001:DB8:0::1]:443/", "", "[2001:db8::1]:443"},
			{hf, "http://[::ffff:10.1.2.3]/", ReasonDomain, ""},
			{hf, "http://[10.1.2.3]/", ReasonDomain, ""},
			{hf, "http://[fe80::1%25eth0]/", ReasonDomain, ""},
			{hf, "http://2001:db8::1/", ReasonDomain, ""},
			{hf, "http://127.1/", ReasonDomain, ""},
			{hf, "http://0x7f000001/", ReasonDomain, ""},
			{hf, "http://0x7f.0.0.1/", ReasonDomain, ""},
			{hf, "http://2130706433/", ReasonDomain, ""},
			{hp, "https://api.example.com/x", ReasonToolNotAllowed, ""},
			{ToolRead, "https://api.example.com/x", ReasonToolNotAllowed, ""},
		}},
		{"bare rule without domains allows nothing", "allowed_tools: [HttpFetch]", []check{
			{hf, "https://api.example.com/", ReasonDomain, ""},
		}},
		{"patterned rules", `allowed_tools: [HttpFetch, 'HttpPost(hooks.example.net)']
disallowed_tools: ['HttpFetch(bad.example.org)', 'HttpFetch(*.internal.example.org)']
x-allowed-domains: ["*.example.org"]`, []check{
			{hp, "https://hooks.example.net/h", "", "hooks.example.net"},
			{hp, "https://good.example.org/h", ReasonDomain, ""},
			{hf, "https://hooks.example.net/h", ReasonDomain, ""},
			{hf, "https://good.example.org/", "", "good.example.org"},
			{hf, "https://bad.example.org/", ReasonToolDenied, ""},
			{hf, "https://BAD.example.org./", ReasonToolDenied, ""},
			{hf, "https://x.internal.example.org/", ReasonToolDenied, ""},
			{hf, "https://internal.example.org/", "", "internal.example.org"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnforcer(t, tc.yaml, EnforcerOptions{})
			for _, c := range tc.checks {
				u, err := e.CheckURL(c.tool, c.raw)
				checkReason(t, string(c.tool)+" "+c.raw, err, c.tool, c.want)
				switch {
				case err != nil && u != nil:
					t.Errorf("%s: a URL with a denial", c.raw)
				case err == nil && u.Host != c.host:
					t.Errorf("%s: host %q, want %q", c.raw, u.Host, c.host)
				case err == nil && u.User != nil:
					t.Errorf("%s: user info kept", c.raw)
				}
			}
		})
	}
}

func TestCheckAddr(t *testing.T) {
	cases := []struct {
		addr     string
		refused  bool // with AllowLoopback false
		loopback bool // allowed when AllowLoopback is set
	}{
		// public
		{"93.184.216.34", false, false},
		{"8.8.8.8", false, false},
		{"2606:2800:220:1:248:1893:25c8:1946", false, false},
		{"::ffff:8.8.8.8", false, false},
		{"64:ff9b::808:808", false, false}, // NAT64 of a public address
		{"11.0.0.1", false, false},
		{"172.15.255.255", false, false},
		{"172.32.0.1", false, false},
		{"100.63.255.255", false, false},
		{"100.128.0.1", false, false},
		{"169.253.255.255", false, false},
		{"192.169.0.1", false, false},
		{"223.255.255.255", false, false},
		// unspecified, 0.0.0.0/8
		{"0.0.0.0", true, false},
		{"0.1.2.3", true, false},
		{"::", true, false},
		{"::ffff:0.0.0.0", true, false},
		// loopback
		{"127.0.0.1", true, true},
		{"127.255.255.254", true, true},
		{"::1", true, true},
		{"::ffff:127.0.0.1", true, true},
		{"64:ff9b::7f00:1", true, false}, // NAT64 is never loopback
		// private
		{"10.0.0.1", true, false},
		{"10.255.255.255", true, false},
		{"172.16.0.1", true, false},
		{"172.31.255.255", true, false},
		{"192.168.1.1", true, false},
		{"fc00::1", true, false},
		{"fd12:3456::1", true, false},
		{"::ffff:10.0.0.1", true, false},
		{"::ffff:192.168.0.1", true, false},
		{"64:ff9b::a00:1", true, false},
		{"64:ff9b::c0a8:101", true, false},
		// link-local and metadata
		{"169.254.1.1", true, false},
		{"169.254.169.254", true, false},
		{"::ffff:169.254.169.254", true, false},
		{"64:ff9b::a9fe:a9fe", true, false},
		{"fe80::1", true, false},
		{"febf::1", true, false},
		{"fd00:ec2::254", true, false},
		{"100.100.100.200", true, false},
		// CGNAT
		{"100.64.0.1", true, false},
		{"100.127.255.255", true, false},
		{"::ffff:100.64.0.1", true, false},
		// multicast, broadcast, reserved
		{"224.0.0.1", true, false},
		{"239.255.255.250", true, false},
		{"ff02::1", true, false},
		{"ff0e::1", true, false},
		{"255.255.255.255", true, false},
		{"::ffff:255.255.255.255", true, false},
		{"240.0.0.1", true, false},
		// 6to4 and Teredo, whatever they embed
		{"2002:808:808::1", true, false},
		{"2002:a00:1::1", true, false},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", true, false},
		// other special IPv6 forms
		{"::7f00:1", true, false},         // IPv4-compatible
		{"::a00:1", true, false},          // IPv4-compatible
		{"::ffff:0:a00:1", true, false},   // IPv4-translated
		{"64:ff9b:1::a00:1", true, false}, // local-use NAT64
		{"fec0::1", true, false},          // site-local
		{"100::1", true, false},           // discard-only
		{"fe80::1%eth0", true, false},
		{"2606:2800:220:1::1%eth0", true, false},
	}
	e := newEnforcer(t, "allowed_tools: [HttpFetch]", EnforcerOptions{})
	lo := newEnforcer(t, "allowed_tools: [HttpFetch]", EnforcerOptions{AllowLoopback: true})
	for _, tc := range cases {
		ip := netip.MustParseAddr(tc.addr)
		want := Reason("")
		if tc.refused {
			want = ReasonDomain
		}
		err := e.CheckAddr(ToolHttpFetch, "h.example.com", ip)
		checkReason(t, tc.addr, err, ToolHttpFetch, want)
		if err != nil && strings.Contains(err.Error(), tc.addr) {
			t.Errorf("%s: the denial names the address: %v", tc.addr, err)
		}
		if tc.loopback {
			want = ""
		}
		checkReason(t, tc.addr+" AllowLoopback", lo.CheckAddr(ToolHttpFetch, "h.example.com", ip), ToolHttpFetch, want)
	}
	checkReason(t, "invalid", e.CheckAddr(ToolHttpFetch, "h", netip.Addr{}), ToolHttpFetch, ReasonDomain)
	checkReason(t, "tool not allowed", e.CheckAddr(ToolHttpPost, "h", netip.MustParseAddr("8.8.8.8")), ToolHttpPost, ReasonToolNotAllowed)
	checkReason(t, "not an Http tool", e.CheckAddr(ToolRead, "h", netip.MustParseAddr("8.8.8.8")), ToolRead, ReasonToolNotAllowed)
}

// TestNewEnforcerFailsClosed builds Policies by hand, as Parse never would:
// invalid allowed entries are dropped, an invalid disallowed pattern denies
// its whole tool.
func TestNewEnforcerFailsClosed(t *testing.T) {
	if got := NewEnforcer(nil, EnforcerOptions{}).Tools(); len(got) != 0 {
		t.Fatalf("nil policy allows %v", got)
	}
	checkReason(t, "nil policy", NewEnforcer(nil, EnforcerOptions{}).CheckTool(ToolRead), ToolRead, ReasonToolNotAllowed)

	p := &Policy{
		AllowedTools: []ToolRule{
			{Tool: ToolRead}, {Tool: ToolWrite, Pattern: "relative/**"}, {Tool: ToolEdit, Pattern: "/a/["},
			{Tool: ToolMemoryRead}, {Tool: ToolHttpFetch}, {Tool: ToolGlob, Pattern: "/g/**", Prefix: true},
			{Tool: Tool("Nope")}, {Tool: ToolBash, Pattern: " git log ", Prefix: true},
			{Tool: ToolHttpPost, Pattern: "https://x.example.com/"},
		},
		DisallowedTools: []ToolRule{
			{Tool: ToolGrep, Pattern: "not absolute"}, {Tool: ToolMemoryEmit, Pattern: "../x"},
			{Tool: ToolMemorySearch, Pattern: "a\nb"},
		},
		AllowedFiles:        []string{"relative/**", "/ok//x/../**"},
		AllowedMemoryScopes: []string{"notes/./a//**", "../up/**"},
		AllowedDomains:      []string{"API.Example.com", "*", "*.com", "https://x.example.com"},
	}
	p.AllowedTools = append(p.AllowedTools, ToolRule{Tool: ToolGrep}, ToolRule{Tool: ToolMemoryEmit}, ToolRule{Tool: ToolMemorySearch})
	e := NewEnforcer(p, EnforcerOptions{})

	if got, want := e.Tools(), []Tool{ToolBash, ToolRead, ToolMemoryRead, ToolHttpFetch}; !reflect.DeepEqual(got, want) {
		t.Errorf("Tools() = %v, want %v", got, want)
	}
	for _, tool := range []Tool{ToolGrep, ToolMemoryEmit, ToolMemorySearch} {
		checkReason(t, string(tool), e.CheckTool(tool), tool, ReasonToolDenied)
	}
	for _, tool := range []Tool{ToolWrite, ToolEdit, ToolGlob, ToolHttpPost} {
		checkReason(t, string(tool), e.CheckTool(tool), tool, ReasonToolNotAllowed)
	}
	if got := e.FileGlobs(ToolRead); !reflect.DeepEqual(got, []string{"/ok/**"}) {
		t.Errorf("FileGlobs(Read) = %q", got)
	}
	if got := e.MemoryScopes(ToolMemoryRead); !reflect.DeepEqual(got, []string{"notes/a/**"}) {
		t.Errorf("MemoryScopes(MemoryRead) = %q", got)
	}
	if _, err := e.CheckMemory(ToolMemoryRead, "notes/a/b"); err != nil {
		t.Errorf("CheckMemory: %v", err)
	}
	if _, err := e.CheckURL(ToolHttpFetch, "https://api.example.com/"); err != nil {
		t.Errorf("CheckURL: %v", err)
	}
	checkReason(t, "wildcard domain dropped", func() error { _, err := e.CheckURL(ToolHttpFetch, "https://evil.com/"); return err }(), ToolHttpFetch, ReasonDomain)
	checkReason(t, "bash trimmed", e.CheckBash("git log -1"), ToolBash, "")
}

func TestDenialMessage(t *testing.T) {
	e := newEnforcer(t, "allowed_tools: [Read]\nx-allowed-files: ['/tmp/**']", EnforcerOptions{})
	_, err := e.CheckFile(ToolRead, "/etc/passwd")
	if got, want := err.Error(), `Read: file_violation: path "/etc/passwd" is not in x-allowed-files`; got != want {
		t.Fatalf("Error() = %q, want %q", got, want)
	}
}

// TestChecksDoNotAllocate: the accepted fast paths run on every tool call.
func TestChecksDoNotAllocate(t *testing.T) {
	e := newEnforcer(t, `allowed_tools: [Read, 'Bash(git status:*)', HttpFetch]
disallowed_tools: ['Read(/tmp/secret/**)', 'Bash(rm:*)']
x-allowed-files: ["/tmp/**", "/srv/*.txt"]`, EnforcerOptions{})
	ip := netip.MustParseAddr("93.184.216.34")
	cases := map[string]func(){
		"CheckTool": func() { _ = e.CheckTool(ToolRead) },
		"CheckBash": func() { _ = e.CheckBash("git status --short") },
		"CheckFile": func() { _, _ = e.CheckFile(ToolRead, "/tmp/a/b/c.txt") },
		"CheckAddr": func() { _ = e.CheckAddr(ToolHttpFetch, "h", ip) },
	}
	for name, f := range cases {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocates %v times per call", name, n)
		}
	}
}

func BenchmarkCheckFile(b *testing.B) {
	p, err := Parse([]byte(doc(base + `allowed_tools: [Read]
disallowed_tools: ['Read(/tmp/secret/**)']
x-allowed-files: ["/srv/**/*.log", "/data/*.csv", "/tmp/**"]`)))
	if err != nil {
		b.Fatal(err)
	}
	e := NewEnforcer(p, EnforcerOptions{})
	for b.Loop() {
		if _, err := e.CheckFile(ToolRead, "/tmp/work/a/b/c.txt"); err != nil {
			b.Fatal(err)
		}
	}
}
