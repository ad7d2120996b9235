//go:build darwin || linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The macOS runner's rlimit shim ("<self> rlimit-init CPU AS NPROC NOFILE --
// PROGRAM", sandbox_darwin.go) is plain POSIX up to its exec, so it builds on
// Linux too, where its tests run.

// rlimitShim lowers the limits args name and execs the program with this
// process's environment; it returns only on failure.
func rlimitShim(args []string) error {
	set, prog, err := parseShimArgs(args)
	if err != nil {
		return err
	}
	if err := setRlimits(set); err != nil {
		return err
	}
	return syscall.Exec(prog, []string{prog}, os.Environ())
}

// rlimitSetting is one limit the shim sets, soft and hard alike.
type rlimitSetting struct {
	res int
	val uint64
}

// parseShimArgs reads the shim's arguments (after "rlimit-init") into the
// limits to set and the program to exec. A limit of 0 leaves that resource
// as inherited; RLIMIT_CORE is always set to 0.
func parseShimArgs(args []string) ([]rlimitSetting, string, error) {
	if len(args) != 6 || args[4] != "--" {
		return nil, "", errors.New("usage: rlimit-init CPU AS NPROC NOFILE -- PROGRAM")
	}
	var v [4]uint64
	for i := range v {
		n, err := strconv.ParseUint(args[i], 10, 64)
		if err != nil {
			return nil, "", fmt.Errorf("limit %d: %w", i, err)
		}
		v[i] = n
	}
	var set []rlimitSetting
	for i, res := range []int{unix.RLIMIT_CPU, unix.RLIMIT_AS, unix.RLIMIT_NPROC, unix.RLIMIT_NOFILE} {
		if v[i] != 0 {
			set = append(set, rlimitSetting{res, v[i]})
		}
	}
	set = append(set, rlimitSetting{unix.RLIMIT_CORE, 0})
	return set, args[5], nil
}

// setRlimits applies each setting as both the soft and the hard limit, so
// the program cannot raise it again.
func setRlimits(set []rlimitSetting) error {
	for _, s := range set {
		if err := unix.Setrlimit(s.res, &unix.Rlimit{Cur: s.val, Max: s.val}); err != nil {
			return fmt.Errorf("setrlimit %d: %w", s.res, err)
		}
	}
	return nil
}
