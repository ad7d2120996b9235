package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"

	"github.com/opencontainers/runc/libcontainer/configs"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// CompileFilter builds the libseccomp filter for cfg the way libcontainer's
// InitSeccomp does (runc v1.5.3 libcontainer/seccomp/seccomp_linux.go: same
// default action, architectures, optimisation, rule skipping and
// conditions) and exports its BPF, without loading it. It leaves out runc's
// ENOSYS stub, which only changes what syscalls newer than the profile's
// newest one return. `seccomp lint` uses it to prove a profile compiles;
// the tests run the program in x/net/bpf's interpreter.
func CompileFilter(cfg *configs.Seccomp) ([]bpf.Instruction, error) {
	insns, err := exportFilter(cfg)
	if err != nil {
		return nil, err
	}
	prog, ok := bpf.Disassemble(insns)
	if !ok {
		return nil, errors.New("cannot disassemble the exported filter")
	}
	return prog, nil
}

// exportFilter builds cfg's libseccomp filter (see CompileFilter) and
// returns its exported BPF.
func exportFilter(cfg *configs.Seccomp) ([]bpf.RawInstruction, error) {
	def, err := scmpAction(cfg.DefaultAction, cfg.DefaultErrnoRet)
	if err != nil {
		return nil, err
	}
	f, err := libseccomp.NewFilter(def)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	for _, a := range cfg.Architectures {
		arch, err := libseccomp.GetArchFromString(a)
		if err != nil {
			return nil, err
		}
		if err := f.AddArch(arch); err != nil {
			return nil, err
		}
	}
	if len(cfg.Syscalls) > 32 {
		if err := f.SetOptimize(2); err != nil {
			return nil, err
		}
	}
	for _, call := range cfg.Syscalls {
		act, err := scmpAction(call.Action, call.ErrnoRet)
		if err != nil {
			return nil, err
		}
		if act == def {
			continue
		}
		nr, err := libseccomp.GetSyscallFromName(call.Name)
		if err != nil {
			continue // not on this architecture; libcontainer skips it too
		}
		if len(call.Args) == 0 {
			err = f.AddRule(nr, act)
		} else {
			var conds []libseccomp.ScmpCondition
			for _, a := range call.Args {
				c, err := libseccomp.MakeCondition(a.Index, scmpOp(a.Op), a.Value, a.ValueTwo)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", call.Name, err)
				}
				conds = append(conds, c)
			}
			err = f.AddRuleConditional(nr, act, conds)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", call.Name, err)
		}
	}

	fd, err := unix.MemfdCreate("seccomp-bpf", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	mem := os.NewFile(uintptr(fd), "seccomp-bpf")
	defer mem.Close()
	if err := f.ExportBPF(mem); err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(io.NewSectionReader(mem, 0, 1<<30))
	if err != nil {
		return nil, err
	}
	return rawInstructions(raw), nil
}

// rawInstructions reads a struct sock_filter array in host order (what
// libseccomp exports and Program.Insns holds).
func rawInstructions(b []byte) []bpf.RawInstruction {
	var insns []bpf.RawInstruction
	for ; len(b) >= 8; b = b[8:] {
		insns = append(insns, bpf.RawInstruction{
			Op: binary.NativeEndian.Uint16(b[0:]), Jt: b[2], Jf: b[3], K: binary.NativeEndian.Uint32(b[4:]),
		})
	}
	return insns
}

func scmpAction(a configs.Action, errnoRet *uint) (libseccomp.ScmpAction, error) {
	switch a {
	case configs.Allow:
		return libseccomp.ActAllow, nil
	case configs.Errno:
		ret := int16(unix.EPERM)
		if errnoRet != nil {
			ret = int16(*errnoRet)
		}
		return libseccomp.ActErrno.SetReturnCode(ret), nil
	case configs.Trace:
		ret := int16(unix.EPERM)
		if errnoRet != nil {
			ret = int16(*errnoRet)
		}
		return libseccomp.ActTrace.SetReturnCode(ret), nil
	case configs.Kill, configs.KillThread:
		return libseccomp.ActKillThread, nil
	case configs.KillProcess:
		return libseccomp.ActKillProcess, nil
	case configs.Trap:
		return libseccomp.ActTrap, nil
	case configs.Log:
		return libseccomp.ActLog, nil
	case configs.Notify:
		return libseccomp.ActNotify, nil
	}
	return libseccomp.ActInvalid, fmt.Errorf("seccomp action %v not supported", a)
}

func scmpOp(op configs.Operator) libseccomp.ScmpCompareOp {
	return map[configs.Operator]libseccomp.ScmpCompareOp{
		configs.EqualTo: libseccomp.CompareEqual, configs.NotEqualTo: libseccomp.CompareNotEqual,
		configs.GreaterThan: libseccomp.CompareGreater, configs.GreaterThanOrEqualTo: libseccomp.CompareGreaterEqual,
		configs.LessThan: libseccomp.CompareLess, configs.LessThanOrEqualTo: libseccomp.CompareLessOrEqual,
		configs.MaskEqualTo: libseccomp.CompareMaskedEqual,
	}[op]
}

// RetErrno is SECCOMP_RET_ERRNO, the return of a refused call; its low 16
// bits are the errno.
const RetErrno = 0x00050000

// Other seccomp return values (linux/seccomp.h).
const (
	seccompRetKillProcess = 0x80000000
	seccompRetKillThread  = 0x00000000
	seccompRetTrap        = 0x00030000
	seccompRetTrace       = 0x7ff00000
	seccompRetLog         = 0x7ffc0000
	seccompRetAllow       = 0x7fff0000
	seccompRetActionMask  = 0xffff0000
)

// NativeAuditArch is the AUDIT_ARCH_ value of this build's architecture.
func NativeAuditArch() (uint32, error) {
	switch runtime.GOARCH {
	case "amd64":
		return unix.AUDIT_ARCH_X86_64, nil
	case "arm64":
		return unix.AUDIT_ARCH_AARCH64, nil
	}
	return 0, fmt.Errorf("seccomp: no audit architecture known for %s", runtime.GOARCH)
}

// RunFilter runs a compiled filter on a struct seccomp_data in x/net/bpf's
// interpreter and returns the SECCOMP_RET_ value.
// The interpreter loads 32-bit words big-endian; the kernel loads them in
// host order, so each word is stored big-endian at the offset where the
// kernel would find it (the low half of a 64-bit argument first on a
// little-endian host).
func RunFilter(vm *bpf.VM, arch uint32, nr int32, args ...uint64) (uint32, error) {
	var data [64]byte
	binary.BigEndian.PutUint32(data[0:], uint32(nr))
	binary.BigEndian.PutUint32(data[4:], arch)
	littleEndian := binary.NativeEndian.Uint16([]byte{1, 0}) == 1
	for i, a := range args {
		lo, hi := uint32(a), uint32(a>>32)
		if !littleEndian {
			lo, hi = hi, lo
		}
		binary.BigEndian.PutUint32(data[16+8*i:], lo)
		binary.BigEndian.PutUint32(data[16+8*i+4:], hi)
	}
	ret, err := vm.Run(data[:])
	return uint32(ret), err
}

// RetPermits: the call goes through (allowed, or only logged).
func RetPermits(ret uint32) bool {
	switch ret & seccompRetActionMask {
	case seccompRetAllow, seccompRetLog, seccompRetTrace:
		return true
	}
	return false
}

// RetString names a SECCOMP_RET_ value: ALLOW, ERRNO(EPERM), KILL_THREAD…
func RetString(ret uint32) string {
	switch ret & seccompRetActionMask {
	case seccompRetAllow:
		return "ALLOW"
	case seccompRetLog:
		return "LOG"
	case RetErrno:
		return "ERRNO(" + ErrnoString(ret&0xffff) + ")"
	case seccompRetTrace:
		return "TRACE"
	case seccompRetTrap:
		return "TRAP"
	case seccompRetKillThread:
		return "KILL_THREAD"
	case seccompRetKillProcess:
		return "KILL_PROCESS"
	}
	return fmt.Sprintf("%#x", ret)
}

// ErrnoString names errno n (EPERM), or gives its number when it has no name.
func ErrnoString(n uint32) string {
	if name := unix.ErrnoName(unix.Errno(n)); name != "" {
		return name
	}
	return fmt.Sprint(n)
}
