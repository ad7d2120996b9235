package cli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"cyberos.dev/supervisor/config"
)

func TestDaemonReserved(t *testing.T) {
	dir := t.TempDir()
	saved := defaultConfigPath
	t.Cleanup(func() { defaultConfigPath = saved })
	nowarn := func(msg string, _ ...any) { t.Errorf("unexpected warning: %s", msg) }

	// No config file anywhere: the built-in defaults' paths.
	defaultConfigPath = filepath.Join(dir, "absent", "supervisor.yaml")
	got, err := daemonReserved("", nowarn)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{config.DefaultConfigDir, "/etc/cyberos/audit-signing.key", "/opt/cyberos/skills", "/var/lib/cyberos", "/run/cyberos/supervisor.sock"} {
		if !slices.Contains(got, want) {
			t.Errorf("defaults: %s not reserved in %q", want, got)
		}
	}

	// A given config: the file and what it names, not its directory.
	cfg := filepath.Join(dir, "etc", "supervisor.yaml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("version: 1\nskills_dir: /srv/skills\naudit:\n  signing_key: k.key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = daemonReserved(cfg, nowarn)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{cfg, filepath.Join(filepath.Dir(cfg), "k.key"), "/srv/skills", config.DefaultConfigDir} {
		if !slices.Contains(got, want) {
			t.Errorf("--config: %s not reserved in %q", want, got)
		}
	}
	if slices.Contains(got, filepath.Dir(cfg)) {
		t.Errorf("--config: its whole directory %s is reserved", filepath.Dir(cfg))
	}

	// An invalid --config is an error; an invalid default one a warning.
	if err := os.WriteFile(cfg, []byte("version: 1\nno_such_key: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := daemonReserved(cfg, nowarn); !errors.Is(err, config.ErrConfig) {
		t.Errorf("invalid --config: err %v, want ErrConfig", err)
	}
	defaultConfigPath = cfg
	warned := false
	got, err = daemonReserved("", func(string, ...any) { warned = true })
	if err != nil || !warned || !slices.Contains(got, "/etc/cyberos/audit-signing.key") {
		t.Errorf("invalid default config: err %v, warned %v, reserved %q", err, warned, got)
	}
}
