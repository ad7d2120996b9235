package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#+ (.+)$`)
	mdFence   = regexp.MustCompile("(?ms)^```.*?^```")
	urlScheme = regexp.MustCompile(`^[a-z]+:`)
)

// headingAnchor is the anchor GitHub gives a heading: lower case, spaces as
// hyphens, every other character but letters, digits, '-' and '_' dropped.
func headingAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// markdownFiles lists the module's .md files outside dot directories and
// testdata, relative to root.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && p != root) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(root, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDocLinksResolve: every relative link in the repository's markdown
// names a file that exists and, for a markdown target with an anchor, one
// of its headings, so moving a section cannot leave a dead link behind.
func TestDocLinksResolve(t *testing.T) {
	root := filepath.Join("..", "..")
	anchorsOf := map[string]map[string]bool{}
	anchors := func(rel string) map[string]bool {
		if a, ok := anchorsOf[rel]; ok {
			return a
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		a := map[string]bool{}
		for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(string(b), ""), -1) {
			a[headingAnchor(m[1])] = true
		}
		anchorsOf[rel] = a
		return a
	}
	files := markdownFiles(t, root)
	if len(files) == 0 {
		t.Fatal("no markdown files found")
	}
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(mdFence.ReplaceAllString(string(b), ""), -1) {
			link := m[1]
			if urlScheme.MatchString(link) {
				continue // http:, https:, mailto:
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := rel
			if path != "" {
				target = filepath.Join(filepath.Dir(rel), path)
			}
			if _, err := os.Stat(filepath.Join(root, target)); err != nil {
				t.Errorf("%s: link %s: %s does not exist", rel, link, target)
				continue
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !anchors(target)[anchor] {
				t.Errorf("%s: link %s: %s has no heading with anchor #%s", rel, link, target, anchor)
			}
		}
	}
}

// TestHeadingAnchor: the anchors GitHub makes of the headings the docs link
// to.
func TestHeadingAnchor(t *testing.T) {
	for h, want := range map[string]string{
		"MCP tools: mcp__<server>__<tool>": "mcp-tools-mcp__server__tool",
		"`skill run` without a daemon":     "skill-run-without-a-daemon",
		"CyberosAuditDamaged":              "cyberosauditdamaged",
		"PostgreSQL as the witness":        "postgresql-as-the-witness",
	} {
		if got := headingAnchor(h); got != want {
			t.Errorf("headingAnchor(%q) = %q, want %q", h, got, want)
		}
	}
}
