package tools

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/bmatcuk/doublestar/v4"

	"cyberos.dev/policy"
)

// globTool is Glob {pattern} → {"paths","truncated"}.
type globTool struct{}

// NewGlob returns the Glob tool.
func NewGlob() Tool { return globTool{} }

func (globTool) Name() policy.Tool { return policy.ToolGlob }

func (globTool) Description() string {
	return fmt.Sprintf(`List host files and directories matching an absolute glob ("**" spans directories, {a,b} alternatives). `+
		`Args {"pattern"}; result {"paths":[…],"truncated"}, sorted, at most %d, only paths within x-allowed-files. `+
		`Symlinks are neither followed nor listed.`, MaxGlobResults)
}

type globArgs struct {
	Pattern *string `json:"pattern"`
}

type globResult struct {
	Paths     []string `json:"paths"`
	Truncated bool     `json:"truncated"`
}

// Call walks only the allowed globs' static bases that overlap the
// pattern's own (walkRoots), never follows a symlink, and returns the
// entries matching both the pattern and the enforcer: regular files and
// directories, hard links included (a name reveals no content; reading one
// is refused). A pattern whose static base is a symlink is refused.
func (g globTool) Call(ctx context.Context, c *Call) (any, error) {
	e, err := fileEnv(c)
	if err != nil {
		return nil, err
	}
	var a globArgs
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	if a.Pattern == nil {
		return nil, skillError(ErrInvalidParams, "pattern is required")
	}
	pat := *a.Pattern
	if err := checkPathPattern("pattern", pat); err != nil {
		return nil, err
	}
	base, _ := doublestar.SplitPattern(pat)
	asked := path.Clean(base)
	roots := walkRoots(e.FileGlobs(g.Name()), asked)
	if len(roots) > 0 && e.Reserved(asked) {
		return nil, fileDenial(g.Name(), "pattern is in a directory reserved to the supervisor")
	}
	if len(roots) == 0 {
		if err := e.CheckTool(g.Name()); err != nil {
			return nil, err
		}
		return nil, fileDenial(g.Name(), "pattern is outside every allowed file glob")
	}
	// Without "**" nothing deeper than the pattern's own depth can match
	// (alternatives holding "/" only make this an over-estimate).
	maxDepth := -1
	if !strings.Contains(pat, "**") {
		maxDepth = strings.Count(pat, "/")
	}
	// As Grep (withClaim): grown as it goes, or, when the budget has no
	// room for that, started again holding its worst case.
	return withClaim(ctx, c, globWorstCase, func(acct *account) (any, error) {
		return g.list(ctx, e, acct, pat, asked, maxDepth, roots)
	})
}

// globWorstCase bounds what one Glob holds: its paths (as strings and as
// JSON, at most MaxResultBytes each) and their bookkeeping.
const globWorstCase = 2*MaxResultBytes + MaxGlobResults*globPathOverhead + accountStep

// globPathOverhead is what a listed path holds besides its bytes.
const globPathOverhead = 16

// list walks roots for entries matching pat, holding what it lists
// through acct.
func (g globTool) list(ctx context.Context, e *policy.Enforcer, acct *account, pat, asked string, maxDepth int, roots []string) (any, error) {
	r := globResult{Paths: []string{}}
	size := globEmptyLen // the result's exact JSON length so far
	for _, root := range roots {
		err := walkHost(ctx, g.Name(), root, maxDepth, func(en hostEntry) error {
			if en.Dir && e.Reserved(en.Path) {
				return errWalkSkipDir
			}
			if !doublestar.MatchUnvalidated(pat, en.Path) {
				return nil
			}
			if _, err := e.CheckFile(g.Name(), en.Path); err != nil {
				return nil
			}
			more := escapedLen(en.Path) + 1
			if len(r.Paths) == MaxGlobResults || size+more > MaxResultBytes {
				r.Truncated = true
				return errWalkStop
			}
			// The path as held and as encoded.
			if err := acct.hold(int64(more + len(en.Path) + globPathOverhead)); err != nil {
				return err
			}
			size += more
			r.Paths = append(r.Paths, en.Path)
			return nil
		})
		if err != nil && (budgetDenied(err) || !skippableRoot(err, root, asked)) {
			return nil, err
		}
		if r.Truncated {
			break
		}
	}
	sort.Strings(r.Paths)
	out := r.encode()
	acct.keep = int64(len(out))
	return out, nil
}

// globEmptyLen is the JSON length of a Glob result with no paths.
const globEmptyLen = len(`{"paths":[],"truncated":false}`)

// encode writes the result as canonical JSON (members sorted).
func (r globResult) encode() Canonical {
	size := globEmptyLen - boolLen(false) + boolLen(r.Truncated)
	for _, p := range r.Paths {
		size += escapedLen(p) + 1
	}
	if len(r.Paths) > 0 {
		size--
	}
	w := newCanonWriter(size)
	w.raw(`{"paths":[`)
	for i, p := range r.Paths {
		if i > 0 {
			w.raw(",")
		}
		str(w, p)
	}
	w.raw(`],"truncated":`)
	w.bool(r.Truncated)
	w.raw("}")
	out, _ := w.done()
	return out
}

// checkPathPattern accepts an absolute doublestar pattern.
func checkPathPattern(field, pat string) error {
	switch {
	case pat == "":
		return fmt.Errorf("%w: %s must not be empty", ErrInvalidParams, field)
	case len(pat) > policy.MaxPathBytes:
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalidParams, field, policy.MaxPathBytes)
	case strings.ContainsFunc(pat, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%w: %s must not contain control characters", ErrInvalidParams, field)
	case !path.IsAbs(pat):
		return fmt.Errorf("%w: %s must be an absolute path glob", ErrInvalidParams, field)
	case !doublestar.ValidatePattern(pat):
		return fmt.Errorf("%w: %s is not a valid glob", ErrInvalidParams, field)
	}
	return nil
}

// skippableRoot reports whether a walk of root that failed with err leaves
// the others to go on: a root that does not exist has nothing to list, and a
// root the policy named below what the skill asked for (not the skill's own
// path) that is refused — an allowed folder reached through a symlink — is
// left out rather than failing the whole call.
func skippableRoot(err error, root, asked string) bool {
	var d *policy.Denial
	switch {
	case errors.Is(err, ErrNotFound):
		return true
	case errors.As(err, &d):
		return root != asked
	}
	return false
}
