//go:build linux

package integration

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	mobyseccomp "github.com/moby/profiles/seccomp"
)

// refusedByEveryProfile: what the try-syscall probe calls first must be
// refused (EPERM) by every shipped profile; clone3 answers ENOSYS so libc
// falls back to clone.
func wantRefused(name string) string {
	if name == "clone3" {
		return "ENOSYS"
	}
	return "EPERM"
}

// profileExpectations: per shipped profile, what each x_ call of the probe
// must get: "EPERM" refused by the filter, "allowed" anything else (the call
// reached the kernel). A profile added to seccomp-profiles/ without a row
// here fails TestProfilesTrySyscalls.
var profileExpectations = map[string]map[string]string{
	"default": {
		"x_socket_unix": "allowed", "x_socket_inet": "allowed", "x_socket_netlink": "allowed", "x_bind": "allowed",
		"x_ioctl_tcgets": "allowed", "x_ioctl_tiocsti": "EPERM", "x_ioctl_tiocswinsz": "allowed",
		"x_personality_query": "allowed", "x_setresuid_noop": "allowed", "x_memfd_create": "allowed",
		"x_inotify_init1": "EPERM", "x_linkat": "allowed", "x_mknodat": "allowed", "x_io_setup": "EPERM",
		"x_shmget": "allowed", "x_getppid": "allowed", "x_mseal": "ENOSYS",
	},
	"strict": {
		"x_socket_unix": "allowed", "x_socket_inet": "EPERM", "x_socket_netlink": "EPERM", "x_bind": "EPERM",
		"x_ioctl_tcgets": "allowed", "x_ioctl_tiocsti": "EPERM", "x_ioctl_tiocswinsz": "EPERM",
		"x_personality_query": "EPERM", "x_setresuid_noop": "EPERM", "x_memfd_create": "EPERM",
		"x_inotify_init1": "EPERM", "x_linkat": "EPERM", "x_mknodat": "EPERM", "x_io_setup": "EPERM",
		"x_shmget": "EPERM", "x_getppid": "allowed", "x_mseal": "ENOSYS",
	},
}

// TestProfilesTrySyscalls runs the try-syscall probe (a static Go program)
// in the real sandbox under every profile in seccomp-profiles/, picked by
// x-seccomp-profile: the dangerous calls are refused by all of them, and
// each profile allows and refuses what its table says.
func TestProfilesTrySyscalls(t *testing.T) {
	e := newEnv(t)
	files, _ := filepath.Glob(filepath.Join(repoRoot, "seccomp-profiles", "*.json"))
	if len(files) < 2 {
		t.Fatalf("profiles: %v, want default and at least one stricter", files)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			want, ok := profileExpectations[name]
			if !ok {
				t.Fatalf("no try-syscall expectations for shipped profile %s: add a row to profileExpectations", name)
			}
			r := e.run(e.skill("try-"+name, "x-seccomp-profile: "+name+"\n", "probe:trysyscall"))
			r.mustOutcome(t, "success")
			if !strings.HasPrefix(r.env.Containment.Seccomp, name+" ") {
				t.Errorf("containment.seccomp %q does not name %s", r.env.Containment.Seccomp, name)
			}
			var got map[string]string
			if err := json.Unmarshal(r.env.Result, &got); err != nil {
				t.Fatal(err)
			}
			if got["control_getpid"] != "ok" {
				t.Errorf("getpid refused (%s): the probe is broken", got["control_getpid"])
			}
			refused := 0
			for _, call := range slices.Sorted(maps.Keys(got)) {
				res := got[call]
				switch {
				case call == "control_getpid":
				case strings.HasPrefix(call, "x_"):
					w, ok := want[call]
					switch {
					case !ok:
						t.Errorf("%s: no expectation for %s", name, call)
					case w == "allowed" && (res == "EPERM" || res == "ENOSYS"):
						t.Errorf("%s: %s → %s, want it allowed", name, call, res)
					case w != "allowed" && res != w:
						t.Errorf("%s: %s → %s, want %s", name, call, res, w)
					}
				default:
					refused++
					if res != wantRefused(call) {
						t.Errorf("%s: %s → %s, want %s", name, call, res, wantRefused(call))
					}
				}
			}
			if refused < 30 {
				t.Errorf("only %d dangerous syscalls tried: %v", refused, got)
			}
			for call := range want {
				if _, ok := got[call]; !ok {
					t.Errorf("the probe did not try %s", call)
				}
			}
		})
	}
}

// copyExample copies examples/NAME into the env's skills (building
// notes-go's binary), and sets x-seccomp-profile when profile is not empty.
func (e *env) copyExample(t *testing.T, name, as, profile string) string {
	t.Helper()
	dst := filepath.Join(e.base, "skills", as)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(filepath.Dir(dst), 0o755)
	if out, err := exec.Command("cp", "-r", filepath.Join(repoRoot, "examples", name), dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if name == "notes-go" && os.Getenv(prebuiltEnv) == "" {
		// (With prebuilt binaries, as in the VM, examples/notes-go/main was
		// built with them.)
		b := exec.Command("go", "build", "-o", filepath.Join(dst, "main"), "./examples/notes-go/skill.go")
		b.Dir = repoRoot
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			t.Fatalf("build notes-go: %v\n%s", err, out)
		}
	}
	md := filepath.Join(dst, "SKILL.md")
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(b), "name: "+name+"\n", "name: "+as+"\n", 1)
	if profile != "" {
		s = strings.Replace(s, "\n---\n", "\nx-seccomp-profile: "+profile+"\n---\n", 1)
	}
	if err := os.WriteFile(md, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

var exampleArgs = map[string]string{
	"hello-shell": `{"name":"seccomp"}`,
	"notes-shell": `{"title":"t","text":"hello"}`,
	"notes-go":    `{"text":"gopher notes"}`,
}

// sameResult compares two results of a skill run under two skill ids,
// ignoring pid (process numbering inside the sandbox is not part of the
// result's meaning) and the skill id the broker names in refusals.
func sameResult(t *testing.T, a json.RawMessage, idA string, b json.RawMessage, idB string) bool {
	t.Helper()
	a = []byte(strings.ReplaceAll(string(a), `"`+idA+`"`, `"SKILL"`))
	b = []byte(strings.ReplaceAll(string(b), `"`+idB+`"`, `"SKILL"`))
	var ma, mb map[string]any
	if err := json.Unmarshal(a, &ma); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &mb); err != nil {
		t.Fatal(err)
	}
	delete(ma, "pid")
	delete(mb, "pid")
	ja, _ := json.Marshal(ma)
	jb, _ := json.Marshal(mb)
	return string(ja) == string(jb)
}

// TestStrictProfileRunsExamples: the example skills (shell, and Go with the
// Bash tool) succeed under strict.json with the same results as under
// default.json.
func TestStrictProfileRunsExamples(t *testing.T) {
	e := newEnv(t)
	for _, ex := range []string{"hello-shell", "notes-shell", "notes-go"} {
		t.Run(ex, func(t *testing.T) {
			def := e.run(e.copyExample(t, ex, ex+"-default", ""), "--args", exampleArgs[ex])
			def.mustOutcome(t, "success")
			strict := e.run(e.copyExample(t, ex, ex+"-strict", "strict"), "--args", exampleArgs[ex])
			strict.mustOutcome(t, "success")
			if !strings.HasPrefix(strict.env.Containment.Seccomp, "strict ") {
				t.Errorf("containment.seccomp %q", strict.env.Containment.Seccomp)
			}
			if !sameResult(t, def.env.Result, ex+"-default", strict.env.Result, ex+"-strict") {
				t.Errorf("results differ:\ndefault %s\nstrict  %s", def.env.Result, strict.env.Result)
			}
		})
	}
}

// TestRecordEnforceRoundTrip: `seccomp record` runs an example skill under
// the notify filter and writes a profile; that profile lints clean, allows
// only a part of what default.json allows, and the same skill then runs
// under it, enforced, with the same result. notes-go covers processes exec'd
// into the sandbox by the Bash tool (their own filter, their own notify fd).
func TestRecordEnforceRoundTrip(t *testing.T) {
	e := newEnv(t)
	profiles := filepath.Join(e.base, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	def, err := os.ReadFile(filepath.Join(repoRoot, "seccomp-profiles", "default.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(profiles, "default.json"), def, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ex := range []string{"hello-shell", "notes-shell", "notes-go"} {
		t.Run(ex, func(t *testing.T) {
			recName := "rec-" + strings.TrimSuffix(ex, "-shell")
			out := filepath.Join(profiles, recName+".json")
			rec := cyberos("seccomp", "record", e.copyExample(t, ex, ex+"-rec", ""), "-o", out, "--args", exampleArgs[ex],
				"--state-dir", e.stateDir, "--run-dir", e.runDir, "--seccomp-profiles", profiles)
			msg, err := rec.CombinedOutput()
			if err != nil {
				t.Fatalf("seccomp record: %v\n%s", err, msg)
			}
			if !strings.Contains(string(msg), "outcome     success") || !strings.Contains(string(msg), "RECORDING") {
				t.Errorf("record output lacks the success envelope or the RECORDING note:\n%s", msg)
			}
			lint, err := cyberos("seccomp", "lint", "--strict", out).CombinedOutput()
			if err != nil {
				t.Fatalf("recorded profile does not lint clean: %v\n%s", err, lint)
			}
			diff, err := cyberos("seccomp", "diff", filepath.Join(profiles, "default.json"), out).CombinedOutput()
			if exitCode(err) != 1 {
				t.Fatalf("diff default recorded: exit %d, want 1 (different)\n%s", exitCode(err), diff)
			}
			removed := 0
			for _, line := range strings.Split(strings.TrimSpace(string(diff)), "\n") {
				switch line[0] {
				case '-':
					removed++
				case '+', '!':
					t.Errorf("recorded profile adds to default: %s", line)
				}
			}
			if removed < 100 {
				t.Errorf("only %d syscalls removed from default; want a much smaller profile", removed)
			}
			plain := e.run(e.copyExample(t, ex, ex+"-plain", ""), "--args", exampleArgs[ex])
			plain.mustOutcome(t, "success")
			enforced := e.run(e.copyExample(t, ex, ex+"-enforced", recName), "--args", exampleArgs[ex], "--seccomp-profiles", profiles)
			enforced.mustOutcome(t, "success")
			if !strings.HasPrefix(enforced.env.Containment.Seccomp, recName+" ") || strings.Contains(enforced.env.Containment.Seccomp, "RECORDING") {
				t.Errorf("containment.seccomp %q, want the recorded profile, enforced", enforced.env.Containment.Seccomp)
			}
			if !sameResult(t, plain.env.Result, ex+"-plain", enforced.env.Result, ex+"-enforced") {
				t.Errorf("results differ:\nunder default  %s\nunder recorded %s", plain.env.Result, enforced.env.Result)
			}
		})
	}
	// The recorded profile is minimal, not decorative: hello-shell's does
	// not let the try-syscall probe create even a Unix socket.
	// (The probe is a Go program: it may not even start under a shell's
	// profile, which proves the same.)
	r := e.run(e.skill("try-rec", "x-seccomp-profile: rec-hello\n", "probe:trysyscall"), "--seccomp-profiles", profiles)
	var got map[string]string
	if r.env.Outcome == "success" {
		_ = json.Unmarshal(r.env.Result, &got)
	}
	t.Logf("try-syscall probe under rec-hello: outcome %s, x_socket_unix %q", r.env.Outcome, got["x_socket_unix"])
	if r.env.Outcome == "success" && got["x_socket_unix"] != "EPERM" {
		t.Errorf("under hello-shell's recorded profile socket(AF_UNIX) → %s, want EPERM", got["x_socket_unix"])
	}
	if r.env.Outcome == "" {
		t.Errorf("probe run under rec-hello gave no envelope: exit %d\n%s", r.code, r.stderr)
	}
}

// TestDockerDefaultProfile: Docker's default profile, written by this test
// from the moby/profiles package's own DefaultProfile() (not a copy in the
// repository), is refused by lint with a pointer to import, imported,
// linted, and used to run a shell skill in the real sandbox.
func TestDockerDefaultProfile(t *testing.T) {
	e := newEnv(t)
	raw, err := json.Marshal(mobyseccomp.DefaultProfile())
	if err != nil {
		t.Fatal(err)
	}
	dockerFile := filepath.Join(e.base, "docker-default.json")
	if err := os.WriteFile(dockerFile, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := cyberos("seccomp", "lint", dockerFile).CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "cyberos seccomp import") {
		t.Errorf("lint of Docker's format: exit %d, want 1 with a pointer to import\n%s", exitCode(err), out)
	}
	profiles := filepath.Join(e.base, "profiles")
	if err := os.MkdirAll(profiles, 0o755); err != nil {
		t.Fatal(err)
	}
	imported := filepath.Join(profiles, "docker.json")
	out, err = cyberos("seccomp", "import", dockerFile, "-o", imported).CombinedOutput()
	if err != nil {
		t.Fatalf("import: %v\n%s", err, out)
	}
	out, err = cyberos("seccomp", "lint", "--json", imported).CombinedOutput()
	if err != nil {
		t.Fatalf("lint of the imported profile: %v\n%s", err, out)
	}
	var reps []struct {
		Error    string `json:"error"`
		Warnings []struct {
			Syscall string `json:"syscall"`
		} `json:"warnings"`
	}
	if err := json.Unmarshal(out, &reps); err != nil || len(reps) != 1 {
		t.Fatalf("lint --json: %v\n%s", err, out)
	}
	var warned []string
	for _, w := range reps[0].Warnings {
		warned = append(warned, w.Syscall)
	}
	// Docker is more permissive than our default (DESIGN.md): lint says so.
	for _, s := range []string{"ptrace", "process_vm_readv", "ioctl"} {
		if !slices.Contains(warned, s) {
			t.Errorf("no lint warning for Docker's %s; warnings for %v", s, warned)
		}
	}
	out, err = cyberos("seccomp", "explain", imported, "mount", "0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "mount(0x0) → ERRNO(EPERM)") {
		t.Errorf("explain mount under the imported profile: %v\n%s", err, out)
	}
	script := `#!/bin/sh
set -eu
args=$(cat)
n=$(ls /usr/bin | wc -l)
seccomp=$(sed -n 's/^Seccomp:[[:space:]]*//p' /proc/self/status)
sum=$(printf '%s' "$args" | sha256sum | cut -c1-16)
printf '{"args_sha":"%s","usr_bin_entries":%s,"seccomp":%s}\n' "$sum" "$n" "$seccomp"
`
	r := e.run(e.skill("under-docker", "x-seccomp-profile: docker\n", script), "--args", `{"x":1}`, "--seccomp-profiles", profiles)
	r.mustOutcome(t, "success")
	if !strings.HasPrefix(r.env.Containment.Seccomp, "docker ") {
		t.Errorf("containment.seccomp %q, want docker", r.env.Containment.Seccomp)
	}
	var res struct {
		Seccomp int `json:"seccomp"`
		Entries int `json:"usr_bin_entries"`
	}
	if err := json.Unmarshal(r.env.Result, &res); err != nil || res.Seccomp != 2 || res.Entries == 0 {
		t.Errorf("result %s (%v): want seccomp mode 2 and a listing", r.env.Result, err)
	}
}

// TestSeccompCommandsExitStatus: the documented exit statuses of lint,
// diff, explain and import (docs/operating.md, "Seccomp profiles"). No root needed.
func TestSeccompCommandsExitStatus(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	def := filepath.Join(repoRoot, "seccomp-profiles", "default.json")
	strict := filepath.Join(repoRoot, "seccomp-profiles", "strict.json")
	typo := write("typo.json", `{"defaultAction": "SCMP_ACT_ERRNO", "syscals": []}`)
	badName := write("badname.json", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["raed"], "action": "SCMP_ACT_ALLOW"}]}`)
	allow := write("allow.json", `{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO"}]}`)
	risky := write("risky.json", `{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read", "mount"], "action": "SCMP_ACT_ALLOW"}, {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}]}`)
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"lint", def, strict}, 0, []string{"default.json: ok", "strict.json: ok", "0 warnings"}},
		{[]string{"lint", typo}, 1, []string{"syscals", "unknown field", "ERROR"}},
		{[]string{"lint", badName}, 1, []string{`unknown syscall "raed"`, "syscalls[0].names[0]"}},
		{[]string{"lint", allow}, 1, []string{"SCMP_ACT_ALLOW", "deny by default"}},
		{[]string{"lint", risky}, 0, []string{"warning: mount allowed unconditionally", "1 warnings"}},
		{[]string{"lint", "--strict", risky}, 1, []string{"warning: mount allowed unconditionally"}},
		{[]string{"lint", def, typo}, 1, []string{"default.json: ok", "typo.json: ERROR"}},
		{[]string{"diff", def, def}, 0, []string{"same decisions"}},
		{[]string{"diff", def, strict}, 1, []string{"- bind: ALLOW", "~ socket:", "- personality:"}},
		{[]string{"diff", def, typo}, 2, []string{"syscals"}},
		{[]string{"explain", def, "clone3"}, 0, []string{"syscalls[2]: SCMP_ACT_ERRNO(ENOSYS), unconditionally"}},
		{[]string{"explain", strict, "socket", "2"}, 0, []string{"arg0 == 0x1", "socket(0x2) → ERRNO(EPERM)"}},
		{[]string{"explain", def, "nosuchcall"}, 2, []string{`unknown syscall "nosuchcall"`}},
		{[]string{"import", write("garbage.json", "not json")}, 1, []string{"invalid character"}},
	} {
		out, err := cyberos(append([]string{"seccomp"}, tc.args...)...).CombinedOutput()
		if code := exitCode(err); code != tc.code {
			t.Errorf("seccomp %v: exit %d, want %d\n%s", tc.args, code, tc.code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("seccomp %v: output lacks %q:\n%s", tc.args, w, out)
			}
		}
	}
}
