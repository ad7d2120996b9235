package tools

import (
	"context"
	"encoding/json"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"cyberos.dev/policy"
)

// FuzzFileToolPaths drives Read, Write, Edit, Glob and Grep with arbitrary
// paths (and contents) against a real directory tree: an allowed folder
// holding a symlink to a host secret, a symlinked directory, a hard link to
// the secret and a reserved directory. Whatever the path, no tool returns
// the secret or the reserved file's content, changes them, or creates
// anything outside the allowed folder; every write that succeeds lands
// inside it. "{a}", "{o}" and "{r}" in the fuzzed path stand for the
// allowed, outside and root directories, so the fuzzer can combine real
// prefixes with its own dot-dots, slashes and links.
func FuzzFileToolPaths(f *testing.F) {
	if runtime.GOOS != "linux" {
		f.Skip("the host file tools need openat2 (Linux)")
	}
	root := f.TempDir()
	allowed, outside := filepath.Join(root, "allowed"), filepath.Join(root, "outside")
	reserved := filepath.Join(allowed, "reserved")
	for _, d := range []string{allowed, outside, reserved, filepath.Join(allowed, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			f.Fatal(err)
		}
	}
	const secret, state = "HOST-SECRET\n", "SUPERVISOR-STATE\n"
	secretPath, statePath := filepath.Join(outside, "secret"), filepath.Join(reserved, "audit.db")
	for p, c := range map[string]string{secretPath: secret, statePath: state, filepath.Join(allowed, "notes.txt"): "hello\n",
		filepath.Join(allowed, "sub", "x.txt"): "x\n"} {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	for link, target := range map[string]string{"sym": secretPath, "symdir": outside, "etc": "/etc", "rel": "../outside/secret"} {
		if err := os.Symlink(target, filepath.Join(allowed, link)); err != nil {
			f.Fatal(err)
		}
	}
	if err := os.Link(secretPath, filepath.Join(allowed, "hard")); err != nil {
		f.Fatal(err)
	}
	p, err := policy.Parse([]byte("---\nname: fuzz\ndescription: fuzz\nallowed_tools: [Read, Write, Edit, Glob, Grep]\nx-allowed-files: [\"" + allowed + "/**\"]\n---\n"))
	if err != nil {
		f.Fatal(err)
	}
	env := &Env{SkillID: "fuzz", InvocationID: "inv", TenantID: "t", Policy: p,
		Enforcer: policy.NewEnforcer(p, policy.EnforcerOptions{ReservedDirs: []string{reserved}})}
	outsideNames := func() []string {
		var names []string
		for _, d := range []string{root, outside, reserved} {
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				names = append(names, d+"/"+e.Name())
			}
		}
		return names
	}
	before := outsideNames()

	for _, s := range []string{"{a}/notes.txt", "{a}/sym", "{a}/hard", "{a}/symdir/secret", "{a}/../outside/secret",
		"{a}/./sub/../notes.txt", "{a}//sub///x.txt", "{a}/etc/passwd", "{a}/rel", "{a}/reserved/audit.db",
		"{a}/sub/../reserved/audit.db", "{a}/**", "{a}/*/*", "{o}/secret", "{r}/allowed/../outside/secret",
		"/proc/self/root{a}/notes.txt", "{a}/new.txt", "{a}/sub/", "{a}", "relative", ""} {
		for tool := range byte(5) {
			f.Add(tool, s, "hello")
		}
	}
	tools := []Tool{NewRead(), NewWrite(), NewEdit(), NewGlob(), NewGrep()}
	f.Fuzz(func(t *testing.T, which byte, rawPath, content string) {
		pth := strings.NewReplacer("{a}", allowed, "{o}", outside, "{r}", root).Replace(rawPath)
		tool := tools[int(which)%len(tools)]
		var args map[string]any
		switch tool.Name() {
		case policy.ToolRead:
			args = map[string]any{"path": pth}
		case policy.ToolWrite:
			args = map[string]any{"path": pth, "content": content}
		case policy.ToolEdit:
			args = map[string]any{"path": pth, "old_string": content, "new_string": "X"}
		case policy.ToolGlob:
			args = map[string]any{"pattern": pth}
		case policy.ToolGrep:
			args = map[string]any{"pattern": "SECRET|STATE|" + regexpQuote(content), "path": pth}
		}
		raw, _ := json.Marshal(args)
		res, err := tool.Call(context.Background(), &Call{Env: env, Args: raw})
		out, _ := json.Marshal(res)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		for _, leak := range []string{"HOST-SECRET", "SUPERVISOR-STATE"} {
			if strings.Contains(string(out), leak) || strings.Contains(msg, leak) {
				t.Fatalf("%s %s leaked %q: %s %s", tool.Name(), raw, leak, out, msg)
			}
		}
		if b, _ := os.ReadFile(secretPath); string(b) != secret {
			t.Fatalf("%s %s changed the host secret to %q", tool.Name(), raw, b)
		}
		if b, _ := os.ReadFile(statePath); string(b) != state {
			t.Fatalf("%s %s changed the reserved file to %q", tool.Name(), raw, b)
		}
		if now := outsideNames(); !slices.Equal(now, before) {
			t.Fatalf("%s %s changed what is outside the allowed folder: %v", tool.Name(), raw, now)
		}
		if err == nil && tool.Name() == policy.ToolWrite {
			c := path.Clean(pth)
			if !strings.HasPrefix(c, allowed+"/") || strings.HasPrefix(c, reserved+"/") || c == reserved {
				t.Fatalf("Write %s succeeded outside the allowed folder", raw)
			}
		}
	})
}

// regexpQuote escapes s for use inside a Grep pattern.
func regexpQuote(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
