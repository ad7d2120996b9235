package seccomp

import (
	"slices"
	"testing"

	"github.com/opencontainers/runc/libcontainer/configs"
)

func TestRecordingConfig(t *testing.T) {
	base := loadDefault(t)
	rc := RecordingConfig(base, "/run/x.sock")
	if rc.ListenerPath != "/run/x.sock" || base.ListenerPath != "" {
		t.Errorf("listener path %q (base %q)", rc.ListenerPath, base.ListenerPath)
	}
	for i, s := range rc.Syscalls {
		b := base.Syscalls[i]
		switch {
		case b.Action != configs.Allow:
			if s.Action != b.Action {
				t.Errorf("%s: refusal %v changed to %v", s.Name, b.Action, s.Action)
			}
		case slices.Contains(recordBaseline, s.Name):
			if s.Action != configs.Allow {
				t.Errorf("%s: baseline call is %v, want allowed (a notified write would hang runc's init)", s.Name, s.Action)
			}
		case slices.Contains(recordUnnotified, s.Name):
			if s.Action != configs.Allow {
				t.Errorf("%s: %v, want allowed (a notified fork can fail with EINTR)", s.Name, s.Action)
			}
		case s.Action != configs.Notify:
			t.Errorf("%s: %v, want notify", s.Name, s.Action)
		}
		if !slices.Equal(s.Args, b.Args) {
			t.Errorf("%s: conditions changed", s.Name)
		}
	}
	if base.Syscalls[0].Action != configs.Allow {
		t.Error("RecordingConfig modified the base profile")
	}
}
