package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// binDir holds the copies of the sandbox binaries that are bind-mounted
// into every sandbox. A bind mount shows its source's host path in the
// skill's /proc/self/mountinfo; bound from copies in the run dir, the
// directory the binaries are installed in does not show, only the run dir
// (which the rootfs skeleton shows anyway).
func (r *LinuxRunner) binDir() string { return filepath.Join(r.cfg.RunDir, "bin") }

// copyBinaries copies the init and tool binaries into binDir, each named by
// its content's hash, so runners with other binaries on the same run dir
// never replace a copy another one mounts. Copies of older binaries stay
// until the run dir goes (/run/cyberos is a tmpfs: the next boot).
func (r *LinuxRunner) copyBinaries() error {
	if err := os.MkdirAll(r.binDir(), 0o711); err != nil {
		return fmt.Errorf("sandbox binaries: %w", err)
	}
	if err := os.Chmod(r.binDir(), 0o711); err != nil {
		return fmt.Errorf("sandbox binaries: %w", err)
	}
	var err error
	if r.initCopy, err = copyBinary(r.cfg.InitBinary, r.binDir(), "cyberos-init", initMode); err != nil {
		return err
	}
	r.toolCopy, err = copyBinary(r.cfg.ToolBinary, r.binDir(), "cyberos-tool", 0o755)
	return err
}

// initMode makes cyberos-init execute-only for the sandbox's uids: the
// kernel then makes every process that execs it non-dumpable, so no process
// of the skill's uid can ptrace it (or write its memory through /proc)
// before it has loaded the seccomp filter and Landlock rules.
const initMode = 0o711

// copyBinary copies src to dir/name-<first 16 hex digits of its SHA-256>
// with mode unless a copy by that name is already there, and returns the
// copy's path. An existing copy is trusted when it is a regular file of the
// same size and mode owned by this (root) user: only that user can write
// into the run dir.
func copyBinary(src, dir, name string, mode os.FileMode) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("sandbox binaries: %w", err)
	}
	defer f.Close()
	var id srcIdentity
	if fi, err := f.Stat(); err == nil {
		id = identityOf(fi)
	}
	if dst, ok := stampedCopy(dir, name, id); ok && intactCopy(dst, id.size, mode) {
		return dst, nil
	}
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("sandbox binaries: read %s: %w", src, err)
	}
	dst := filepath.Join(dir, name+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	if intactCopy(dst, size, mode) {
		writeStamp(dir, name, id, size, dst)
		return dst, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", fmt.Errorf("sandbox binaries: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp.")
	if err != nil {
		return "", fmt.Errorf("sandbox binaries: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, f)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return "", fmt.Errorf("sandbox binaries: copy %s: %w", src, err)
	}
	writeStamp(dir, name, id, size, dst)
	return dst, nil
}

// intactCopy reports whether dst is a copy copyBinary may reuse: a regular
// file of size bytes and mode, owned by this (root) user.
func intactCopy(dst string, size int64, mode os.FileMode) bool {
	fi, err := os.Lstat(dst)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != size || fi.Mode().Perm() != mode {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Geteuid()
}

// srcIdentity is what identifies a source binary's content without reading
// it: its inode, size and change times. Any write, truncation, rename over
// or chmod of the file moves its ctime, which no caller can set back.
type srcIdentity struct {
	dev, ino         uint64
	size             int64
	mtimeNS, ctimeNS int64
}

// identityOf is fi's identity; the zero one (never stamped) when fi is not
// a regular file.
func identityOf(fi os.FileInfo) srcIdentity {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || !fi.Mode().IsRegular() {
		return srcIdentity{}
	}
	return srcIdentity{
		dev: st.Dev, ino: st.Ino, size: st.Size,
		mtimeNS: st.Mtim.Nano(), ctimeNS: st.Ctim.Nano(),
	}
}

// stampRacy (a test shortens it) is how recent a source's change may be for its stamp to be
// neither written nor trusted: a write within the file system's timestamp
// granularity of the stamp would leave the times unchanged.
var stampRacy = 2 * time.Second

// stampPath is the file recording which copy the source with a given
// identity was hashed to, so that the next runner (every `skill run`) skips
// reading and hashing the whole binary again.
func stampPath(dir, name string) string { return filepath.Join(dir, "."+name+".stamp") }

// key is the identity as the stamp's line starts with it.
func (id srcIdentity) key() string {
	return fmt.Sprintf("%d %d %d %d %d ", id.dev, id.ino, id.size, id.mtimeNS, id.ctimeNS)
}

// line is the stamp's line: the key, then the copy's name.
func (id srcIdentity) line(dst string) string { return id.key() + filepath.Base(dst) + "\n" }

// stampedCopy returns the copy the stamp records for a source of identity
// id, if the stamp is this user's regular file and names exactly that
// identity; the caller still checks the copy itself.
func stampedCopy(dir, name string, id srcIdentity) (string, bool) {
	if id.ino == 0 || time.Since(time.Unix(0, id.ctimeNS)) < stampRacy {
		return "", false
	}
	p := stampPath(dir, name)
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 512 {
		return "", false
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() || fi.Mode().Perm()&0o022 != 0 {
		return "", false
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return "", false
	}
	base, ok := strings.CutPrefix(string(b), id.key())
	base, nl := strings.CutSuffix(base, "\n")
	if !ok || !nl || !strings.HasPrefix(base, name+"-") || strings.ContainsAny(base, "/\n ") {
		return "", false
	}
	return filepath.Join(dir, base), true
}

// writeStamp records that the source of identity id is the copy dst (best
// effort: without a stamp the next runner hashes the source again).
func writeStamp(dir, name string, id srcIdentity, size int64, dst string) {
	if id.ino == 0 || id.size != size || time.Since(time.Unix(0, id.ctimeNS)) < stampRacy {
		return
	}
	tmp, err := os.CreateTemp(dir, "."+name+".stamp.tmp.")
	if err != nil {
		return
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(id.line(dst))
	if cerr := tmp.Close(); err == nil && cerr == nil {
		_ = os.Rename(tmp.Name(), stampPath(dir, name))
	}
}
