package policy

import (
	"path"
	"strings"

	"github.com/bmatcuk/doublestar/v4"
)

// ReservedOverlaps returns the paths of reserved (absolute, each a file or
// a directory) that one of p's x-allowed-files globs could reach: the glob
// matches the path itself or something below it. The file tools refuse
// those whatever the globs say, so a skill naming them is told at
// validation rather than by a refusal at run time. The key is the glob as
// written in the frontmatter.
func (p *Policy) ReservedOverlaps(reserved []string) map[string][]string {
	out := map[string][]string{}
	for _, g := range p.AllowedFiles {
		c, reason := fileGlob(g)
		if reason != "" {
			continue
		}
		for _, r := range reserved {
			if r != "" && path.IsAbs(r) && globReaches(c, path.Clean(r)) {
				out[g] = append(out[g], r)
			}
		}
	}
	return out
}

// globReaches reports whether the cleaned absolute glob g matches p or a
// path below p, segment by segment: "**" reaches everything after it, and
// a glob longer than p reaches below it.
func globReaches(g, p string) bool {
	gs := strings.Split(strings.TrimPrefix(g, "/"), "/")
	ps := strings.Split(strings.TrimPrefix(p, "/"), "/")
	if p == "/" {
		ps = nil
	}
	for i, seg := range gs {
		if seg == "**" {
			return true
		}
		if i >= len(ps) {
			return true // g goes on below p
		}
		if ok, err := doublestar.Match(seg, ps[i]); err != nil || !ok {
			return false
		}
	}
	return len(gs) == len(ps)
}
