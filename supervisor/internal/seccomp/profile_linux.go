package seccomp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/opencontainers/runc/libcontainer/configs"
	runcseccomp "github.com/opencontainers/runc/libcontainer/seccomp"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"github.com/opencontainers/runtime-spec/specs-go"
	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"cyberos.dev/internal/fdread"
)

// Seccomp profiles are operator-edited files in the OCI LinuxSeccomp format,
// one per file, named <name>.json in the profiles directory. A profile is
// read once per start and checked strictly (a misspelt key or a rule that
// libcontainer would silently drop weakens a sandbox without anyone
// noticing), and converted with libcontainer's own specconv so that what we
// check is what libcontainer compiles; bytes checked before are not checked
// again (LoadProfileHashed).
//
// What libcontainer does with the result (runc v1.5.3, read from its source
// and proven by TestSeccompTrySyscalls and TestSeccompForeignArch, which
// run without root):
//   - An empty "architectures" list compiles the filter for the native
//     architecture only; every other architecture, and x32 system calls on
//     x86_64, hit libseccomp's bad-architecture action, SECCOMP_RET_KILL_THREAD.
//   - System calls numbered above the largest one the profile names return
//     ENOSYS (runc's patchbpf stub), so newer libc wrappers fall back.
//   - The filter is loaded without SECCOMP_FILTER_FLAG_TSYNC: it applies to
//     the calling thread and the threads and processes it creates. In the
//     container that is the thread that execs the skill; anyone else
//     installing a profile with seccomp.InitSeccomp must lock the OS thread
//     and exec from it.
//   - An absent "flags" key makes runc add SECCOMP_FILTER_FLAG_SPEC_ALLOW
//     (speculative store bypass mitigation off); write "flags": [] to keep it.
//
// The sandbox does not leave the loading to libcontainer's init, which
// would build the filter at every start: Compile builds the same program
// once per profile and cyberos-init loads it (TestProgramBehavesAsRuncLoadsIt
// compares the two on the kernel).

// maxProfileSize bounds what LoadProfile reads; real profiles are ~10 KiB.
const maxProfileSize = 1 << 20

// profileNameRE is what a profile name may be: a file name stem that cannot
// leave the profiles directory; compiled on first use (see policy.nameRE).
var profileNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`) })

// CompiledIn reports whether this binary was built with libcontainer's
// seccomp support (cgo and the "seccomp" build tag). Without it libcontainer
// accepts a seccomp config and then fails every container start.
func CompiledIn() bool { return runcseccomp.Enabled }

// LoadProfile reads <dir>/<name>.json, checks it and converts it into the
// libcontainer seccomp config.
//
// The file must be a regular file (not a symlink, not world-writable, at most
// 1 MiB) holding exactly one OCI LinuxSeccomp object with no unknown or
// duplicate keys. Refused: Docker-format profiles (convert them with
// `cyberos seccomp import`), default actions that allow (SCMP_ACT_ALLOW,
// SCMP_ACT_LOG, SCMP_ACT_TRACE, SCMP_ACT_NOTIFY), seccomp agents, syscall
// names libseccomp cannot resolve, and rules libcontainer would not apply
// as written (two conditions on one argument, which it ORs; a conditional
// rule for a syscall that also has an unconditional rule, which libseccomp
// drops). Every error wraps ErrProfile and names the file and the field.
func LoadProfile(dir, name string) (*configs.Seccomp, error) {
	cfg, _, err := LoadProfileHashed(dir, name)
	return cfg, err
}

// LoadProfileHashed is LoadProfile that also returns the hex SHA-256 of the
// profile file's bytes it read (Containment.SeccompProfileHash), so the
// audit names exactly the profile a sandbox was built from.
//
// The file is opened, checked and read on every call; only the decoding and
// checking of its bytes is skipped when the same path last held bytes with
// the same SHA-256 (profileCache), so an edit counts from the next call on.
func LoadProfileHashed(dir, name string) (*configs.Seccomp, string, error) {
	cfg, sum, err := LoadProfileShared(dir, name)
	if err != nil {
		return nil, "", err
	}
	return cloneSeccomp(cfg), sum, nil
}

// LoadProfileShared is LoadProfileHashed without the copy: the config it
// returns is the one cached for every later load of the same bytes, for a
// caller that only reads it (a sandbox's Check). It must not be changed.
func LoadProfileShared(dir, name string) (*configs.Seccomp, string, error) {
	if !profileNameRE().MatchString(name) {
		return nil, "", fmt.Errorf("%w: profile name %q: must match %s", ErrProfile, name, profileNameRE())
	}
	path := filepath.Join(dir, name+".json")
	data, err := readProfileFile(path)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(data)
	if cfg := profiles.get(path, sum); cfg != nil {
		return cfg, hex.EncodeToString(sum[:]), nil
	}
	_, cfg, err := CheckProfileBytes(path, data)
	if err != nil {
		profiles.forget(path)
		return nil, "", err
	}
	profiles.put(path, sum, cfg)
	return cfg, hex.EncodeToString(sum[:]), nil
}

// LoadProfileFile is LoadProfile for a file named by its path (the operator
// tools: lint, diff, explain). It returns the checked profile as written
// and the libcontainer config converted from it.
func LoadProfileFile(path string) (*specs.LinuxSeccomp, *configs.Seccomp, error) {
	data, err := readProfileFile(path)
	if err != nil {
		return nil, nil, err
	}
	return CheckProfileBytes(path, data)
}

// CheckProfileBytes decodes and checks one profile's bytes; path only
// names it in errors.
func CheckProfileBytes(path string, data []byte) (*specs.LinuxSeccomp, *configs.Seccomp, error) {
	spec, err := decodeProfile(path, data)
	if err != nil {
		return nil, nil, err
	}
	for _, check := range profileChecks {
		if err := check(path, spec); err != nil {
			return nil, nil, err
		}
	}
	cfg, err := specconv.SetupSeccomp(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %w", ErrProfile, path, err)
	}
	if cfg == nil {
		return nil, nil, profileErr(path, "defaultAction", "missing")
	}
	return spec, cfg, nil
}

func profileErr(path, field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s: %s", ErrProfile, path, field, fmt.Sprintf(format, args...))
}

// readProfileFile opens path without following a final symlink and without
// blocking on a FIFO, and reads it if it is a small regular file that only
// its owner (and group) can change.
func readProfileFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("%w: %s: is a symlink; profiles must be regular files: %w", ErrProfile, path, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProfile, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProfile, err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s: not a regular file (%s)", ErrProfile, path, fi.Mode().Type())
	case fi.Mode().Perm()&0o002 != 0:
		return nil, fmt.Errorf("%w: %s: world-writable (mode %04o); anyone could weaken the sandbox", ErrProfile, path, fi.Mode().Perm())
	case fi.Size() > maxProfileSize:
		return nil, fmt.Errorf("%w: %s: %d bytes, more than the %d allowed", ErrProfile, path, fi.Size(), maxProfileSize)
	}
	// One read of the size fstat gave (and read on, never past the limit,
	// if the file grew since), on the raw descriptor.
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrProfile, path, err)
	}
	var data []byte
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		data, rerr = fdread.All(int(fd), fi.Size(), maxProfileSize)
		return true
	}); err != nil {
		rerr = err
	}
	if errors.Is(rerr, fdread.ErrTooLarge) {
		return nil, fmt.Errorf("%w: %s: more than the %d bytes allowed", ErrProfile, path, maxProfileSize)
	}
	if rerr != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrProfile, path, rerr)
	}
	return data, nil
}

// decodeProfile checks the key structure (exact names, no duplicates, no
// Docker-format keys) and then decodes strictly into the OCI type.
func decodeProfile(path string, data []byte) (*specs.LinuxSeccomp, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := walkProfileJSON(dec, "", profileShape); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrProfile, path, err)
	}

	var spec specs.LinuxSeccomp
	dec = json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrProfile, path, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: trailing data after the profile object", ErrProfile, path)
	}
	return &spec, nil
}

// jsonShape is the key structure of a profile: an object's allowed keys, or
// an array's element shape. A nil shape is a scalar or an array of scalars.
type jsonShape struct {
	fields map[string]*jsonShape
	elem   *jsonShape
}

var profileShape = &jsonShape{fields: map[string]*jsonShape{
	"defaultAction":    nil,
	"defaultErrnoRet":  nil,
	"architectures":    nil,
	"flags":            nil,
	"listenerPath":     nil,
	"listenerMetadata": nil,
	"syscalls": {elem: &jsonShape{fields: map[string]*jsonShape{
		"names":    nil,
		"action":   nil,
		"errnoRet": nil,
		"args": {elem: &jsonShape{fields: map[string]*jsonShape{
			"index":    nil,
			"value":    nil,
			"valueTwo": nil,
			"op":       nil,
		}}},
	}}},
}}

// dockerKeys only occur in Docker's profile format. Decoded as OCI, Docker's
// capability-conditional rules lose their conditions and allow mount,
// unshare, bpf, ptrace… (DESIGN.md), so such a file is refused outright.
var dockerKeys = map[string]bool{"archMap": true, "includes": true, "excludes": true}

// walkProfileJSON reads one JSON value from dec and checks every object key
// against shape: encoding/json alone matches keys case-insensitively and lets
// a repeated key silently override the first.
func walkProfileJSON(dec *json.Decoder, at string, shape *jsonShape) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%s: %w", orTop(at), err)
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil // a scalar; its type is checked by the strict decode
	}
	switch delim {
	case '{':
		if shape != nil && shape.fields == nil {
			shape = nil // an object where an array belongs: the strict decode says so
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return fmt.Errorf("%s: %w", orTop(at), err)
			}
			key := tok.(string) // object keys are always strings
			field := joinField(at, key)
			if dockerKeys[key] {
				return fmt.Errorf("%s: Docker-format profile (key %q); convert it with `cyberos seccomp import`", field, key)
			}
			if seen[key] {
				return fmt.Errorf("%s: duplicate key", field)
			}
			seen[key] = true
			var child *jsonShape
			if shape != nil {
				var known bool
				child, known = shape.fields[key]
				if !known {
					return fmt.Errorf("%s: unknown field%s", field, suggestField(key, shape))
				}
			}
			if err := walkProfileJSON(dec, field, child); err != nil {
				return err
			}
		}
	case '[':
		var elem *jsonShape
		if shape != nil {
			elem = shape.elem
		}
		for i := 0; dec.More(); i++ {
			if err := walkProfileJSON(dec, fmt.Sprintf("%s[%d]", at, i), elem); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return fmt.Errorf("%s: %w", orTop(at), err)
	}
	return nil
}

func joinField(at, key string) string {
	if at == "" {
		return key
	}
	return at + "." + key
}

func orTop(at string) string {
	if at == "" {
		return "profile"
	}
	return at
}

func suggestField(key string, shape *jsonShape) string {
	for known := range shape.fields {
		if strings.EqualFold(known, key) {
			return fmt.Sprintf(" (did you mean %q?)", known)
		}
	}
	return ""
}

// profileChecks run in order on a decoded profile; each names the field it
// refuses.
var profileChecks = []func(path string, p *specs.LinuxSeccomp) error{
	checkDefaultAction,
	checkArchitectures,
	checkNoAgent,
	checkRules,
	checkRuleOverlap,
}

// allowingActions let a call through (or leave it to something we do not run).
var allowingActions = map[specs.LinuxSeccompAction]bool{
	specs.ActAllow:  true,
	specs.ActLog:    true,
	specs.ActTrace:  true,
	specs.ActNotify: true,
}

func checkDefaultAction(path string, p *specs.LinuxSeccomp) error {
	if p.DefaultAction == "" {
		return profileErr(path, "defaultAction", "missing")
	}
	if _, err := runcseccomp.ConvertStringToAction(string(p.DefaultAction)); err != nil {
		return profileErr(path, "defaultAction", "unknown action %q", p.DefaultAction)
	}
	if allowingActions[p.DefaultAction] {
		return profileErr(path, "defaultAction", "%s: profiles must deny by default (SCMP_ACT_ERRNO or a kill action)", p.DefaultAction)
	}
	return checkErrnoRet(path, "defaultErrnoRet", p.DefaultAction, p.DefaultErrnoRet)
}

func checkErrnoRet(path, field string, act specs.LinuxSeccompAction, ret *uint) error {
	switch {
	case ret == nil:
		return nil
	case act != specs.ActErrno && act != specs.ActTrace:
		return profileErr(path, field, "only meaningful with SCMP_ACT_ERRNO, not %s", act)
	case *ret > 4095:
		return profileErr(path, field, "%d is not an errno (1..4095)", *ret)
	}
	return nil
}

func checkArchitectures(path string, p *specs.LinuxSeccomp) error {
	for i, a := range p.Architectures {
		if _, err := runcseccomp.ConvertStringToArch(string(a)); err != nil {
			return profileErr(path, fmt.Sprintf("architectures[%d]", i), "unknown architecture %q", a)
		}
	}
	return nil
}

func checkNoAgent(path string, p *specs.LinuxSeccomp) error {
	if p.ListenerPath != "" || p.ListenerMetadata != "" {
		return profileErr(path, "listenerPath", "seccomp agents are not supported")
	}
	return nil
}

func checkRules(path string, p *specs.LinuxSeccomp) error {
	for i, r := range p.Syscalls {
		at := fmt.Sprintf("syscalls[%d]", i)
		if len(r.Names) == 0 {
			return profileErr(path, at+".names", "empty")
		}
		for j, n := range r.Names {
			if !SyscallKnown(n) {
				return profileErr(path, fmt.Sprintf("%s.names[%d]", at, j), "unknown syscall %q", n)
			}
		}
		if _, err := runcseccomp.ConvertStringToAction(string(r.Action)); err != nil {
			return profileErr(path, at+".action", "unknown action %q", r.Action)
		}
		if r.Action == specs.ActNotify {
			return profileErr(path, at+".action", "SCMP_ACT_NOTIFY needs a seccomp agent, which is not supported")
		}
		if err := checkErrnoRet(path, at+".errnoRet", r.Action, r.ErrnoRet); err != nil {
			return err
		}
		var argSeen [6]bool
		for k, a := range r.Args {
			field := fmt.Sprintf("%s.args[%d]", at, k)
			if a.Index >= uint(len(argSeen)) {
				return profileErr(path, field+".index", "%d: syscalls have arguments 0..5", a.Index)
			}
			if _, err := runcseccomp.ConvertStringToOperator(string(a.Op)); err != nil {
				return profileErr(path, field+".op", "unknown operator %q", a.Op)
			}
			// libcontainer turns several conditions on one argument into
			// separate rules, OR instead of AND: an allow rule "arg1 != A,
			// arg1 != B" would allow everything.
			if argSeen[a.Index] {
				return profileErr(path, field+".index", "a second condition on argument %d; libcontainer ORs them instead of ANDing (split the rule, or use SCMP_CMP_MASKED_EQ)", a.Index)
			}
			argSeen[a.Index] = true
		}
	}
	return nil
}

// checkRuleOverlap refuses a syscall listed unconditionally with two
// different actions, and a conditional rule for a syscall that also has an
// unconditional rule with another action: libseccomp keeps the
// unconditional rule and drops the conditional one (seen with ioctl: "allow"
// plus "deny TIOCSTI" allowed TIOCSTI). An unconditional rule that repeats
// the default action is skipped by libcontainer, so it shadows nothing.
func checkRuleOverlap(path string, p *specs.LinuxSeccomp) error {
	type verdict struct {
		act specs.LinuxSeccompAction
		ret uint
	}
	type rule struct {
		at string
		verdict
	}
	def := verdict{p.DefaultAction, errnoOf(p.DefaultAction, p.DefaultErrnoRet)}
	uncond := map[string]rule{}
	for i, r := range p.Syscalls {
		if len(r.Args) > 0 {
			continue
		}
		for _, n := range r.Names {
			cur := rule{fmt.Sprintf("syscalls[%d]", i), verdict{r.Action, errnoOf(r.Action, r.ErrnoRet)}}
			if prev, ok := uncond[n]; ok && prev.verdict != cur.verdict {
				return profileErr(path, cur.at, "syscall %q is also listed in %s with another action", n, prev.at)
			}
			uncond[n] = cur
		}
	}
	for i, r := range p.Syscalls {
		if len(r.Args) == 0 {
			continue
		}
		v := verdict{r.Action, errnoOf(r.Action, r.ErrnoRet)}
		for _, n := range r.Names {
			if prev, ok := uncond[n]; ok && prev.verdict != v && prev.verdict != def {
				return profileErr(path, fmt.Sprintf("syscalls[%d]", i), "conditional rule for %q is ignored because %s has an unconditional %s rule for it", n, prev.at, prev.act)
			}
		}
	}
	return nil
}

// errnoOf is the errno an action returns; SCMP_ACT_ERRNO without errnoRet
// is EPERM in libcontainer.
func errnoOf(act specs.LinuxSeccompAction, ret *uint) uint {
	switch {
	case ret != nil:
		return *ret
	case act == specs.ActErrno:
		return uint(unix.EPERM)
	}
	return 0
}

// SyscallKnown reports whether libseccomp can resolve name for the native
// architecture. Its table is shared by all architectures: a call the native
// one lacks (arch_prctl on arm64) resolves to a negative pseudo-number that
// no real call matches, so one profile serves x86_64 and arm64 hosts.
// A name it cannot resolve is a typo, or newer than this libseccomp.
func SyscallKnown(name string) bool {
	_, err := libseccomp.GetSyscallFromName(name)
	return err == nil
}

// SyscallNative reports whether name is a syscall of this machine's
// architecture. libseccomp knows every architecture's names (a profile
// may list _llseek or fadvise64_64, which are i386's); on another one it
// resolves them to a negative pseudo number, and a rule for one decides
// nothing here.
func SyscallNative(name string) bool {
	nr, err := libseccomp.GetSyscallFromNameByArch(name, libseccomp.ArchNative)
	return err == nil && nr >= 0
}

// NativeArchName is this machine's architecture as libseccomp names it
// (e.g. amd64).
func NativeArchName() string {
	a, err := libseccomp.GetNativeArch()
	if err != nil {
		return "this architecture"
	}
	return a.String()
}
