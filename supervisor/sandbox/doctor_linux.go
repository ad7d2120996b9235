package sandbox

import (
	"fmt"
	"os"
	"strings"

	"cyberos.dev/cgroups"
	"cyberos.dev/supervisor/internal/seccomp"
)

// Doctor reports what this kernel and build can enforce.
func Doctor() []Finding {
	var out []Finding
	add := func(c string, ok bool, d string) { out = append(out, Finding{c, ok, d}) }

	for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		_, err := os.Stat("/proc/self/ns/" + ns)
		add("namespace "+ns, err == nil, errOr(err, "available"))
	}
	userNS, why := userNSAvailable(false)
	add("namespace user", userNS, map[bool]string{true: "a user namespace can be created", false: why}[userNS])

	if uid := os.Geteuid(); uid == 0 {
		add("user", true, "root, as skill run and supervisor serve need (namespaces, cgroups, mounts)")
	} else {
		add("user", false, fmt.Sprintf("uid %d, not root: skill run and supervisor serve refuse to start (they need namespaces, cgroups, mounts); the findings below are what root would get", uid))
	}
	mode := cgroups.DetectMode()
	add("cgroup mode", mode != cgroups.Unavailable, mode.String())
	for _, c := range []string{"memory", "pids", "cpu", "freezer"} {
		ok, d := cgroups.HasController(c)
		add("cgroup "+c, ok, d)
	}

	if where, err := CgroupPlacement(Options{CgroupPlacement: PlacementAuto}); err != nil {
		add("cgroup placement", false, err.Error())
	} else {
		add("cgroup placement", true, "auto, for this process: sandboxes "+where)
	}
	if os.Geteuid() == 0 {
		ok, d := exeSealing()
		add("binary sealing", ok, d)
	}
	add("seccomp in this build", seccomp.CompiledIn(), map[bool]string{true: "compiled in (cgo + libseccomp, tag seccomp)", false: ErrSeccompNotCompiled.Error()}[seccomp.CompiledIn()])
	status, _ := os.ReadFile("/proc/self/status")
	kernelSeccomp := strings.Contains(string(status), "Seccomp:")
	add("seccomp in the kernel", kernelSeccomp, map[bool]string{true: "CONFIG_SECCOMP_FILTER present", false: "no Seccomp field in /proc/self/status"}[kernelSeccomp])

	if abi, err := kernelLandlockABI(); err != nil {
		add("landlock", false, fmt.Sprintf("not available: %v; sandboxes run without it (recorded in containment.not_enforced)", err))
	} else {
		add("landlock", true, fmt.Sprintf("ABI %d; cyberos-init applies ABI %d to every skill and Bash process whose seccomp profile allows the landlock_* syscalls (recorded in containment.landlock)", abi, min(abi, landlockMaxABI)))
	}
	return out
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
