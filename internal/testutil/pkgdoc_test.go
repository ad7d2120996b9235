package testutil

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// A package doc names the files and identifiers a reader should open next;
// these are the forms it names them in.
var (
	// goFileRef is a Go file: ship.go, sandbox_linux.go, or a path from the
	// module root such as cmd/cyberos/main.go.
	goFileRef = regexp.MustCompile(`(?:^|[^\w./-])((?:[\w-]+/)*[A-Za-z0-9_]+\.go)\b`)
	// qualifiedRef is pkg.Name, Type.Name or pkg.Type.Name, the last part
	// exported: skillclient.EnvSocket, policy.Enforcer, Reader.VerifyWith.
	qualifiedRef = regexp.MustCompile(`(?:^|[^\w./-])([A-Za-z_]\w*)\.([A-Z]\w*)(?:\.([A-Z]\w*))?\b`)
)

// pkgDecls is what a package declares: its top-level names, and each type's
// methods and struct fields.
type pkgDecls struct {
	top     map[string]bool
	members map[string]map[string]bool // type name -> method and field names
}

func (d pkgDecls) has(typ, name string) bool {
	if typ == "" {
		return d.top[name]
	}
	return d.members[typ][name]
}

// declsOf parses every non-test Go file of dir, whatever its build
// constraints, so a name declared for one GOOS only still counts.
func declsOf(t *testing.T, files []string) pkgDecls {
	t.Helper()
	d := pkgDecls{top: map[string]bool{}, members: map[string]map[string]bool{}}
	member := func(typ, name string) {
		if d.members[typ] == nil {
			d.members[typ] = map[string]bool{}
		}
		d.members[typ][name] = true
	}
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range af.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil || len(decl.Recv.List) == 0 {
					d.top[decl.Name.Name] = true
					continue
				}
				if recv := receiverType(decl.Recv.List[0].Type); recv != "" {
					member(recv, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.TypeSpec:
						d.top[spec.Name.Name] = true
						if st, ok := spec.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									member(spec.Name.Name, n.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							d.top[n.Name] = true
						}
					}
				}
			}
		}
	}
	return d
}

// receiverType is the type name of a method receiver: T, *T, T[P], *T[P].
func receiverType(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// packageDoc returns the text of dir's package doc comment and the package's
// name.
func packageDoc(t *testing.T, files []string) (doc, name string) {
	t.Helper()
	for _, f := range files {
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		name = af.Name.Name
		if af.Doc != nil {
			doc += af.Doc.Text()
		}
	}
	return doc, name
}

// docProblems lists what doc names that does not exist: a Go file that is
// neither in dir nor at that path from the module root, or a qualified name
// whose package (one of this module's, by its name) or type (one of this
// package's, or of the named package) does not declare it. Names qualified
// by anything else (the standard library, a dependency) are not checked.
func docProblems(root, dir, doc string, self pkgDecls, byName map[string][]pkgDecls) []string {
	var problems []string
	for _, m := range goFileRef.FindAllStringSubmatch(doc, -1) {
		ref := m[1]
		candidates := []string{filepath.Join(root, dir, ref)}
		if strings.Contains(ref, "/") {
			candidates = append(candidates, filepath.Join(root, ref))
		}
		found := false
		for _, c := range candidates {
			if _, err := os.Stat(c); err == nil {
				found = true
				break
			}
		}
		if !found {
			problems = append(problems, "names file "+ref+", which does not exist")
		}
	}
	for _, m := range qualifiedRef.FindAllStringSubmatch(doc, -1) {
		left, name, third := m[1], m[2], m[3]
		ref := strings.TrimSuffix(left+"."+name+"."+third, ".")
		switch {
		case self.top[left]:
			// Type.Member of this package.
			if !self.has(left, name) {
				problems = append(problems, "names "+ref+": type "+left+" has no "+name)
			}
		case byName[left] != nil:
			// pkg.Name, or pkg.Type.Member, of one of this module's packages
			// called left (several may share a name: any of them will do).
			ok := false
			for _, p := range byName[left] {
				if p.has("", name) && (third == "" || p.has(name, third)) {
					ok = true
					break
				}
			}
			if !ok {
				problems = append(problems, "names "+ref+", which package "+left+" does not declare")
			}
		}
	}
	return problems
}

// TestPackageDocsNameWhatExists: a package doc that names a file or an
// identifier (ship.go, skillclient.EnvSocket, Reader.VerifyWith) names one
// that exists, so a doc cannot outlive the code it points at.
func TestPackageDocsNameWhatExists(t *testing.T) {
	root := filepath.Join("..", "..")
	pkgs := packages(t)
	decls := map[string]pkgDecls{}
	byName := map[string][]pkgDecls{}
	docs := map[string]string{}
	for dir, files := range pkgs {
		doc, name := packageDoc(t, files)
		d := declsOf(t, files)
		decls[dir], docs[dir] = d, doc
		if name != "main" {
			byName[name] = append(byName[name], d)
		}
	}
	dirs := make([]string, 0, len(pkgs))
	for dir := range pkgs {
		dirs = append(dirs, dir)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		for _, p := range docProblems(root, dir, docs[dir], decls[dir], byName) {
			t.Errorf("package %s's doc %s", dir, p)
		}
	}
}

// TestPackageDocCheckCatchesStaleNames: the check above fails on a doc that
// names a missing file, a missing function of another package, and a missing
// method of its own type, and passes the same doc with the names fixed.
func TestPackageDocCheckCatchesStaleNames(t *testing.T) {
	root := filepath.Join("..", "..")
	self := pkgDecls{
		top:     map[string]bool{"Reader": true},
		members: map[string]map[string]bool{"Reader": {"Verify": true}},
	}
	other := pkgDecls{top: map[string]bool{"EnvSocket": true}, members: map[string]map[string]bool{}}
	byName := map[string][]pkgDecls{"skillclient": {other}}
	const dir = "internal/testutil"

	stale := "Package x: see gone.go and cmd/cyberos/nothere.go, skillclient.EnvSockt and Reader.VerifyWith."
	got := docProblems(root, dir, stale, self, byName)
	want := []string{
		"names file gone.go, which does not exist",
		"names file cmd/cyberos/nothere.go, which does not exist",
		"names skillclient.EnvSockt, which package skillclient does not declare",
		"names Reader.VerifyWith: type Reader has no VerifyWith",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stale doc: problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	fixed := "Package x: see pkgdoc_test.go and cmd/cyberos/main.go, skillclient.EnvSocket and Reader.Verify; " +
		"os.Getenv and e.g. cyberos.dev/wire are not ours to check."
	if got := docProblems(root, dir, fixed, self, byName); len(got) != 0 {
		t.Errorf("fixed doc: problems %q, want none", got)
	}
}

// TestNoTestOnlyPackageWithoutADoc: TestEveryPackageHasADoc reads non-test
// files, so a directory of tests alone (packaging/kubernetes) would escape
// it; such a directory carries its package doc in a doc.go.
func TestNoTestOnlyPackageWithoutADoc(t *testing.T) {
	root := filepath.Join("..", "..")
	pkgs := packages(t)
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && p != root) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, "_test.go") {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			if pkgs[rel] == nil {
				t.Errorf("%s holds only tests: give its package a doc.go with the package doc", rel)
				return filepath.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
