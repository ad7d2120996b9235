package testutil

import (
	"os/exec"
	"runtime"
)

// BuildInit is the command that compiles sandbox-init/cyberos-init.c (src)
// to out as `make build` does: static, with musl-gcc when it is installed,
// else gcc. glibc's static start-up probes the CPU caches with CPUID at
// every exec, and CPUID traps to the hypervisor in a VM: that probe, not
// the init's own work, was most of its CPU per sandbox. The kernel's
// headers (linux/landlock.h, linux/seccomp.h) come after musl's own.
func BuildInit(out, src string) *exec.Cmd {
	cc := "gcc"
	if p, err := exec.LookPath("musl-gcc"); err == nil {
		cc = p
	}
	args := []string{"-static", "-O2", "-Wall", "-Wextra", "-Werror", "-idirafter", "/usr/include"}
	if multiarch, ok := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]; ok {
		args = append(args, "-idirafter", "/usr/include/"+multiarch)
	}
	return exec.Command(cc, append(args, "-o", out, src)...)
}
