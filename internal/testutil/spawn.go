package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var spawnBuild struct {
	once sync.Once
	path string
	err  error
}

// SpawnBinary is cyberos-spawn, the sandbox creation helper, built as
// `make build` builds it (cgo, seccomp, static) once per test binary, so a
// test's runner starts its sandboxes as the daemon does. RemoveSpawnBinary
// removes it; its directory is never an ancestor of a test's run dir
// (libcontainer cannot seal a binary with an overlay then).
func SpawnBinary(tb testing.TB) string {
	tb.Helper()
	b := &spawnBuild
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "cyberos-spawn-")
		if err != nil {
			b.err = err
			return
		}
		path := filepath.Join(dir, "cyberos-spawn")
		cmd := exec.Command("go", "build", "-tags", "seccomp netgo osusergo", "-ldflags", `-extldflags "-static"`, "-o", path, "cyberos.dev/cmd/cyberos-spawn")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			b.err = fmt.Errorf("build cyberos-spawn: %v\n%s", err, out)
			return
		}
		b.path = path
	})
	if b.err != nil {
		tb.Fatal(b.err)
	}
	return b.path
}

// RemoveSpawnBinary removes what SpawnBinary built; TestMain calls it.
func RemoveSpawnBinary() {
	if spawnBuild.path != "" {
		os.RemoveAll(filepath.Dir(spawnBuild.path))
	}
}
