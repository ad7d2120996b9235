//go:build linux

package integration

// Issue 41.6: `make demo` installed PostgreSQL and built golangci-lint,
// though the demo needs neither. `install-deps.sh build` (make build,
// make demo) asks for the build's packages only; the default (make test,
// .ci/run) for all of them.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestInstallDepsBuildSet(t *testing.T) {
	// Stubs: dpkg-query says nothing is installed, apt-get records what it
	// is asked to install, id says root.
	stubs := t.TempDir()
	record := filepath.Join(stubs, "apt-get.log")
	for name, body := range map[string]string{
		"dpkg-query": "#!/bin/sh\nexit 1\n",
		"apt-get":    "#!/bin/sh\necho \"$*\" >>" + record + "\n",
		"id":         "#!/bin/sh\necho 0\n",
	} {
		must(t, os.WriteFile(filepath.Join(stubs, name), []byte(body), 0o755))
	}
	asked := func(args ...string) string {
		t.Helper()
		_ = os.Remove(record)
		cmd := exec.Command("bash", append([]string{filepath.Join(repoRoot, "scripts", "install-deps.sh")}, args...)...)
		cmd.Env = append(os.Environ(), "PATH="+stubs+":/usr/local/go/bin:/usr/bin:/bin")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("install-deps.sh %v: %v\n%s", args, err, out)
		}
		b, _ := os.ReadFile(record)
		return string(b)
	}
	build := asked("build")
	if !strings.Contains(build, "install -y -qq libseccomp-dev pkg-config gcc libc6-dev musl-tools python3 curl\n") || strings.Contains(build, "postgresql") {
		t.Errorf("install-deps.sh build asked apt-get for:\n%s", build)
	}
	if all := asked(); !strings.Contains(all, "install -y -qq libseccomp-dev pkg-config gcc libc6-dev musl-tools python3 curl postgresql\n") {
		t.Errorf("install-deps.sh asked apt-get for:\n%s", all)
	}
}
