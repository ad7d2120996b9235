package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"cyberos.dev/internal/fdread"
	"cyberos.dev/policy"
)

// The safe opener of fileio.go. Every path-based open is openat2 with
// resolveNoLinks; every open below an already open directory adds
// RESOLVE_BENEATH and names a single component.

const resolveNoLinks = unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openat2 opens name (relative to dirfd, or absolute with AT_FDCWD) with
// O_CLOEXEC added and no symlink followed anywhere: RESOLVE_NO_SYMLINKS
// refuses one in any component with ELOOP. O_NOFOLLOW is added too, except
// with O_DIRECTORY, where it would turn a trailing symlink's ELOOP into
// ENOTDIR and hide why the open failed. EINTR is
// retried, and so is EAGAIN a few times (openat2 returns it when a rename
// raced a scoped lookup). Linux before 5.6 has no openat2: ENOSYS, reported
// as such, never worked around.
func openat2(dirfd int, name string, flags uint64, mode uint64) (int, error) {
	if flags&unix.O_DIRECTORY == 0 {
		flags |= unix.O_NOFOLLOW
	}
	how := unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Mode:    mode,
		Resolve: resolveNoLinks,
	}
	if dirfd != unix.AT_FDCWD {
		how.Resolve |= unix.RESOLVE_BENEATH
	}
	for again := 0; ; {
		fd, err := unix.Openat2(dirfd, name, &how)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN && again < 8:
			again++
			continue
		}
		return fd, err
	}
}

// openDir opens the directory dir (absolute, clean) for reading, fsync and
// *at calls.
func openDir(dir string) (int, error) {
	return openat2(unix.AT_FDCWD, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
}

// lstatAt describes the entry name of the open directory dirfd without
// following it.
func lstatAt(dirfd int, name string) (unix.Stat_t, error) {
	var st unix.Stat_t
	for {
		err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err != unix.EINTR {
			return st, err
		}
	}
}

// checkRegular refuses anything but a regular file with a single link.
func checkRegular(t policy.Tool, st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFLNK:
		return fileDenial(t, "symlink")
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fileDenial(t, "not a regular file")
	case st.Nlink > 1:
		return fileDenial(t, "hard link")
	}
	return nil
}

// fsErr maps an errno onto this package's classes, without errno text.
func fsErr(t policy.Tool, err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		if errors.Is(err, ErrTooLarge) || errors.Is(err, ErrFailed) {
			return err
		}
		return skillError(ErrFailed, "i/o error")
	}
	switch errno {
	case unix.ELOOP:
		return fileDenial(t, "symlink")
	case unix.EISDIR:
		return fileDenial(t, "not a regular file")
	case unix.ENOENT:
		return skillError(ErrNotFound, "no such file or directory")
	case unix.ENOTDIR:
		return skillError(ErrNotFound, "a path component is not a directory")
	case unix.EACCES, unix.EPERM:
		return skillError(ErrFailed, "permission denied")
	case unix.ENAMETOOLONG:
		return skillError(ErrInvalidParams, "path too long")
	case unix.ENOSPC, unix.EDQUOT:
		return skillError(ErrFailed, "no space left")
	case unix.EROFS:
		return skillError(ErrFailed, "read-only file system")
	case unix.ENOSYS:
		return skillError(ErrFailed, "the host kernel has no openat2 (Linux 5.6 or later is required)")
	}
	return skillError(ErrFailed, "i/o error")
}

// splitPath splits a clean absolute path into its directory and last
// component; "/" has no last component.
func splitPath(p string) (dir, base string) {
	if p == "/" {
		return "/", ""
	}
	return path.Dir(p), path.Base(p)
}

// openRegularAt opens the entry name of dirfd for reading, refusing a
// symlink, a non-regular file and a hard link. The entry is examined before
// the open (so a FIFO or device is never opened: O_NONBLOCK covers a swap in
// between, and has no effect on a regular file's reads) and the descriptor
// again after it (what counts is what was opened). The caller closes fd.
func openRegularAt(t policy.Tool, dirfd int, name string) (fd int, st unix.Stat_t, err error) {
	if st, err = lstatAt(dirfd, name); err != nil {
		return -1, st, fsErr(t, err)
	}
	if err := checkRegular(t, &st); err != nil {
		return -1, st, err
	}
	if fd, err = openat2(dirfd, name, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0); err != nil {
		return -1, st, fsErr(t, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, fsErr(t, err)
	}
	if err := checkRegular(t, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// readLimited reads all of the regular file fd (st its fstat), refusing
// more than limit bytes; a file as large as it was at the fstat is read
// with one read(2) (fdread.All). before, when set, is told the size first
// (the memory budget's reservation) and may refuse the read.
func readLimited(t policy.Tool, fd int, st *unix.Stat_t, limit int64, before func(size int64) error) ([]byte, error) {
	tooLarge := fmt.Errorf("%w: file is larger than %d bytes", ErrTooLarge, limit)
	if st.Size > limit {
		return nil, tooLarge
	}
	if before != nil {
		if err := before(st.Size); err != nil {
			return nil, err
		}
	}
	b, err := fdread.All(fd, st.Size, limit)
	switch {
	case errors.Is(err, fdread.ErrTooLarge):
		return nil, tooLarge // it grew while being read
	case err != nil:
		return nil, fsErr(t, err)
	}
	return b, nil
}

// readAt reads the regular file name of dirfd, at most limit bytes (before:
// as readLimited).
func readAt(t policy.Tool, dirfd int, name string, limit int64, before func(int64) error) ([]byte, error) {
	fd, st, err := openRegularAt(t, dirfd, name)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readLimited(t, fd, &st, limit, before)
}

// readHostFile reads the regular file at p (clean, absolute, already judged
// by the enforcer), at most limit bytes; before, when set, is told the
// file's size before anything is read and may refuse the read.
func readHostFile(t policy.Tool, p string, limit int64, before func(size int64) error) ([]byte, error) {
	dir, base := splitPath(p)
	if base == "" {
		return nil, fileDenial(t, "not a regular file")
	}
	dirfd, err := openDir(dir)
	if err != nil {
		return nil, fsErr(t, err)
	}
	defer unix.Close(dirfd)
	return readAt(t, dirfd, base, limit, before)
}

// writeHostFile creates or replaces the regular file at p with data. An
// existing symlink, non-regular file or hard link at p is refused; the
// parent directory must exist.
func writeHostFile(t policy.Tool, p string, data []byte) error {
	dir, base := splitPath(p)
	if base == "" {
		return fileDenial(t, "not a regular file")
	}
	dirfd, err := openDir(dir)
	if err != nil {
		return fsErr(t, err)
	}
	defer unix.Close(dirfd)
	st, err := lstatAt(dirfd, base)
	switch {
	case errors.Is(err, unix.ENOENT):
		return replaceAt(t, dirfd, base, data, nil)
	case err != nil:
		return fsErr(t, err)
	}
	if err := checkRegular(t, &st); err != nil {
		return err
	}
	return replaceAt(t, dirfd, base, data, &st)
}

// editHostFile reads the regular file at p (at most limit bytes; before: as
// readLimited), passes its content to edit, and replaces the file with what edit returns, all below
// one open directory. A file replaced by someone else meanwhile is not
// overwritten (ErrFailed: retry); the window left is between that check and
// the rename.
func editHostFile(t policy.Tool, p string, limit int64, before func(size int64) error, edit func([]byte) ([]byte, error)) ([]byte, error) {
	dir, base := splitPath(p)
	if base == "" {
		return nil, fileDenial(t, "not a regular file")
	}
	dirfd, err := openDir(dir)
	if err != nil {
		return nil, fsErr(t, err)
	}
	defer unix.Close(dirfd)
	fd, st, err := openRegularAt(t, dirfd, base)
	if err != nil {
		return nil, err
	}
	old, err := readLimited(t, fd, &st, limit, before)
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	data, err := edit(old)
	if err != nil {
		return nil, err
	}
	now, err := lstatAt(dirfd, base)
	if err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		return nil, skillError(ErrFailed, "the file was replaced during the edit; retry")
	}
	if err := replaceAt(t, dirfd, base, data, &st); err != nil {
		return nil, err
	}
	return data, nil
}

// replaceAt writes data to a new temporary file in dirfd and renames it to
// name: over the existing file old (keeping its owner and permission bits,
// without setuid/setgid/sticky), or, with old nil, only if name still does
// not exist. Both the file and the directory are fsynced.
func replaceAt(t policy.Tool, dirfd int, name string, data []byte, old *unix.Stat_t) (err error) {
	var tmp string
	var fd int
	for try := 0; ; try++ {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return skillError(ErrFailed, "no randomness for a temporary name")
		}
		tmp = ".cyberos-" + hex.EncodeToString(r[:]) + ".tmp"
		fd, err = openat2(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o600)
		if errors.Is(err, unix.EEXIST) && try < 8 {
			continue
		}
		if err != nil {
			return fsErr(t, err)
		}
		break
	}
	renamed := false
	defer func() {
		if !renamed {
			_ = unix.Unlinkat(dirfd, tmp, 0) // best effort, as os.Remove
		}
	}()
	f := os.NewFile(uintptr(fd), tmp)
	if err := fillTemp(f, data, old); err != nil {
		f.Close()
		return fsErr(t, err)
	}
	if err := f.Close(); err != nil {
		return fsErr(t, err)
	}

	if old != nil {
		err = unix.Renameat(dirfd, tmp, dirfd, name)
	} else {
		err = unix.Renameat2(dirfd, tmp, dirfd, name, unix.RENAME_NOREPLACE)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
			// A file system without RENAME_NOREPLACE: link(2) never
			// replaces either.
			if err = unix.Linkat(dirfd, tmp, dirfd, name, 0); err == nil {
				// Best effort: name is in place; a leftover tmp is clutter.
				_ = unix.Unlinkat(dirfd, tmp, 0)
			}
		}
		if errors.Is(err, unix.EEXIST) {
			return skillError(ErrFailed, "the file was created by someone else meanwhile; retry")
		}
	}
	if err != nil {
		return fsErr(t, err)
	}
	renamed = true
	if err := unix.Fsync(dirfd); err != nil {
		return fsErr(t, err)
	}
	return nil
}

// fillTemp writes data to the temporary file, gives it old's owner and
// permission bits (or newFileMode), and fsyncs it.
func fillTemp(f *os.File, data []byte, old *unix.Stat_t) error {
	if _, err := f.Write(data); err != nil {
		return err
	}
	fd := int(f.Fd())
	mode := uint32(newFileMode)
	if old != nil {
		mode = old.Mode & 0o777
		if old.Uid != uint32(os.Geteuid()) || old.Gid != uint32(os.Getegid()) {
			if err := unix.Fchown(fd, int(old.Uid), int(old.Gid)); err != nil {
				return skillError(ErrFailed, "cannot keep the file's owner")
			}
		}
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return err
	}
	return f.Sync()
}

// pathDepth is the number of components of a clean absolute path.
func pathDepth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// holdsSkillFile reports whether the open directory dirfd has an entry
// named SKILL.md (of any type): whether it is a skill folder.
func holdsSkillFile(dirfd int) (bool, error) {
	switch _, err := lstatAt(dirfd, policy.SkillFile); {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return false, nil
	default:
		return false, err
	}
}

// inSkillFolder reports whether p (clean, absolute) is a skill folder or
// lies below one: whether p or a directory above it holds a SKILL.md. It is
// asked at call time, on disk, so a skill folder counts wherever it lives.
// Each directory d from / down to p is asked with one openat2 of
// d/SKILL.md (O_PATH, no symlink followed anywhere, a SKILL.md that is
// itself a symlink found as such), where a walk holding each directory
// would take three system calls a level. The check ends at the first d that
// is not a directory it can reach (a file: ENOTDIR; a symlink: ELOOP),
// whose own open then fails or is refused, as it does where nothing exists
// below (ENOENT all the way down). A path too long for that (d/SKILL.md
// past PATH_MAX, which p itself is not) is walked a directory at a time.
func inSkillFolder(p string) (bool, error) {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return false, fmt.Errorf("%w: %q is not a clean absolute path", ErrFailed, p)
	}
	for d := "/"; ; {
		fd, err := openat2(unix.AT_FDCWD, path.Join(d, policy.SkillFile), unix.O_PATH, 0)
		switch {
		case err == nil:
			unix.Close(fd)
			return true, nil
		case errors.Is(err, unix.ENOENT):
		case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			return false, nil
		case errors.Is(err, unix.ENAMETOOLONG):
			return inSkillFolderWalk(p)
		default:
			return false, err
		}
		if d == p {
			return false, nil
		}
		next, _, _ := strings.Cut(strings.TrimPrefix(p[len(d):], "/"), "/")
		d = path.Join(d, next)
	}
}

// inSkillFolderWalk is inSkillFolder one directory at a time: each is
// opened below the one before it (openat2, O_PATH, RESOLVE_BENEATH, no
// symlinks) and asked for a SKILL.md; the walk ends at the first component
// that is not a directory it can open.
func inSkillFolderWalk(p string) (bool, error) {
	fd, err := openat2(unix.AT_FDCWD, "/", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return false, err
	}
	rest := strings.TrimPrefix(p, "/")
	for {
		found, err := holdsSkillFile(fd)
		if err != nil || found || rest == "" {
			unix.Close(fd)
			return found, err
		}
		var name string
		name, rest, _ = strings.Cut(rest, "/")
		next, err := openat2(fd, name, unix.O_PATH|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return false, nil
		}
		fd = next
	}
}

// walkHost reports root (clean, absolute) and, when it is a directory,
// everything below it to fn, depth first in name order. Symlinks and
// non-regular files below root are skipped silently; root itself being a
// symlink (or reached through one) or a non-regular file is a Denial. No
// directory deeper than maxDepth components is listed (maxDepth < 0: no
// limit). fn may return errWalkSkipDir for a directory, errWalkStop to end the
// walk without error, or any other error to end it with that error.
// Directories that cannot be opened below root are skipped.
func walkHost(ctx context.Context, t policy.Tool, root string, maxDepth int, fn func(hostEntry) error) error {
	if err := refuseSkillFolder(t, root); err != nil {
		return err
	}
	dir, base := splitPath(root)
	var dirfd int
	if base == "" {
		fd, err := openDir("/")
		if err != nil {
			return fsErr(t, err)
		}
		dirfd = fd
	} else {
		parent, err := openDir(dir)
		if err != nil {
			return fsErr(t, err)
		}
		defer unix.Close(parent)
		st, err := lstatAt(parent, base)
		if err != nil {
			return fsErr(t, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			err := fn(hostEntry{Path: root, Read: func(limit int64, before func(int64) error) ([]byte, error) {
				return readAt(t, parent, base, limit, before)
			}})
			if errors.Is(err, errWalkStop) || errors.Is(err, errWalkSkipDir) {
				err = nil
			}
			return err
		case unix.S_IFDIR:
		case unix.S_IFLNK:
			return fileDenial(t, "symlink")
		default:
			return fileDenial(t, "not a regular file")
		}
		if dirfd, err = openat2(parent, base, unix.O_RDONLY|unix.O_DIRECTORY, 0); err != nil {
			return fsErr(t, err)
		}
	}
	switch err := fn(hostEntry{Path: root, Dir: true}); {
	case err == nil:
	case errors.Is(err, errWalkStop), errors.Is(err, errWalkSkipDir):
		unix.Close(dirfd)
		return nil
	default:
		unix.Close(dirfd)
		return err
	}
	err := walkDir(ctx, t, dirfd, root, maxDepth, fn)
	if errors.Is(err, errWalkStop) {
		err = nil
	}
	return err
}

// walkDir lists the open directory dirfd (at dirPath) and walks into its
// subdirectories; it closes dirfd.
func walkDir(ctx context.Context, t policy.Tool, dirfd int, dirPath string, maxDepth int, fn func(hostEntry) error) error {
	d := os.NewFile(uintptr(dirfd), dirPath)
	defer d.Close()
	if maxDepth >= 0 && pathDepth(dirPath) >= maxDepth {
		return nil
	}
	ents, err := d.ReadDir(-1)
	if err != nil && len(ents) == 0 {
		return nil // unreadable below root: skipped
	}
	slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	prefix := dirPath + "/"
	if dirPath == "/" {
		prefix = "/"
	}
	for _, ent := range ents {
		if err := ctx.Err(); err != nil {
			return ctxErr(err)
		}
		name := ent.Name()
		p := prefix + name
		switch typ := ent.Type(); {
		case typ.IsDir():
			child, err := openat2(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			if err != nil {
				continue // swapped for a symlink, unreadable, gone
			}
			// A skill folder is neither listed nor entered.
			if skill, err := holdsSkillFile(child); skill || err != nil {
				unix.Close(child)
				continue
			}
			switch err := fn(hostEntry{Path: p, Dir: true}); {
			case err == nil:
			case errors.Is(err, errWalkSkipDir):
				unix.Close(child)
				continue
			default:
				unix.Close(child)
				return err
			}
			if err := walkDir(ctx, t, child, p, maxDepth, fn); err != nil {
				return err
			}
		case typ.IsRegular() && name == policy.SkillFile:
			// A stray SKILL.md is a policy input too.
		case typ.IsRegular():
			err := fn(hostEntry{Path: p, Read: func(limit int64, before func(int64) error) ([]byte, error) {
				return readAt(t, dirfd, name, limit, before)
			}})
			if err != nil && !errors.Is(err, errWalkSkipDir) {
				return err
			}
		}
	}
	return nil
}
