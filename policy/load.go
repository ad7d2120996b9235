package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MaxSkillFileBytes caps the size of SKILL.md.
const MaxSkillFileBytes = 1 << 20

// LoadDir reads and parses <dir>/SKILL.md, then checks the entrypoint on disk.
//
// dir itself may be reached through a symlink, but nothing inside it may be
// one: SKILL.md must be a regular file, and every component of the entrypoint
// path below dir is examined with Lstat, so a symlinked file or directory
// anywhere on the way is refused rather than followed out of the folder. The
// entrypoint must be a regular file executable by its owner, and neither
// setuid nor setgid.
//
// Problems with the skill are *FieldError values (matching ErrInvalid) with
// Field "SKILL.md", "entrypoint", "dir" or a frontmatter key. Other errors
// (permission denied, I/O) are returned wrapped and do not match ErrInvalid.
func LoadDir(dir string) (*Policy, error) {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fieldErr("dir", fmt.Sprintf("%s does not exist", dir))
	case err != nil:
		return nil, fmt.Errorf("load skill %s: %w", dir, err)
	case !fi.IsDir():
		return nil, fieldErr("dir", fmt.Sprintf("%s is not a directory", dir))
	}

	data, err := readSkillFile(filepath.Join(dir, "SKILL.md"))
	if err != nil {
		return nil, err
	}
	p, err := Parse(data)
	if err != nil {
		return nil, err
	}
	if err := checkEntrypoint(dir, p.Entrypoint); err != nil {
		return nil, err
	}
	return p, nil
}

// LoadSkill is LoadDir for a skill that may be instructions only: when the
// frontmatter names no entrypoint and the default one does not exist, the
// skill is valid with Kind KindInstructions and no Entrypoint. Only a tool
// is ever run: the run path loads with LoadDir, which refuses it.
func LoadSkill(dir string) (*Policy, error) {
	p, err := LoadDir(dir)
	var fe *FieldError
	if err == nil || !errors.As(err, &fe) || fe.Field != "entrypoint" {
		return p, err
	}
	data, rerr := readSkillFile(filepath.Join(dir, "SKILL.md"))
	if rerr != nil {
		return nil, rerr
	}
	q, perr := Parse(data)
	if perr != nil {
		return nil, perr
	}
	if q.Given("entrypoint") {
		return nil, err
	}
	if _, serr := os.Lstat(filepath.Join(dir, q.Entrypoint)); !errors.Is(serr, fs.ErrNotExist) {
		return nil, err // main exists and is not acceptable
	}
	q.Entrypoint, q.Kind = "", KindInstructions
	return q, nil
}

// Body is SKILL.md after its frontmatter: the instructions.
func Body(data []byte) string {
	data = bytes.TrimPrefix(data, utf8BOM)
	first, rest, _ := cutLine(data)
	if !isDelimiter(first) {
		return string(data)
	}
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = cutLine(rest)
		if isDelimiter(line) {
			return strings.TrimLeft(string(rest), "\r\n")
		}
	}
	return ""
}

// readSkillFile reads SKILL.md, refusing a symlink, a non-regular file and
// anything over MaxSkillFileBytes. The file opened is checked to be the one
// examined, so a swap between the two is caught.
func readSkillFile(name string) ([]byte, error) {
	const field = "SKILL.md"
	li, err := os.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fieldErr(field, "does not exist")
	case err != nil:
		return nil, fmt.Errorf("load skill: %w", err)
	case li.Mode()&fs.ModeSymlink != 0:
		return nil, fieldErr(field, "is a symlink")
	case !li.Mode().IsRegular():
		return nil, fieldErr(field, "is not a regular file")
	case li.Size() > MaxSkillFileBytes:
		return nil, fieldErr(field, fmt.Sprintf("is larger than %d MiB", MaxSkillFileBytes>>20))
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("load skill: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load skill: %w", err)
	}
	if !os.SameFile(li, fi) {
		return nil, fieldErr(field, "changed while being opened")
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSkillFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("load skill: read %s: %w", name, err)
	}
	if len(data) > MaxSkillFileBytes {
		return nil, fieldErr(field, fmt.Sprintf("is larger than %d MiB", MaxSkillFileBytes>>20))
	}
	return data, nil
}

// checkEntrypoint walks the entrypoint (a clean relative slash path, as Parse
// guarantees) one component at a time below dir, with Lstat, so no symlink on
// the way is followed.
func checkEntrypoint(dir, entrypoint string) error {
	const field = "entrypoint"
	if _, reason := relativePath(entrypoint); reason != "" {
		return fieldErr(field, reason)
	}
	parts := strings.Split(entrypoint, "/")
	cur := dir
	for i, part := range parts {
		cur = filepath.Join(cur, part)
		shown := strings.Join(parts[:i+1], "/")
		fi, err := os.Lstat(cur)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fieldErr(field, fmt.Sprintf("%q does not exist", shown))
		case err != nil:
			return fmt.Errorf("check entrypoint %q: %w", entrypoint, err)
		case fi.Mode()&fs.ModeSymlink != 0:
			return fieldErr(field, fmt.Sprintf("%q is a symlink", shown))
		}
		if i < len(parts)-1 {
			if !fi.IsDir() {
				return fieldErr(field, fmt.Sprintf("%q is not a directory", shown))
			}
			continue
		}
		if !fi.Mode().IsRegular() {
			return fieldErr(field, fmt.Sprintf("%q is not a regular file", shown))
		}
		if fi.Mode().Perm()&0o100 == 0 {
			return fieldErr(field, fmt.Sprintf("%q is not executable (by its owner)", shown))
		}
		// no_new_privileges neutralises these in the sandbox; refuse them
		// anyway, a skill never needs them.
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			return fieldErr(field, fmt.Sprintf("%q is setuid or setgid", shown))
		}
	}
	return nil
}
