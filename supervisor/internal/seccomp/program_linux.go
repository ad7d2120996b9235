package seccomp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"

	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Program is a profile compiled to what the kernel loads: the classic BPF
// program (struct sock_filter array in host order) and the seccomp(2)
// flags. It is the filter libcontainer's InitSeccomp would load for the
// same config (runc v1.5.3: libseccomp's filter behind runc's ENOSYS stub,
// the same flags), built once per profile in the supervisor instead of in
// every sandbox's Go init; cyberos-init loads it before anything else runs.
// TestProgramBehavesAsRuncLoadsIt compares the two on a real kernel.
type Program struct {
	Insns []byte
	Flags uint
}

// ErrUnsupportedProgram: the config uses what only libcontainer's own
// loading handles (SCMP_ACT_NOTIFY, the recorder's mode; an architecture
// other than x86 and arm); the sandbox leaves the loading to it.
var ErrUnsupportedProgram = errors.New("seccomp: the config needs libcontainer's loader")

// maxInsns is the kernel's bound on a program (BPF_MAXINSNS).
const maxInsns = 4096

// Compile builds cfg's Program.
func Compile(cfg *configs.Seccomp) (*Program, error) {
	if cfg.DefaultAction == configs.Notify || slices.ContainsFunc(cfg.Syscalls, func(s *configs.Syscall) bool { return s.Action == configs.Notify }) {
		return nil, ErrUnsupportedProgram
	}
	flags, err := filterFlags(cfg.Flags)
	if err != nil {
		return nil, err
	}
	filter, err := exportFilter(cfg)
	if err != nil {
		return nil, err
	}
	stub, err := enosysStub(cfg)
	if err != nil {
		return nil, err
	}
	insns := append(stub, filter...)
	if len(insns) > maxInsns {
		return nil, fmt.Errorf("seccomp: the filter has %d instructions, the kernel loads at most %d", len(insns), maxInsns)
	}
	out := make([]byte, 0, 8*len(insns))
	for _, in := range insns {
		out = binary.NativeEndian.AppendUint16(out, in.Op)
		out = append(out, in.Jt, in.Jf)
		out = binary.NativeEndian.AppendUint32(out, in.K)
	}
	return &Program{Insns: out, Flags: flags}, nil
}

// filterFlags maps the config's flags to seccomp(2)'s as runc's setFlag
// and filterFlags do: TSYNC means nothing for a single-threaded loader.
func filterFlags(fl []specs.LinuxSeccompFlag) (uint, error) {
	var flags uint
	for _, f := range fl {
		switch f {
		case specs.LinuxSeccompFlagLog:
			flags |= unix.SECCOMP_FILTER_FLAG_LOG
		case specs.LinuxSeccompFlagSpecAllow:
			flags |= unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW
		case specs.LinuxSeccompFlagWaitKillableRecv:
			flags |= unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
		case "SECCOMP_FILTER_FLAG_TSYNC":
		default:
			return 0, fmt.Errorf("seccomp flag %s is not known", f)
		}
	}
	return flags, nil
}

// auditArchs: the AUDIT_ARCH_ value the kernel reports for each
// architecture the stub knows; x32 shares x86_64's and sets bit 30 of the
// syscall number.
var auditArchs = map[libseccomp.ScmpArch]uint32{
	libseccomp.ArchAMD64: unix.AUDIT_ARCH_X86_64,
	libseccomp.ArchX32:   unix.AUDIT_ARCH_X86_64,
	libseccomp.ArchX86:   unix.AUDIT_ARCH_I386,
	libseccomp.ArchARM64: unix.AUDIT_ARCH_AARCH64,
	libseccomp.ArchARM:   unix.AUDIT_ARCH_ARM,
}

const x32Bit = 1 << 30

// enosysStub is the program's head with runc's ENOSYS behaviour: on each
// architecture the filter covers (the native one and the config's), a
// syscall numbered above the largest one the config names for it returns
// ENOSYS, so libc falls back from syscalls newer than the profile; every
// other call runs libseccomp's filter. No stub when the default action
// already permits or answers ENOSYS (runc's generatePatch).
func enosysStub(cfg *configs.Seccomp) ([]bpf.RawInstruction, error) {
	if cfg.DefaultErrnoRet != nil && *cfg.DefaultErrnoRet == uint(unix.ENOSYS) {
		return nil, nil
	}
	switch cfg.DefaultAction {
	case configs.Allow, configs.Log, configs.Trace:
		return nil, nil
	}
	native, err := libseccomp.GetNativeArch()
	if err != nil {
		return nil, err
	}
	archs := []libseccomp.ScmpArch{native}
	for _, name := range cfg.Architectures {
		a, err := libseccomp.GetArchFromString(name)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(archs, a) {
			archs = append(archs, a)
		}
	}
	// Per AUDIT_ARCH_: the largest syscall number the config names, for
	// the native mode and (x86_64 only) the x32 mode.
	type limits struct {
		audit           uint32
		main, x32       uint32
		hasMain, hasX32 bool
	}
	var groups []*limits
	for _, a := range archs {
		audit, ok := auditArchs[a]
		if !ok {
			return nil, fmt.Errorf("%w: architecture %s", ErrUnsupportedProgram, a)
		}
		var largest uint32
		for _, call := range cfg.Syscalls {
			if nr, err := libseccomp.GetSyscallFromNameByArch(call.Name, a); err == nil && nr > 0 && uint32(nr) > largest {
				largest = uint32(nr)
			}
		}
		if largest == 0 {
			continue // no rule on this architecture: the filter decides
		}
		i := slices.IndexFunc(groups, func(g *limits) bool { return g.audit == audit })
		if i < 0 {
			groups = append(groups, &limits{audit: audit})
			i = len(groups) - 1
		}
		if a == libseccomp.ArchX32 {
			groups[i].x32, groups[i].hasX32 = largest, true
		} else {
			groups[i].main, groups[i].hasMain = largest, true
		}
	}
	var s stubAsm
	s.add(bpf.LoadAbsolute{Off: 4, Size: 4}) // seccomp_data.arch
	for i, g := range groups {
		s.jumpIf(bpf.JumpEqual, g.audit, fmt.Sprint("arch", i))
	}
	s.jump("filter")
	for i, g := range groups {
		s.label(fmt.Sprint("arch", i))
		s.add(bpf.LoadAbsolute{Off: 0, Size: 4}) // seccomp_data.nr
		if g.audit == unix.AUDIT_ARCH_X86_64 {
			s.jumpIf(bpf.JumpBitsSet, x32Bit, fmt.Sprint("x32-", i))
		}
		if g.hasMain {
			s.jumpIf(bpf.JumpGreaterThan, g.main, "enosys")
		}
		s.jump("filter")
		if g.audit == unix.AUDIT_ARCH_X86_64 {
			s.label(fmt.Sprint("x32-", i))
			if g.hasX32 {
				s.jumpIf(bpf.JumpGreaterThan, g.x32, "enosys")
			}
			s.jump("filter")
		}
	}
	s.label("enosys")
	s.add(bpf.RetConstant{Val: RetErrno | uint32(unix.ENOSYS)})
	s.label("filter")
	return s.assemble()
}

// stubAsm assembles a short, forward-jumping BPF program with named
// targets.
type stubAsm struct {
	insns  []bpf.Instruction
	labels map[string]int
	fixups []stubFixup
}

// stubFixup is a jump at insns[at] to the label to; a conditional jump
// falls through when its test fails.
type stubFixup struct {
	at int
	to string
}

func (s *stubAsm) add(in bpf.Instruction) { s.insns = append(s.insns, in) }

func (s *stubAsm) label(name string) {
	if s.labels == nil {
		s.labels = map[string]int{}
	}
	s.labels[name] = len(s.insns)
}

func (s *stubAsm) jumpIf(cond bpf.JumpTest, val uint32, ifTrue string) {
	s.fixups = append(s.fixups, stubFixup{at: len(s.insns), to: ifTrue})
	s.add(bpf.JumpIf{Cond: cond, Val: val})
}

func (s *stubAsm) jump(to string) {
	s.fixups = append(s.fixups, stubFixup{at: len(s.insns), to: to})
	s.add(bpf.Jump{})
}

func (s *stubAsm) assemble() ([]bpf.RawInstruction, error) {
	skip := func(at int, to string) (uint32, error) {
		target, ok := s.labels[to]
		if !ok || target <= at {
			return 0, fmt.Errorf("seccomp stub: bad jump to %q", to)
		}
		return uint32(target - at - 1), nil
	}
	for _, f := range s.fixups {
		t, err := skip(f.at, f.to)
		if err != nil {
			return nil, err
		}
		switch in := s.insns[f.at].(type) {
		case bpf.Jump:
			in.Skip = t
			s.insns[f.at] = in
		case bpf.JumpIf:
			if t > 255 {
				return nil, fmt.Errorf("seccomp stub: a conditional jump of %d instructions", t)
			}
			in.SkipTrue = uint8(t)
			s.insns[f.at] = in
		}
	}
	return bpf.Assemble(s.insns)
}

// programs caches Compile's result per profile SHA-256 (LoadProfileHashed's
// hash of the bytes the config was converted from): the same bytes always
// make the same program, or the same ErrUnsupportedProgram (a nil entry).
var programs struct {
	mu sync.Mutex
	m  map[string]*Program
}

// ProgramFor returns the Program of cfg, which LoadProfileHashed converted
// from bytes hashing to profileHash; compiled once per hash. Callers must
// not change the result.
func ProgramFor(profileHash string, cfg *configs.Seccomp) (*Program, error) {
	programs.mu.Lock()
	p, ok := programs.m[profileHash]
	programs.mu.Unlock()
	if ok && p == nil {
		return nil, ErrUnsupportedProgram
	}
	if ok {
		return p, nil
	}
	p, err := Compile(cfg)
	if err != nil && !errors.Is(err, ErrUnsupportedProgram) {
		return nil, err
	}
	programs.mu.Lock()
	defer programs.mu.Unlock()
	if programs.m == nil || len(programs.m) >= maxCachedProfiles {
		programs.m = map[string]*Program{} // a daemon uses a handful of profiles
	}
	programs.m[profileHash] = p
	return p, err
}

// File returns the program in a sealed memfd (no write, grow, shrink or
// new seal), the form cyberos-init's --seccomp reads.
func (p *Program) File() (*os.File, error) {
	fd, err := unix.MemfdCreate("cyberos-seccomp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("seccomp program memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "cyberos-seccomp")
	if _, err := f.Write(p.Insns); err != nil {
		f.Close()
		return nil, fmt.Errorf("seccomp program memfd: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		f.Close()
		return nil, fmt.Errorf("seccomp program memfd seals: %w", err)
	}
	return f, nil
}
