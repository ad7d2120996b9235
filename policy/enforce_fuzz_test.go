package policy

import (
	"errors"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"
)

// FuzzCanonicalMemoryPath: never panics; a canonical path is idempotent,
// has no "", "." or ".." segments, and equals what path.Clean makes of it
// under a root; CheckMemory never lets a path out of its scope.
func FuzzCanonicalMemoryPath(f *testing.F) {
	for _, s := range []string{
		"memories/projects/cyberos/x.md", "memories/projects/cyberos/../people/y.md",
		"/a//b/./c/", "..", "a/..", "a/../..", ".", "", "/", "a/\x00", "\xff", "a/b/../../c",
		"memories/projects/cyberos/./../cyberos/notes/..//x",
	} {
		f.Add(s)
	}
	e := NewEnforcer(&Policy{
		AllowedTools:        []ToolRule{{Tool: ToolMemoryRead}},
		DisallowedTools:     []ToolRule{{Tool: ToolMemoryRead, Pattern: "memories/projects/cyberos/secret/**"}},
		AllowedMemoryScopes: []string{"memories/projects/cyberos/**"},
	}, EnforcerOptions{})
	f.Fuzz(func(t *testing.T, p string) {
		c, err := CanonicalMemoryPath(p)
		if err != nil {
			var fe *FieldError
			if c != "" || !errors.As(err, &fe) {
				t.Fatalf("CanonicalMemoryPath(%q) = %q, %v", p, c, err)
			}
		} else {
			if c == "" {
				t.Fatalf("CanonicalMemoryPath(%q) is empty", p)
			}
			for _, seg := range strings.Split(c, "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("CanonicalMemoryPath(%q) = %q has segment %q", p, c, seg)
				}
			}
			again, err := CanonicalMemoryPath(c)
			if err != nil || again != c {
				t.Fatalf("not idempotent: %q → %q → %q, %v", p, c, again, err)
			}
			if want := path.Clean("/" + p)[1:]; c != want {
				t.Fatalf("CanonicalMemoryPath(%q) = %q, path.Clean says %q", p, c, want)
			}
		}

		got, err := e.CheckMemory(ToolMemoryRead, p)
		if err != nil {
			var d *Denial
			if got != "" || !errors.As(err, &d) {
				t.Fatalf("CheckMemory(%q) = %q, %v", p, got, err)
			}
			return
		}
		if got != c || !(got == "memories/projects/cyberos" || strings.HasPrefix(got, "memories/projects/cyberos/")) ||
			got == "memories/projects/cyberos/secret" || strings.HasPrefix(got, "memories/projects/cyberos/secret/") {
			t.Fatalf("CheckMemory(%q) accepted %q (canonical %q)", p, got, c)
		}
	})
}

// fuzzDomains are the allowed hosts of FuzzCheckURL.
var fuzzDomains = []string{"api.example.com", "*.example.org", "10.1.2.3", "2001:db8::1"}

// fuzzHostAllowed is an independent oracle for fuzzDomains.
func fuzzHostAllowed(h string) bool {
	switch {
	case h == "api.example.com", h == "10.1.2.3", h == "2001:db8::1":
		return true
	case strings.HasSuffix(h, ".example.org"):
		sub := strings.TrimSuffix(h, ".example.org")
		return sub != "" && !strings.HasPrefix(sub, ".") && !strings.HasSuffix(sub, ".") && !strings.Contains(sub, "..")
	}
	return false
}

// FuzzCheckURL: never panics; an accepted URL is http(s) without user info,
// its host matches an allowed entry, and it reads back the same.
func FuzzCheckURL(f *testing.F) {
	for _, s := range []string{
		"https://api.example.com/x", "https://evil.com/y", "https://api.example.com@evil.test/",
		"HTTPS://API.EXAMPLE.COM.:8443/x?y#z", "https://a.b.example.org/", "https://example.org/",
		"https://evilexample.org/", "http://10.1.2.3/", "http://[2001:db8::1]:80/", "http://[::ffff:10.1.2.3]/",
		"http://0x7f000001/", "https://ex%C3%A4mple.example.org/", "http://[fe80::1%25eth0]/",
		`https://evil.test\@api.example.com/`, "http:api.example.com", "//api.example.com",
	} {
		f.Add(s)
	}
	e := NewEnforcer(&Policy{
		AllowedTools:   []ToolRule{{Tool: ToolHttpFetch}},
		AllowedDomains: fuzzDomains,
	}, EnforcerOptions{})
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := e.CheckURL(ToolHttpFetch, raw)
		if err != nil {
			var d *Denial
			if u != nil || !errors.As(err, &d) || (d.Reason != ReasonDomain) {
				t.Fatalf("CheckURL(%q) = %v, %v", raw, u, err)
			}
			return
		}
		host := u.Hostname()
		switch {
		case u.Scheme != "http" && u.Scheme != "https":
			t.Fatalf("CheckURL(%q): scheme %q", raw, u.Scheme)
		case u.User != nil:
			t.Fatalf("CheckURL(%q): user info %v", raw, u.User)
		case !fuzzHostAllowed(host):
			t.Fatalf("CheckURL(%q): host %q is not allowed", raw, host)
		case strings.ToLower(host) != host || strings.HasSuffix(host, "."):
			t.Fatalf("CheckURL(%q): host %q not canonical", raw, host)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				t.Fatalf("CheckURL(%q): port %q", raw, p)
			}
		}
		back, err := url.Parse(u.String())
		if err != nil || back.Hostname() != host || back.User != nil {
			t.Fatalf("CheckURL(%q) = %q, which reads back as %v, %v", raw, u, back, err)
		}
	})
}

// FuzzCheckBash: an accepted command is what a rule names, and a prefix
// rule's arguments carry no shell syntax; a disallowed prefix never starts a
// piece of an accepted command.
func FuzzCheckBash(f *testing.F) {
	for _, s := range []string{
		"git status", "git status --short", "git status; rm -rf /", "ls -la", "ls -la && x",
		"git status $(x)", "git status `x`", "git status\nx", "rm -rf /", "echo x | rm", " rm x",
	} {
		f.Add(s)
	}
	narrow := NewEnforcer(&Policy{AllowedTools: []ToolRule{
		{Tool: ToolBash, Pattern: "git status", Prefix: true}, {Tool: ToolBash, Pattern: "ls -la"},
	}}, EnforcerOptions{})
	wide := NewEnforcer(&Policy{
		AllowedTools:    []ToolRule{{Tool: ToolBash}},
		DisallowedTools: []ToolRule{{Tool: ToolBash, Pattern: "rm", Prefix: true}},
	}, EnforcerOptions{})
	f.Fuzz(func(t *testing.T, cmd string) {
		c := strings.TrimSpace(cmd)
		if narrow.CheckBash(cmd) == nil {
			args, isGit := strings.CutPrefix(c, "git status")
			ok := c == "ls -la" || isGit && (args == "" || args[0] == ' ' && !strings.ContainsAny(args, ";&|`<>") &&
				!strings.Contains(args, "$(") && !strings.ContainsFunc(args, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }))
			if !ok {
				t.Fatalf("narrow policy accepted %q", cmd)
			}
		}
		if wide.CheckBash(cmd) == nil {
			for _, piece := range strings.FieldsFunc(c, func(r rune) bool { return strings.ContainsRune(shellBreaks, r) }) {
				piece = strings.TrimSpace(piece)
				if piece == "rm" || strings.HasPrefix(piece, "rm ") {
					t.Fatalf("wide policy accepted %q (piece %q)", cmd, piece)
				}
			}
		}
	})
}

// FuzzCheckFile: an accepted path is absolute, clean, free of NUL bytes and
// inside the allowed glob but outside the disallowed one.
func FuzzCheckFile(f *testing.F) {
	for _, s := range []string{"/tmp/x", "/tmp/../etc/passwd", "tmp/x", "/tmp/secret/k", "/tmp/a/../secret/k", "/tmp//./x/", "/tmp\x00/x"} {
		f.Add(s)
	}
	e := NewEnforcer(&Policy{
		AllowedTools:    []ToolRule{{Tool: ToolRead}},
		DisallowedTools: []ToolRule{{Tool: ToolRead, Pattern: "/tmp/secret/**"}},
		AllowedFiles:    []string{"/tmp/**"},
	}, EnforcerOptions{})
	f.Fuzz(func(t *testing.T, p string) {
		got, err := e.CheckFile(ToolRead, p)
		if err != nil {
			return
		}
		if !strings.HasPrefix(got, "/") || path.Clean(got) != got || strings.IndexByte(got, 0) >= 0 ||
			!(got == "/tmp" || strings.HasPrefix(got, "/tmp/")) ||
			got == "/tmp/secret" || strings.HasPrefix(got, "/tmp/secret/") || got != path.Clean(p) {
			t.Fatalf("CheckFile(%q) accepted %q", p, got)
		}
	})
}
