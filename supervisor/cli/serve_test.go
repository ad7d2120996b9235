package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRemoveStaleSocketsOnlyTheDead: a daemon's start removes the broker
// sockets of the sandboxes it found dead, and no other (a socket dir is
// shared with live supervisors).
func TestRemoveStaleSocketsOnlyTheDead(t *testing.T) {
	dir := t.TempDir()
	sock := func(id string) string { return filepath.Join(dir, "cyberos-skill-broker."+id+".sock") }
	for _, id := range []string{"dead", "warm-dead", "live"} {
		if err := os.WriteFile(sock(id), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removeStaleSockets(dir, []string{"dead", "warm-dead", "gone-already"}, func(msg string, _ ...any) { t.Errorf("unexpected warning: %s", msg) })
	for id, want := range map[string]bool{"dead": false, "warm-dead": false, "live": true} {
		if _, err := os.Stat(sock(id)); (err == nil) != want {
			t.Errorf("socket %s: exists %v, want %v", id, err == nil, want)
		}
	}
}
