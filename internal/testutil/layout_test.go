package testutil

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// packages returns every Go package directory of the module (testdata excluded).
func packages(t *testing.T) map[string][]string {
	t.Helper()
	root := filepath.Join("..", "..")
	pkgs := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && p != root) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			pkgs[rel] = append(pkgs[rel], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return pkgs
}

// TestEveryPackageHasADoc: one package doc comment per package (tailscale's
// pkgdoc_test), so a newcomer learns what each package is for.
func TestEveryPackageHasADoc(t *testing.T) {
	for dir, files := range packages(t) {
		docs := 0
		for _, f := range files {
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			if af.Doc != nil && strings.TrimSpace(af.Doc.Text()) != "" {
				docs++
			}
		}
		if docs != 1 {
			t.Errorf("package %s has %d package doc comments, want exactly 1", dir, docs)
		}
	}
}

// TestOnlySandboxImportsLibcontainer: the kernel-facing library stays behind
// the sandbox boundary (the runner, its creation helper, and the seccomp
// compiler it loads profiles with); policy, the broker and the seccomp
// operator tools (profiletool) never import it.
func TestOnlySandboxImportsLibcontainer(t *testing.T) {
	allowed := map[string]bool{filepath.Join("supervisor", "sandbox"): true, filepath.Join("supervisor", "spawn"): true, filepath.Join("supervisor", "internal", "seccomp"): true}
	for dir, files := range packages(t) {
		for _, f := range files {
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(path, "github.com/opencontainers/runc") && !allowed[dir] {
					t.Errorf("%s imports %s; only supervisor/sandbox, supervisor/spawn and supervisor/internal/seccomp may", f, path)
				}
			}
		}
	}
}

// imports returns the module paths the non-test files of dir import.
func imports(t *testing.T, files []string) map[string][]string {
	t.Helper()
	by := map[string][]string{}
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			by[path] = append(by[path], f)
		}
	}
	return by
}

// TestSeccompProfilesOwnPackage: loading, checking and compiling seccomp
// profiles live in supervisor/internal/seccomp, the operator tools (lint,
// explain, diff, import, record) in its subpackage profiletool. The sandbox
// and its creation helper import only the compiler; only the CLI imports the
// tools; neither seccomp package imports the sandbox, and the compiler does
// not import the tools. supervisor/sandbox keeps no seccomp_*.go file.
func TestSeccompProfilesOwnPackage(t *testing.T) {
	const (
		compiler = "cyberos.dev/supervisor/internal/seccomp"
		tools    = compiler + "/profiletool"
	)
	compilerDir := filepath.Join("supervisor", "internal", "seccomp")
	toolsDir := filepath.Join(compilerDir, "profiletool")
	pkgs := packages(t)
	for dir, name := range map[string]string{compilerDir: "seccomp", toolsDir: "profiletool"} {
		files := pkgs[dir]
		if len(files) == 0 {
			t.Fatalf("no package %s", dir)
		}
		if doc, _ := packageDoc(t, files); !strings.HasPrefix(doc, "Package "+name+" ") {
			t.Errorf("%s package doc %q, want one starting \"Package %s \"", dir, doc, name)
		}
		if fs := imports(t, files)["cyberos.dev/supervisor/sandbox"]; len(fs) > 0 {
			t.Errorf("%v import the sandbox; the sandbox imports the profiles, not the reverse", fs)
		}
	}
	if fs := imports(t, pkgs[compilerDir])[tools]; len(fs) > 0 {
		t.Errorf("%v import %s; the compiler does not link the operator tools", fs, tools)
	}
	for _, dir := range []string{filepath.Join("supervisor", "sandbox"), filepath.Join("supervisor", "spawn")} {
		by := imports(t, pkgs[dir])
		if fs := by[tools]; len(fs) > 0 {
			t.Errorf("%v import %s; the sandbox imports only the compiler", fs, tools)
		}
	}
	if len(imports(t, pkgs[filepath.Join("supervisor", "sandbox")])[compiler]) == 0 {
		t.Errorf("supervisor/sandbox does not import %s: the rule above checks nothing", compiler)
	}
	for dir, files := range pkgs {
		if fs := imports(t, files)[tools]; len(fs) > 0 && dir != filepath.Join("supervisor", "cli") {
			t.Errorf("%v import %s; only supervisor/cli (`cyberos seccomp`) may", fs, tools)
		}
	}
	entries, err := os.ReadDir(filepath.Join("..", "..", "supervisor", "sandbox"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "seccomp_") {
			t.Errorf("supervisor/sandbox/%s: seccomp profile code belongs in %s", e.Name(), compilerDir)
		}
	}
}

// TestWireImportsOnlyStdlib: package wire is the contract skills link through
// skillclient and the static cyberos-tool, so it stays standard library only
// (tests included): nothing of this module, nothing third-party.
func TestWireImportsOnlyStdlib(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "wire", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Go files in wire/")
	}
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			// A standard library path has no dot in its first element.
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") {
				t.Errorf("%s imports %s; package wire may import only the standard library", f, path)
			}
		}
	}
}

// TestRowModelLinksNoStore: packages that only need the audit row model
// (outcomes, kinds, rows, drafts, hashes) link neither the audit store
// (journal, SQLite index: audit/auditstore) nor, for telemetry and policy,
// any SQLite driver. The broker and the tools link SQLite only through
// memory, the skills' memory store. Imports are read from every non-test
// file of the module, whatever its build tags.
func TestRowModelLinksNoStore(t *testing.T) {
	const module = "cyberos.dev/"
	imports := map[string][]string{} // import path → its imports
	for dir, files := range packages(t) {
		pkg := module + filepath.ToSlash(dir)
		for _, f := range files {
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				imports[pkg] = append(imports[pkg], path)
			}
		}
	}
	// via returns, for each package pkg links, the import chain to it.
	via := func(pkg string) map[string]string {
		seen := map[string]string{pkg: pkg}
		queue := []string{pkg}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, imp := range imports[p] {
				if _, ok := seen[imp]; !ok {
					seen[imp] = seen[p] + " → " + imp
					queue = append(queue, imp)
				}
			}
		}
		return seen
	}
	if _, ok := imports[module+"audit/auditstore"]; !ok {
		t.Fatal("no package audit/auditstore: the store moved, update this test")
	}
	for _, c := range []struct {
		pkg    string
		sqlite bool // may link a SQLite driver (through memory)
	}{
		{"telemetry", false},
		{"policy", false},
		{"supervisor/internal/broker", true},
		{"supervisor/internal/tools", true},
	} {
		deps := via(module + c.pkg)
		if chain, ok := deps[module+"audit/auditstore"]; ok {
			t.Errorf("%s links the audit store: %s", c.pkg, chain)
		}
		for dep, chain := range deps {
			if strings.HasPrefix(dep, "modernc.org/sqlite") || strings.HasPrefix(dep, "github.com/mattn/go-sqlite3") {
				if !c.sqlite {
					t.Errorf("%s links a SQLite driver: %s", c.pkg, chain)
				} else if !strings.Contains(chain, module+"memory") {
					t.Errorf("%s links a SQLite driver other than through memory: %s", c.pkg, chain)
				}
			}
		}
	}
}
