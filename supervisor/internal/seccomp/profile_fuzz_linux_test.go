package seccomp

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// FuzzLoadProfile feeds arbitrary bytes to LoadProfile as a profile file:
// it never panics, every error wraps ErrProfile, and a profile it accepts
// never allows by default and names every syscall.
func FuzzLoadProfile(f *testing.F) {
	shipped, _ := filepath.Glob(filepath.Join("..", "..", "..", "seccomp-profiles", "*.json"))
	for _, p := range shipped {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write"],"action":"SCMP_ACT_ALLOW"}]}`,
		`{"defaultAction":"SCMP_ACT_ALLOW"}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"architectures":["SCMP_ARCH_X86_64"],"flags":[],"syscalls":[{"names":["ioctl"],"action":"SCMP_ACT_ERRNO","args":[{"index":1,"value":21522,"op":"SCMP_CMP_EQ"}]}]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","archMap":[],"syscalls":[]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["nosuchcall"],"action":"SCMP_ACT_ALLOW"}]}`,
		`{"defaultAction":"SCMP_ACT_ERRNO","defaultAction":"SCMP_ACT_ALLOW"}`,
		`{"DefaultAction":"SCMP_ACT_ALLOW"}`,
		`[]`, `null`, ``, `{"defaultAction":"SCMP_ACT_KILL"} {}`,
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(filepath.Join(dir, "fuzz.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		sc, err := LoadProfile(dir, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrProfile) {
				t.Fatalf("error %v does not wrap ErrProfile", err)
			}
			return
		}
		switch sc.DefaultAction {
		case configs.Allow, configs.Log, configs.Trace, configs.Notify:
			t.Fatalf("accepted default action %v", sc.DefaultAction)
		}
		for _, s := range sc.Syscalls {
			if s == nil || s.Name == "" {
				t.Fatalf("accepted a rule without a syscall name: %+v", s)
			}
		}
	})
}
