package sandbox

import (
	"fmt"
	"slices"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"
)

// extraMaskedPaths are masked besides runc's defaults: /proc/config.gz is
// the host kernel's whole build configuration (which hardening options and
// drivers it has), of no use to a skill.
var extraMaskedPaths = []string{"/proc/config.gz"}

// config maps a Spec onto a libcontainer config. Every security control is
// set here, in one place: namespaces, id maps, mounts (r.mounts), masked paths, no
// capabilities, no_new_privs, cgroup limits, rlimits. lease is the
// sandbox's id range (nil in Check, before one is taken).
func (r *LinuxRunner) config(spec Spec, lease *idLease) (*configs.Config, Containment) {
	memBytes := spec.MemoryMB << 20
	pids := spec.PidsMax
	fsize, nofile := uint64(DefaultFileSizeMB)<<20, uint64(DefaultNoFile)
	if spec.FileSizeMB > 0 {
		fsize = uint64(spec.FileSizeMB) << 20
	}
	if spec.NoFile > 0 {
		nofile = uint64(spec.NoFile)
	}
	ns := configs.Namespaces{
		{Type: configs.NEWNS}, {Type: configs.NEWUTS}, {Type: configs.NEWIPC},
		{Type: configs.NEWPID}, {Type: configs.NEWNET}, {Type: configs.NEWCGROUP},
	}
	cont := Containment{
		Platform:       "linux",
		Namespaces:     []string{"mount", "uts", "ipc", "pid", "net (loopback only)", "cgroup"},
		CgroupMode:     r.cgroupMode.String(),
		MemoryMaxBytes: memBytes,
		PidsMax:        pids,
		CPUQuota:       spec.CPU,
		Capabilities:   "none (all sets empty, bounding included)",
		NoNewPrivs:     true,
		ReadOnlyRoot:   true,
		Rlimits:        []string{fmt.Sprintf("fsize=%d", fsize), fmt.Sprintf("nofile=%d", nofile), "core=0"},
	}
	example := specconv.Example().Linux
	oomAdj := 1000
	cfg := &configs.Config{
		Rootfs:          r.rootfsFor(spec),
		Readonlyfs:      true,
		Hostname:        Hostname,
		Namespaces:      ns,
		Mounts:          r.mounts(spec),
		Devices:         specconv.AllowedDevices,
		MaskPaths:       append(slices.Clip(example.MaskedPaths), extraMaskedPaths...),
		ReadonlyPaths:   example.ReadonlyPaths,
		Capabilities:    &configs.Capabilities{},
		NoNewPrivileges: true,
		OomScoreAdj:     &oomAdj,
		Networks:        []*configs.Network{{Type: "loopback", Address: "127.0.0.1/0", Gateway: "localhost"}},
		// No session keyring per container: libcontainer's was charged to
		// the sandbox's host uid and failed the start once that uid's key
		// quota (kernel.keys.maxkeys) was used up. The skill cannot reach
		// the keyring it inherits instead: no seccomp profile allows
		// keyctl, add_key or request_key, and /proc/keys is masked.
		NoNewKeyring: true,
		// Set from the host (prlimit) on the sandbox's init and on every
		// process Exec starts, so the Bash tool's commands get them too.
		Rlimits: []configs.Rlimit{
			{Type: unix.RLIMIT_FSIZE, Hard: fsize, Soft: fsize},
			{Type: unix.RLIMIT_NOFILE, Hard: nofile, Soft: nofile},
			{Type: unix.RLIMIT_CORE, Hard: 0, Soft: 0},
		},
		Cgroups: &occgroups.Cgroup{
			Path: r.cgroupParent + "/" + spec.ID,
			Resources: &occgroups.Resources{
				Memory:     memBytes,
				MemorySwap: memBytes, // memory+swap = memory: no swap
				PidsLimit:  &pids,
			},
		},
	}
	for _, d := range specconv.AllowedDevices {
		cfg.Cgroups.Resources.Devices = append(cfg.Cgroups.Resources.Devices, &d.Rule)
	}
	if spec.CPU > 0 {
		period := uint64(100_000)
		if spec.CPUPeriod > 0 {
			period = uint64(min(spec.CPUPeriod, time.Second).Microseconds())
		}
		cfg.Cgroups.Resources.CpuPeriod = period
		cfg.Cgroups.Resources.CpuQuota = int64(spec.CPU * float64(period))
		if spec.CPUBurst > 0 && r.cpuBurst {
			burst := uint64(spec.CPUBurst * float64(period))
			cfg.Cgroups.Resources.CpuBurst = &burst
			cont.CPUBurst = spec.CPUBurst
		}
	}
	if r.userNS {
		cont.Namespaces = append(cont.Namespaces, "user")
		last := uint64(r.cfg.HostIDBase) + uint64(r.cfg.IDRanges)*IDRangeSize - 1
		cont.UserNamespace = fmt.Sprintf("skill runs as uid %d in a host id range of its own (one of %d in %d-%d)", SkillUID, r.cfg.IDRanges, r.cfg.HostIDBase, last)
		if r.ownedNS {
			cont.UsernsOwner = "the range's own host uid"
		} else {
			cont.UsernsOwner = "host root"
			cont.NotEnforced = append(cont.NotEnforced, "user namespace owned by the sandbox's uid: "+r.ownedNSWhy)
		}
		if lease != nil {
			base := lease.start
			cfg.Namespaces = append(cfg.Namespaces, configs.Namespace{Type: configs.NEWUSER})
			cfg.UIDMappings = []configs.IDMap{{ContainerID: 0, HostID: int64(base), Size: IDRangeSize}}
			cfg.GIDMappings = []configs.IDMap{{ContainerID: 0, HostID: int64(base), Size: IDRangeSize}}
			lease.identity(r.nsOwner(lease)).Describe(&cont)
		}
	} else {
		cont.UserNamespace = fmt.Sprintf("none (%s); skill runs as host uid %d", r.userNSWhy, r.skillUID())
		cont.NotEnforced = append(cont.NotEnforced, "user namespace: "+r.userNSWhy)
	}
	return cfg, cont
}
