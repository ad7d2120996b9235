package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
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
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err != nil {
		return "", fmt.Errorf("sandbox binaries: read %s: %w", src, err)
	}
	dst := filepath.Join(dir, name+"-"+hex.EncodeToString(h.Sum(nil))[:16])
	if fi, err := os.Lstat(dst); err == nil && fi.Mode().IsRegular() && fi.Size() == size && fi.Mode().Perm() == mode {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Geteuid() {
			return dst, nil
		}
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
	return dst, nil
}
