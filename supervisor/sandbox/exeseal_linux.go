package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// exeSealing says how libcontainer will protect the creation helper
// (cyberos-spawn beside this executable, which it re-executes as each
// sandbox's first process) against CVE-2019-5736: a read-only overlayfs over
// the helper's directory, which costs nothing, or, where that cannot be
// mounted (no overlay module), a copy of the whole binary into a sealed memfd
// at every start. It mounts what libcontainer's exeseal mounts first, with a
// scratch directory beside the default run dir standing in for the
// container's state directory, then unmounts it.
func exeSealing() (overlay bool, detail string) {
	self, err := os.Executable()
	if err != nil {
		return false, err.Error()
	}
	exe := filepath.Join(filepath.Dir(self), "cyberos-spawn")
	st, err := os.Stat(exe)
	if err != nil {
		return false, fmt.Sprintf("the sandbox creation helper: %v (build it with `make build`)", err)
	}
	copyCost := fmt.Sprintf("libcontainer copies the %d MiB %s into memory at every sandbox start instead (slower starts, memory per start being made); load the overlay module", st.Size()>>20, filepath.Base(exe))
	tmp, err := os.MkdirTemp(filepath.Dir(DefaultRunDir), ".cyberos-doctor-")
	if err != nil {
		return false, err.Error()
	}
	defer os.Remove(tmp)
	ctx, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return false, fmt.Sprintf("overlayfs unavailable (fsopen: %v): %s", err, copyCost)
	}
	defer unix.Close(ctx)
	esc := strings.NewReplacer(`\`, `\\`, `:`, `\:`)
	lower := esc.Replace(filepath.Dir(exe)) + ":" + esc.Replace(tmp)
	if err := unix.FsconfigSetString(ctx, "lowerdir", lower); err != nil {
		return false, fmt.Sprintf("overlayfs refuses %s as a lower directory (%v): %s", filepath.Dir(exe), err, copyCost)
	}
	if err := unix.FsconfigCreate(ctx); err != nil {
		return false, fmt.Sprintf("overlayfs over %s cannot be created (%v): %s", filepath.Dir(exe), err, copyCost)
	}
	mnt, err := unix.Fsmount(ctx, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY)
	if err != nil {
		return false, fmt.Sprintf("overlayfs over %s cannot be mounted (%v): %s", filepath.Dir(exe), err, copyCost)
	}
	unix.Close(mnt)
	return true, "a read-only overlayfs over " + filepath.Dir(exe) + " (libcontainer's exeseal; no copy of the binary per start)"
}
