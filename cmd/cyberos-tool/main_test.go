package main

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"cyberos.dev/skillclient"
)

func runTool(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, strings.NewReader(`{"path":"/nope"}`), &o, &e)
	return code, o.String(), e.String()
}

func TestNoBroker(t *testing.T) {
	t.Setenv(skillclient.EnvSocket, filepath.Join(t.TempDir(), "none.sock"))
	if code, _, errOut := runTool("list"); code != 1 || errOut == "" {
		t.Fatalf("%d %q", code, errOut)
	}
}

// The binary is static (it is bind-mounted into sandboxes with no libc).
func TestStaticBuild(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no go toolchain on PATH in CI: the static-build check cannot run")
		}
		t.Skip("no go toolchain on PATH")
	}
	out := filepath.Join(t.TempDir(), "cyberos-tool")
	cmd := exec.Command(gobin, "build", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Fatal("cyberos-tool is dynamically linked")
		}
	}
}
