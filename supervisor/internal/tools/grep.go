package tools

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"

	"cyberos.dev/policy"
)

// Grep limits.
const (
	// DefaultGrepMatches is Grep's max_matches when the args give none.
	DefaultGrepMatches = 1000
	// MaxGrepMatches is the largest max_matches Grep accepts.
	MaxGrepMatches = 10_000
	// maxGrepText caps one match's text (cut on a rune boundary), so a
	// result stays far below the 16 MiB response cap.
	maxGrepText = 1024
)

// grepTool is Grep {pattern, path, glob?, max_matches?} →
// {"matches":[{"path","line","text"}],"truncated"}.
type grepTool struct{}

// NewGrep returns the Grep tool.
func NewGrep() Tool { return grepTool{} }

func (grepTool) Name() policy.Tool { return policy.ToolGrep }

func (grepTool) Description() string {
	return fmt.Sprintf(`Search host text files line by line with an RE2 regular expression. `+
		`Args {"pattern","path" (an absolute file or directory),"glob"? (file name filter, e.g. "*.go"; with "/" an absolute path glob),`+
		`"max_matches"? (1..%d, default %d)}; result {"matches":[{"path","line","text"}],"truncated"}. `+
		`Only files within x-allowed-files are searched; symlinks are not followed; binary files and files over %d MiB are skipped; `+
		`text is cut at %d bytes.`, MaxGrepMatches, DefaultGrepMatches, MaxFileReadBytes>>20, maxGrepText)
}

type grepArgs struct {
	Pattern    *string `json:"pattern"`
	Path       *string `json:"path"`
	Glob       *string `json:"glob"`
	MaxMatches *int    `json:"max_matches"`
}

type grepMatch struct {
	Path string `json:"path"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

type grepResult struct {
	Matches   []grepMatch `json:"matches"`
	Truncated bool        `json:"truncated"`
}

func (g grepTool) Call(ctx context.Context, c *Call) (any, error) {
	e, err := fileEnv(c)
	if err != nil {
		return nil, err
	}
	var a grepArgs
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	switch {
	case a.Pattern == nil:
		return nil, skillError(ErrInvalidParams, "pattern is required")
	case a.Path == nil:
		return nil, skillError(ErrInvalidParams, "path is required")
	}
	re, err := regexp.Compile(*a.Pattern)
	if err != nil {
		return nil, fmt.Errorf("%w: pattern: %w", ErrInvalidParams, err)
	}
	match, err := grepFilter(a.Glob)
	if err != nil {
		return nil, err
	}
	limit := DefaultGrepMatches
	if a.MaxMatches != nil {
		if limit = *a.MaxMatches; limit < 1 || limit > MaxGrepMatches {
			return nil, fmt.Errorf("%w: max_matches must be between 1 and %d", ErrInvalidParams, MaxGrepMatches)
		}
	}

	p := *a.Path
	switch {
	case len(p) > policy.MaxPathBytes || strings.IndexByte(p, 0) >= 0:
		return nil, fileDenial(g.Name(), "malformed path")
	case !path.IsAbs(p):
		return nil, fileDenial(g.Name(), "path must be absolute")
	}
	p = path.Clean(p)
	roots := walkRoots(e.FileGlobs(g.Name()), p)
	if len(roots) > 0 && e.Reserved(p) {
		return nil, fileDenial(g.Name(), "path is reserved to the supervisor")
	}
	if len(roots) == 0 {
		// Nothing under p can be allowed: the enforcer's own refusal.
		if _, err := checkFile(e, g.Name(), p); err != nil {
			return nil, err
		}
		return nil, fileDenial(g.Name(), "path is outside every allowed file glob")
	}

	// Grep grows its hold as it goes; when the budget has no room for
	// that (a call holding bytes never waits), it starts again holding
	// its worst case from the outset (withClaim).
	return withClaim(ctx, c, grepWorstCase, func(acct *account) (any, error) {
		return g.search(ctx, e, acct, re, match, limit, p, roots)
	})
}

// grepWorstCase bounds what one Grep holds: one file at the cap, its
// matches (their text and their JSON, at most MaxResultBytes each) and
// their bookkeeping.
const grepWorstCase = MaxFileReadBytes + 2*MaxResultBytes + MaxGrepMatches*grepMatchOverhead + accountStep

// grepMatchOverhead is what a match holds besides its text.
const grepMatchOverhead = 64

// search walks roots for matches of re, holding what it reads and finds
// through acct.
func (g grepTool) search(ctx context.Context, e *policy.Enforcer, acct *account, re *regexp.Regexp, match func(string) bool, limit int, p string, roots []string) (any, error) {
	r := grepResult{Matches: []grepMatch{}}
	size := grepEmptyLen // the result's exact JSON length so far
	visit := func(en hostEntry) error {
		if en.Dir && e.Reserved(en.Path) {
			return errWalkSkipDir
		}
		if en.Dir || !match(en.Path) {
			return nil
		}
		named := en.Path == p // the file the skill named itself
		if _, err := e.CheckFile(g.Name(), en.Path); err != nil {
			if named {
				return err
			}
			return nil
		}
		var fileHeld int64
		b, err := en.Read(MaxFileReadBytes, func(n int64) error {
			if err := acct.hold(n); err != nil {
				return err
			}
			fileHeld = n
			return nil
		})
		defer acct.unhold(fileHeld)
		switch {
		case budgetDenied(err):
			return err // refused for the memory budget: so is the call
		case err != nil && named:
			return err
		case err != nil, !isText(b):
			return nil
		}
		for n := 1; len(b) > 0; n++ {
			var line []byte
			line, b, _ = bytes.Cut(b, []byte("\n"))
			line = bytes.TrimSuffix(line, []byte("\r"))
			if !re.Match(line) {
				continue
			}
			m := grepMatch{Path: en.Path, Line: n, Text: clip(line, maxGrepText)}
			more := grepMatchLen(m) + 1
			if len(r.Matches) == limit || size+more > MaxResultBytes {
				r.Truncated = true
				return errWalkStop
			}
			// The match as held (its text) and as encoded.
			if err := acct.hold(int64(more + len(m.Text) + grepMatchOverhead)); err != nil {
				return err
			}
			size += more
			r.Matches = append(r.Matches, m)
		}
		return nil
	}
	for _, root := range roots {
		err := walkHost(ctx, g.Name(), root, -1, visit)
		if err != nil && (root == p || budgetDenied(err) || !skippableRoot(err, root, p)) {
			return nil, err
		}
		if r.Truncated {
			break
		}
	}
	out := r.encode()
	acct.keep = int64(len(out))
	return out, nil
}

// grepEmptyLen is the JSON length of a Grep result with no matches.
const grepEmptyLen = len(`{"matches":[],"truncated":false}`)

// grepMatchLen is the JSON length of one match.
func grepMatchLen(m grepMatch) int {
	return len(`{"line":,"path":,"text":}`) + intLen(int64(m.Line)) + escapedLen(m.Path) + escapedLen(m.Text)
}

// encode writes the result as canonical JSON (members sorted).
func (r grepResult) encode() Canonical {
	size := grepEmptyLen - boolLen(false) + boolLen(r.Truncated)
	for _, m := range r.Matches {
		size += grepMatchLen(m) + 1
	}
	if len(r.Matches) > 0 {
		size-- // no comma before the first
	}
	w := newCanonWriter(size)
	w.raw(`{"matches":[`)
	for i, m := range r.Matches {
		if i > 0 {
			w.raw(",")
		}
		w.raw(`{"line":`)
		w.int(int64(m.Line))
		w.raw(`,"path":`)
		str(w, m.Path)
		w.raw(`,"text":`)
		str(w, m.Text)
		w.raw("}")
	}
	w.raw(`],"truncated":`)
	w.bool(r.Truncated)
	w.raw("}")
	out, _ := w.done()
	return out
}

// grepFilter turns Grep's glob arg into a path filter: a pattern without
// "/" is matched against the file name, one with "/" (absolute) against the
// whole path.
func grepFilter(glob *string) (func(string) bool, error) {
	if glob == nil {
		return func(string) bool { return true }, nil
	}
	g := *glob
	if !strings.Contains(g, "/") {
		if g == "" || !doublestar.ValidatePattern(g) {
			return nil, skillError(ErrInvalidParams, "glob is not a valid file name pattern")
		}
		return func(p string) bool { return doublestar.MatchUnvalidated(g, path.Base(p)) }, nil
	}
	if err := checkPathPattern("glob", g); err != nil {
		return nil, err
	}
	return func(p string) bool { return doublestar.MatchUnvalidated(g, p) }, nil
}

// clip cuts b to at most n bytes without splitting a UTF-8 sequence.
func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n])
}
