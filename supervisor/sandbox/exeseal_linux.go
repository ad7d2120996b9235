package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// exeSealing says how libcontainer will protect this binary (CVE-2019-5736)
// when it re-executes it as each sandbox's first process: a read-only
// overlayfs over the binary's directory, which costs nothing, or, where that
// cannot be mounted (no overlay module), a copy of the whole binary into a
// sealed memfd at every start. It mounts what libcontainer's exeseal mounts
// first, with a scratch directory beside the default run dir standing in
// for the container's state directory, then unmounts it.
func exeSealing() (overlay bool, detail string) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return false, err.Error()
	}
	var size int64
	if st, err := os.Stat(exe); err == nil {
		size = st.Size()
	}
	copyCost := fmt.Sprintf("libcontainer copies this %d MiB binary into memory at every sandbox start instead (slower starts, memory per start being made); load the overlay module", size>>20)
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
