package tools

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"unicode/utf8"

	"cyberos.dev/policy"
	"github.com/bmatcuk/doublestar/v4"
)

// Host file I/O for the file tools (Read, Write, Edit, Glob, Grep).
//
// These tools run in the root daemon on the host, on paths a skill names. The
// enforcer judges the lexical path (absolute, cleaned, glob-checked); the
// opener then makes sure the kernel reaches exactly that path:
//
//   - every open goes through openat2 with RESOLVE_NO_SYMLINKS (and
//     O_NOFOLLOW), so a symlink anywhere in the path — a parent directory or
//     the file itself — is refused by the kernel at open time, not by an
//     earlier lstat a racing rename could outdate (no check-then-open race);
//     such a refusal is a *policy.Denial{ReasonFile, "symlink"};
//   - only regular files are opened for content ("not a regular file"), and
//     never one with more than one link ("hard link"): a hard link inside an
//     allowed folder may be another name of any host file;
//   - a write goes to a fresh temporary file in the same directory, opened
//     relative to the directory's descriptor with O_CREAT|O_EXCL, then is
//     fsynced and renamed over the target (renameat; RENAME_NOREPLACE for a
//     new file), and the directory is fsynced: readers see the old or the new
//     content, never a mix, and a symlink or hard link swapped in meanwhile
//     is replaced, not written through;
//   - directory walks (Glob, Grep) hold each directory open and open its
//     entries relative to it (RESOLVE_BENEATH as well), skipping symlinks.
//
// The work is in fileio_linux.go; other systems have no openat2 and refuse
// (fileio_other.go): a fallback without it would silently drop the control.
//
// Error messages carry the path the skill asked for at most, never errno
// text or another host path.

// Size caps of the file tools.
const (
	// MaxFileReadBytes caps a file Read, Edit or Grep will load.
	MaxFileReadBytes = 16 << 20
	// MaxFileWriteBytes caps Write's content and Edit's old_string and
	// new_string (a tool.call request is capped at 1 MiB anyway).
	MaxFileWriteBytes = 1 << 20
	// MaxGlobResults caps Glob's paths.
	MaxGlobResults = 10_000
)

// newFileMode is the permission of a file Write creates. A replaced file
// keeps its owner and its permission bits (setuid, setgid and sticky bits
// dropped).
const newFileMode = 0o644

// fileDenial is a file_violation refusal; detail is "symlink", "hard link",
// "not a regular file" or a short phrase naming only what the skill asked for.
func fileDenial(t policy.Tool, detail string) *policy.Denial {
	return &policy.Denial{Reason: policy.ReasonFile, Tool: t, Detail: detail}
}

// fileEnv returns the call's enforcer; a missing one is a wiring fault,
// never an open door.
func fileEnv(c *Call) (*policy.Enforcer, error) {
	if c == nil || c.Env == nil || c.Env.Enforcer == nil {
		return nil, skillError(ErrFailed, "no enforcer for this invocation")
	}
	return c.Env.Enforcer, nil
}

// checkFile asks the enforcer about path, insists on what the opener
// relies on (an absolute, clean path), and refuses a path in a skill folder.
func checkFile(e *policy.Enforcer, t policy.Tool, p string) (string, error) {
	clean, err := e.CheckFile(t, p)
	if err != nil {
		return "", err
	}
	if !path.IsAbs(clean) || path.Clean(clean) != clean {
		return "", fileDenial(t, "path must be absolute")
	}
	if err := refuseSkillFolder(t, clean); err != nil {
		return "", err
	}
	return clean, nil
}

// refuseSkillFolder refuses p (clean, absolute) when it is a skill folder or
// lies in one (inSkillFolder): a skill's SKILL.md, entrypoint and files are
// the input of its policy and of what runs under it, whatever the globs say.
// A failed check refuses too.
func refuseSkillFolder(t policy.Tool, p string) error {
	in, err := inSkillFolder(p)
	switch {
	case err != nil:
		return fsErr(t, err)
	case in:
		return fileDenial(t, "path is in a skill folder")
	}
	return nil
}

// contentHash is the hex SHA-256 of b.
func contentHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// isText reports whether b can be returned as a JSON string unchanged: valid
// UTF-8. Anything else is a "binary file" to Read and Edit, and skipped by
// Grep.
func isText(b []byte) bool { return utf8.Valid(b) }

// within reports whether p is dir or below it (both clean and absolute).
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

// walkRoots returns the directories to walk for a request rooted at p: for
// every allowed glob, its static base (doublestar.SplitPattern) intersected
// with p — p itself when p lies under the base, the base when it lies under
// p, nothing when they are disjoint. Roots below another root are dropped.
// Nothing outside these roots can match an allowed glob, so a walk never
// wanders the host beyond what the policy names.
func walkRoots(globs []string, p string) []string {
	var roots []string
	for _, g := range globs {
		base, _ := doublestar.SplitPattern(g)
		if !path.IsAbs(base) {
			continue
		}
		base = path.Clean(base)
		switch {
		case within(p, base):
			roots = append(roots, p)
		case within(base, p):
			roots = append(roots, base)
		}
	}
	sort.Strings(roots)
	out := roots[:0]
	for _, r := range roots {
		if len(out) > 0 && within(r, out[len(out)-1]) {
			continue
		}
		out = append(out, r)
	}
	return out
}

// hostEntry is one directory entry met by walkHost: a directory or a
// regular file (symlinks and other types are never reported).
type hostEntry struct {
	Path string // absolute, clean
	Dir  bool
	// Read loads a regular file through the safe opener, relative to its
	// open directory, refusing it as readHostFile would (before included).
	// Nil for a directory; valid only until the callback returns.
	Read func(limit int64, before func(size int64) error) ([]byte, error)
}

// ctxErr maps the end of the call's context: its deadline is ErrTimeout,
// a cancellation ErrFailed.
func ctxErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return fmt.Errorf("%w: %w", ErrFailed, err)
}

// errWalkStop, returned by a walk callback, ends the walk without error;
// errWalkSkipDir skips the directory just reported.
var (
	errWalkStop    = errors.New("stop walk")
	errWalkSkipDir = errors.New("skip directory")
)
