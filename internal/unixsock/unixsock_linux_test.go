package unixsock

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// The file bind(2) creates already has the asked mode: with a umask of 0,
// a plain bind makes it 0777 (checked first, so the test can tell the two
// apart), while bind here makes it 0600 before any chmod.
func TestBindCreatesTheFileWithItsMode(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()

	plain := filepath.Join(dir, "plain.sock")
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "unix", plain)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if m := mode(t, plain); m != 0o777 {
		t.Fatalf("a plain bind under umask 0 made mode %v, want 0777: this kernel does not show the window this package closes", m)
	}

	for _, perm := range []os.FileMode{0o600, 0o660} {
		path := filepath.Join(dir, perm.String()+".sock")
		ln, err := bind(path, perm)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if m := mode(t, path); m != perm {
			t.Errorf("bind(%v): the file is created with mode %v", perm, m)
		}
	}
}
