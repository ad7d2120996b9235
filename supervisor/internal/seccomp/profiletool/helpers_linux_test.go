package profiletool

import (
	"fmt"
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
	runcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"

	"cyberos.dev/supervisor/internal/seccomp"
)

// profilesDir is the repository's seccomp-profiles/ directory.
const profilesDir = "../../../../seccomp-profiles"

const okProfile = `{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": 1, "flags": [],
 "syscalls": [{"names": ["read", "write", "arch_prctl"], "action": "SCMP_ACT_ALLOW"},
  {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 2114060288, "valueTwo": 0, "op": "SCMP_CMP_MASKED_EQ"}]}]}`

func permits(a configs.Action) bool {
	return a == configs.Allow || a == configs.Log || a == configs.Trace || a == configs.Notify
}

func actionName(a configs.Action) string {
	for _, name := range runcseccomp.KnownActions() {
		if act, _ := runcseccomp.ConvertStringToAction(name); act == a {
			return name
		}
	}
	return fmt.Sprintf("action %d", a)
}

func sysno(t testing.TB, name string) int32 {
	t.Helper()
	nr, err := libseccomp.GetSyscallFromName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return int32(nr)
}

func testAuditArch(t testing.TB) uint32 {
	t.Helper()
	arch, err := seccomp.NativeAuditArch()
	if err != nil {
		t.Fatal(err)
	}
	return arch
}

// compileFilter is seccomp.CompileFilter's filter in x/net/bpf's VM.
func compileFilter(t testing.TB, cfg *configs.Seccomp) *bpf.VM {
	t.Helper()
	prog, err := seccomp.CompileFilter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// evalFilter runs the filter in x/net/bpf's interpreter (seccomp.RunFilter).
func evalFilter(t testing.TB, vm *bpf.VM, arch uint32, nr int32, args ...uint64) uint32 {
	t.Helper()
	ret, err := seccomp.RunFilter(vm, arch, nr, args...)
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

// denies: the filter's return refuses the call (kills, traps or fails it).
func denies(ret uint32) bool {
	switch ret & 0xffff0000 {
	case 0x00000000 /* KILL_THREAD */, 0x80000000 /* KILL_PROCESS */, 0x00030000 /* TRAP */, seccomp.RetErrno:
		return true
	}
	return false
}

// retAllow is SECCOMP_RET_ALLOW (linux/seccomp.h).
const retAllow = 0x7fff0000

// fioclex is FIOCLEX, an ioctl every profile allows.
const fioclex = 0x5451
