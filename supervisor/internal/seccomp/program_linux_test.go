package seccomp

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	mobyseccomp "github.com/moby/profiles/seccomp"
	"github.com/opencontainers/runc/libcontainer/configs"
	runcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"cyberos.dev/internal/testutil"
)

// envLoadChild names the profile file TestProgramHelperProcess loads.
const envLoadChild = "CYBEROS_SECCOMP_LOAD"

// TestProgramBehavesAsRuncLoadsIt: for each profile, the Program the
// supervisor compiles and the filter libcontainer's InitSeccomp loads into
// a real thread (read back from the kernel with PTRACE_SECCOMP_GET_FILTER)
// return the same action for every architecture, syscall number (x32 ones
// too) and the argument values the profile's conditions compare with.
func TestProgramBehavesAsRuncLoadsIt(t *testing.T) {
	testutil.RequiresRoot(t)
	dir := t.TempDir()
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, name+".json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"default", "strict"} {
		data, err := os.ReadFile(filepath.Join(profilesDir, name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		write(name, data)
	}
	write("docker", dockerDefault(t))
	// default.json changed in one key: a default of ENOSYS (no stub), and,
	// on x86_64, three architectures (the stub's x32 and i386 branches).
	write("enosys-default", withKey(t, "default", "defaultErrnoRet", 38))
	profiles := []string{"default", "strict", "docker", "enosys-default"}
	if runtime.GOARCH == "amd64" {
		write("multiarch", withKey(t, "default", "architectures", []string{"SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"}))
		profiles = append(profiles, "multiarch")
	}
	for _, name := range profiles {
		t.Run(name, func(t *testing.T) {
			cfg, err := LoadProfile(dir, name)
			if err != nil {
				t.Fatal(err)
			}
			p, err := Compile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ours := vmOf(t, rawInstructions(p.Insns))
			theirs := vmOf(t, runcLoaded(t, filepath.Join(dir, name+".json")))
			var enosys, compared int
			for _, in := range filterInputs(t, cfg) {
				a, errA := RunFilter(ours, in.arch, in.nr, in.args...)
				b, errB := RunFilter(theirs, in.arch, in.nr, in.args...)
				if errA != nil || errB != nil {
					t.Fatalf("arch %#x nr %#x: %v / %v", in.arch, in.nr, errA, errB)
				}
				if a != b {
					t.Errorf("arch %#x nr %#x args %v: ours %s, runc's %s", in.arch, uint32(in.nr), in.args, RetString(a), RetString(b))
				}
				if a == RetErrno|uint32(unix.ENOSYS) {
					enosys++
				}
				compared++
			}
			t.Logf("%d inputs compared, %d answered ENOSYS", compared, enosys)
			if enosys == 0 {
				t.Error("no input answered ENOSYS: the stub's numbers above the profile's newest call are not exercised")
			}
		})
	}
}

// withKey is the repository's profile name with one top-level key set.
func withKey(t *testing.T, name, key string, value any) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(profilesDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	m[key] = value
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

type filterInput struct {
	arch uint32
	nr   int32
	args []uint64
}

// filterInputs: every syscall number below 1024 (and its x32 form on
// x86_64) on the native and three foreign architectures, with zero
// arguments, plus, for each conditional rule, each argument at the
// compared value, one either side, and all ones.
func filterInputs(t *testing.T, cfg *configs.Seccomp) []filterInput {
	native := testAuditArch(t)
	conds := map[int32][][]uint64{}
	for _, call := range cfg.Syscalls {
		nr, err := libseccomp.GetSyscallFromName(call.Name)
		if err != nil || len(call.Args) == 0 {
			continue
		}
		for _, a := range call.Args {
			for _, v := range []uint64{a.Value, a.Value - 1, a.Value + 1, a.ValueTwo, math.MaxUint64} {
				args := make([]uint64, 6)
				args[a.Index] = v
				conds[int32(nr)] = append(conds[int32(nr)], args)
			}
		}
	}
	archs := []uint32{native}
	for _, a := range []uint32{unix.AUDIT_ARCH_X86_64, unix.AUDIT_ARCH_I386, unix.AUDIT_ARCH_AARCH64, unix.AUDIT_ARCH_ARM} {
		if a != native {
			archs = append(archs, a)
		}
	}
	var in []filterInput
	for _, arch := range archs {
		nrs := []int32{-1, math.MaxInt32}
		for nr := int32(0); nr < 1024; nr++ {
			nrs = append(nrs, nr)
			if arch == unix.AUDIT_ARCH_X86_64 {
				nrs = append(nrs, nr|x32Bit)
			}
		}
		for _, nr := range nrs {
			in = append(in, filterInput{arch: arch, nr: nr})
			if arch == native {
				for _, args := range conds[nr] {
					in = append(in, filterInput{arch: arch, nr: nr, args: args})
				}
			}
		}
	}
	return in
}

func vmOf(t *testing.T, raw []bpf.RawInstruction) *bpf.VM {
	t.Helper()
	prog, ok := bpf.Disassemble(raw)
	if !ok {
		t.Fatal("cannot disassemble the program")
	}
	vm, err := bpf.NewVM(prog)
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// runcLoaded starts a child that loads the profile at path with
// libcontainer's InitSeccomp on one thread, and reads that thread's newest
// filter back from the kernel.
func runcLoaded(t *testing.T, path string) []bpf.RawInstruction {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestProgramHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envLoadChild+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	var tid int
	if _, serr := fmt.Sscanf(line, "loaded on %d", &tid); err != nil || serr != nil {
		t.Fatalf("child: %q %v %v", line, err, serr)
	}
	// ptrace requests must come from the thread that attached.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(tid); err != nil {
		t.Fatalf("attach %d: %v", tid, err)
	}
	defer func() { _ = unix.PtraceDetach(tid) }()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(tid, &ws, unix.WALL, nil); err != nil {
		t.Fatal(err)
	}
	n, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(tid), 0, 0, 0, 0)
	if errno != 0 || n == 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %d %v", n, errno)
	}
	buf := make([]unix.SockFilter, n)
	if _, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_SECCOMP_GET_FILTER, uintptr(tid), 0, uintptr(unsafe.Pointer(&buf[0])), 0, 0); errno != 0 {
		t.Fatalf("PTRACE_SECCOMP_GET_FILTER: %v", errno)
	}
	raw := make([]bpf.RawInstruction, len(buf))
	for i, f := range buf {
		raw[i] = bpf.RawInstruction{Op: f.Code, Jt: f.Jt, Jf: f.Jf, K: f.K}
	}
	return raw
}

// TestProgramHelperProcess is not a test: it is the child side of
// runcLoaded. It loads the profile as the container init does
// (no_new_privs, then InitSeccomp on a locked thread), says which thread,
// and sleeps until killed.
func TestProgramHelperProcess(t *testing.T) {
	path := os.Getenv(envLoadChild)
	if path == "" {
		return
	}
	runtime.LockOSThread()
	cfg, err := LoadProfile(filepath.Dir(path), strings.TrimSuffix(filepath.Base(path), ".json"))
	if err == nil {
		err = unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
	}
	if err == nil {
		_, err = runcseccomp.InitSeccomp(cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load child:", err)
		os.Exit(126)
	}
	fmt.Printf("loaded on %d\n", unix.Gettid())
	time.Sleep(time.Hour)
	os.Exit(0)
}

// TestProgramFlags: the seccomp(2) flags follow the config's as runc maps
// them; a profile without "flags" gets SPEC_ALLOW from specconv.
func TestProgramFlags(t *testing.T) {
	flags := func(cfg *configs.Seccomp) (uint, error) {
		p, err := Compile(cfg)
		if err != nil {
			return 0, err
		}
		return p.Flags, nil
	}
	cfg := loadDefault(t)
	if f, err := flags(cfg); err != nil || f != 0 {
		t.Errorf("default.json (\"flags\": []): flags %#x, %v; want none", f, err)
	}
	dir := t.TempDir()
	var m map[string]any
	if err := json.Unmarshal(withKey(t, "default", "flags", nil), &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "flags")
	data, _ := json.Marshal(m)
	if err := os.WriteFile(filepath.Join(dir, "noflags.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	noFlags, err := LoadProfile(dir, "noflags")
	if err != nil {
		t.Fatal(err)
	}
	wantSpec := runcseccomp.FlagSupported(specs.LinuxSeccompFlagSpecAllow) == nil
	if f, err := flags(noFlags); err != nil || (f == unix.SECCOMP_FILTER_FLAG_SPEC_ALLOW) != wantSpec {
		t.Errorf("no flags key: flags %#x, %v; SPEC_ALLOW wanted: %v", f, err, wantSpec)
	}
	cfg.Flags = []specs.LinuxSeccompFlag{"SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_TSYNC"}
	if f, err := flags(cfg); err != nil || f != unix.SECCOMP_FILTER_FLAG_LOG {
		t.Errorf("LOG and TSYNC: flags %#x, %v; want LOG only", f, err)
	}
	cfg.Flags = []specs.LinuxSeccompFlag{"SECCOMP_FILTER_FLAG_BOGUS"}
	if _, err := Compile(cfg); err == nil || !strings.Contains(err.Error(), "SECCOMP_FILTER_FLAG_BOGUS") {
		t.Errorf("unknown flag: %v, want an error naming it", err)
	}
	cfg.Flags = nil
	cfg.Syscalls = slices.Clone(cfg.Syscalls)
	cfg.Syscalls[0] = &configs.Syscall{Name: "getpid", Action: configs.Notify}
	if _, err := Compile(cfg); !errors.Is(err, ErrUnsupportedProgram) {
		t.Errorf("a notify rule: %v, want ErrUnsupportedProgram", err)
	}
}

// dockerDefault is Docker's default profile in OCI form as `seccomp import`
// writes it: native names only, no architectures, "flags": [].
func dockerDefault(t *testing.T) []byte {
	t.Helper()
	docker, err := json.Marshal(mobyseccomp.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	// moby's LoadProfile panics on nil capabilities.
	rs := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{
		Bounding: []string{}, Effective: []string{}, Permitted: []string{}, Inheritable: []string{}, Ambient: []string{},
	}}}
	p, err := mobyseccomp.LoadProfile(string(docker), rs)
	if err != nil {
		t.Fatal(err)
	}
	p.Architectures, p.Flags = nil, []specs.LinuxSeccompFlag{}
	var rules []specs.LinuxSyscall
	for _, r := range p.Syscalls {
		var keep []string
		for _, n := range r.Names {
			if SyscallNative(n) {
				keep = append(keep, n)
			}
		}
		if len(keep) > 0 {
			r.Names = keep
			rules = append(rules, r)
		}
	}
	p.Syscalls = rules
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
