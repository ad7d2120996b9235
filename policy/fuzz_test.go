package policy

import (
	"errors"
	"path"
	"strings"
	"testing"

	"github.com/bmatcuk/doublestar/v4"
)

// FuzzParse feeds arbitrary SKILL.md content to Parse: it must never panic,
// every error must be an ErrInvalid, and every Policy it returns must hold
// the invariants the rest of the daemon relies on.
func FuzzParse(f *testing.F) {
	f.Add([]byte(doc(fullYAML)))
	f.Add([]byte(doc(base)))
	f.Add([]byte("\uFEFF---\r\n" + base + "allowed-tools: Read, Bash(git status:*)\r\n---\r\n"))
	f.Add([]byte("---\n" + base + "x-a: &a [1, 2]\nx-b: *a\n<<: {x-c: 1}\n---"))
	f.Add([]byte("---\n" + base + "allowed_tools: ['HttpFetch(*.example.co.uk)', 'MemoryEmit(/a/./b/..//c)', 'Edit(/x//y/../**)']\n---\n"))
	f.Add([]byte("no frontmatter"))
	for _, tc := range errCases {
		f.Add([]byte(doc(tc.yaml)))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if p != nil {
				t.Fatalf("Parse returned a Policy and error %v", err)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		checkInvariants(t, p)
	})
}

// checkInvariants asserts what a successfully parsed Policy guarantees.
func checkInvariants(t *testing.T, p *Policy) {
	t.Helper()
	if !nameRE().MatchString(p.Name) {
		t.Fatalf("invalid name %q", p.Name)
	}
	if strings.TrimSpace(p.Description) == "" {
		t.Fatal("empty description")
	}
	if p.Version == "" || len(p.Version) > 64 || strings.ContainsAny(p.Version, " \t\r\n") {
		t.Fatalf("invalid version %q", p.Version)
	}
	if ep := p.Entrypoint; ep == "" || ep == "." || strings.HasPrefix(ep, "/") || path.Clean(ep) != ep ||
		ep == ".." || strings.HasPrefix(ep, "../") {
		t.Fatalf("invalid entrypoint %q", ep)
	}
	if p.EffortMinutes < 1 || p.EffortMinutes > 1440 {
		t.Fatalf("effort_minutes %d out of range", p.EffortMinutes)
	}
	if p.MemoryMB < 16 || p.MemoryMB > 65536 {
		t.Fatalf("memory %d out of range", p.MemoryMB)
	}
	if p.PidsMax < 8 || p.PidsMax > 4096 {
		t.Fatalf("pids %d out of range", p.PidsMax)
	}
	if !(p.CPU >= 0 && p.CPU <= 64) {
		t.Fatalf("cpu %v out of range", p.CPU)
	}
	if p.RateLimitPerMinute < 0 || p.RateLimitPerMinute > 100000 {
		t.Fatalf("rate limit %d out of range", p.RateLimitPerMinute)
	}
	if !profileRE().MatchString(p.SeccompProfile) {
		t.Fatalf("invalid seccomp profile %q", p.SeccompProfile)
	}
	if p.AllowedTools == nil || p.DisallowedTools == nil || p.AllowedMemoryScopes == nil ||
		p.AllowedFiles == nil || p.AllowedDomains == nil {
		t.Fatal("a list is nil")
	}
	for _, r := range append(append([]ToolRule{}, p.AllowedTools...), p.DisallowedTools...) {
		if !r.Tool.Known() {
			t.Fatalf("unknown tool in %+v", r)
		}
		if r.Prefix && (r.Tool != ToolBash || r.Pattern == "") {
			t.Fatalf("bad prefix rule %+v", r)
		}
		if r.Pattern == "" {
			continue
		}
		switch r.Tool {
		case ToolBash:
			if strings.Contains(r.Pattern, "*") {
				t.Fatalf("wildcard in bash rule %+v", r)
			}
		case ToolRead, ToolWrite, ToolEdit, ToolGlob, ToolGrep:
			checkFileGlob(t, r.Pattern)
		case ToolHttpFetch, ToolHttpPost:
			checkHost(t, r.Pattern)
		default:
			checkMemoryGlob(t, r.Pattern)
		}
	}
	for _, s := range p.AllowedMemoryScopes {
		checkMemoryGlob(t, s)
	}
	for _, s := range p.AllowedFiles {
		checkFileGlob(t, s)
	}
	for _, s := range p.AllowedDomains {
		checkHost(t, s)
	}
	for k := range p.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Fatalf("extension key %q without x-", k)
		}
		if _, known := spellings[k]; known {
			t.Fatalf("policy key %q in Extensions", k)
		}
	}
}

func checkFileGlob(t *testing.T, g string) {
	t.Helper()
	if !strings.HasPrefix(g, "/") || path.Clean(g) != g || !doublestar.ValidatePattern(g) {
		t.Fatalf("bad file glob %q", g)
	}
}

func checkMemoryGlob(t *testing.T, g string) {
	t.Helper()
	if c, err := CanonicalMemoryPath(g); err != nil || c != g || !doublestar.ValidatePattern(g) {
		t.Fatalf("memory glob %q is not canonical (%q, %v)", g, c, err)
	}
}

func checkHost(t *testing.T, h string) {
	t.Helper()
	if h == "" || h == "*" || strings.ToLower(h) != h || strings.ContainsAny(h, "/@ \t\n") {
		t.Fatalf("bad host glob %q", h)
	}
	if rest, ok := strings.CutPrefix(h, "*."); ok && !strings.Contains(rest, ".") {
		t.Fatalf("wildcard over a single label %q", h)
	}
	if again, reason := hostGlob(h); reason != "" || again != h {
		t.Fatalf("host glob %q is not stable: %q, %q", h, again, reason)
	}
}
