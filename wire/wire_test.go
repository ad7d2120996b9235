package wire

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// stringConsts returns the string constants declared in the non-test Go
// files under dir (recursively when walk), by name, keeping those keep accepts.
func stringConsts(t *testing.T, dir string, keep func(spec *ast.ValueSpec, name string) bool) map[string]string {
	t.Helper()
	out := map[string]string{}
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i >= len(vs.Values) || !keep(vs, n.Name) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						t.Fatal(err)
					}
					out[n.Name] = v
				}
			}
		}
	}
	return out
}

// wireReasons is every Reason* constant of this package, by name.
func wireReasons(t *testing.T) map[string]string {
	return stringConsts(t, ".", func(_ *ast.ValueSpec, name string) bool { return strings.HasPrefix(name, "Reason") })
}

// TestReasonsDistinct: two names for one data.reason would make a skill's
// comparison depend on which constant the broker happened to use.
func TestReasonsDistinct(t *testing.T) {
	seen := map[string]string{}
	for name, v := range wireReasons(t) {
		if other, dup := seen[v]; dup {
			t.Errorf("%s and %s are both %q", name, other, v)
		}
		seen[v] = name
	}
	if len(seen) == 0 {
		t.Fatal("no Reason constants found in package wire")
	}
}

// TestPolicyReasonsAreWire ties policy.Reason, which must repeat the words
// because policy imports nothing of this module, to wire: every policy
// Reason constant is a wire reason, and every wire reason is either one of
// policy's or used by its name somewhere in the module. Adding a refusal on
// one side only fails here.
func TestPolicyReasonsAreWire(t *testing.T) {
	policyReasons := stringConsts(t, filepath.Join("..", "policy"), func(vs *ast.ValueSpec, _ string) bool {
		id, ok := vs.Type.(*ast.Ident)
		return ok && id.Name == "Reason"
	})
	if len(policyReasons) == 0 {
		t.Fatal("no policy.Reason constants found in ../policy")
	}
	wireByValue := map[string]string{}
	for name, v := range wireReasons(t) {
		wireByValue[v] = name
	}
	fromPolicy := map[string]bool{}
	for name, v := range policyReasons {
		if _, ok := wireByValue[v]; !ok {
			t.Errorf("policy.%s = %q is not a wire Reason constant; declare it in package wire", name, v)
		}
		fromPolicy[v] = true
	}

	used := usedWireNames(t)
	for v, name := range wireByValue {
		if !fromPolicy[v] && !used[name] {
			t.Errorf("wire.%s = %q is neither a policy.Reason nor used as wire.%s outside package wire", name, v, name)
		}
	}
}

// usedWireNames is every name selected as wire.X in the module's non-test
// Go files outside this package.
func usedWireNames(t *testing.T) map[string]bool {
	t.Helper()
	used := map[string]bool{}
	root := ".."
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && (d.Name() == "testdata" || p == filepath.Join(root, "wire") || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		af, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(af, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "wire" {
					used[sel.Sel.Name] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return used
}

// TestFrameHeader: four bytes, big-endian, as every client already writes.
func TestFrameHeader(t *testing.T) {
	var hdr [HeaderLen]byte
	PutHeader(hdr[:], 0x01020304)
	if !bytes.Equal(hdr[:], []byte{1, 2, 3, 4}) {
		t.Fatalf("PutHeader = % x, want 01 02 03 04", hdr)
	}
	if n := BodyLen(hdr[:]); n != 0x01020304 {
		t.Fatalf("BodyLen = %#x", n)
	}
	if MaxRequest > MaxResponse || MaxResponse > 1<<32-1 {
		t.Fatalf("caps %d/%d do not fit a %d-byte length", MaxRequest, MaxResponse, HeaderLen)
	}
}
