package unixsock

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// Listen gives the file exactly perm, even bits the umask takes away, and
// the socket accepts connections.
func TestListenSetsModeDespiteUmask(t *testing.T) {
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(path, 0o660)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if m := mode(t, path); m != 0o660 {
		t.Errorf("mode %v, want 0660", m)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// Listen never replaces a file that is already there.
func TestListenRefusesAnExistingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.sock")
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path, 0o600); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("Listen over a regular file: %v, want EADDRINUSE", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "x" {
		t.Error("the existing file was replaced")
	}
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("%s is %v, not a socket", path, fi.Mode().Type())
	}
	return fi.Mode().Perm()
}
