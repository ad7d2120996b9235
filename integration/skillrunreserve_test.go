//go:build linux

package integration

// Issue 36 finding 7: a skill run by `cyberos skill run` with
// x-allowed-files ["/**"] edited a daemon config and read the audit
// signing key, which `serve` reserves. `skill run` reserves them too: the
// default config's directory (/etc/cyberos), the default config and every
// file it names, and a --config and every file it names (not its
// directory: issue 41.1).

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// reserveCalls are the attacks on a daemon's config and key; "ctl_" names
// are controls that must succeed.
func reserveCalls(config, key, named, data string) [][3]string {
	calls := [][3]string{
		{"read_key", "Read", fmt.Sprintf(`{"path":"%s"}`, key)},
		{"read_key_pub", "Read", fmt.Sprintf(`{"path":"%s.pub"}`, key)},
		{"write_key", "Write", fmt.Sprintf(`{"path":"%s","content":"x"}`, key)},
		{"read_config", "Read", fmt.Sprintf(`{"path":"%s"}`, config)},
		{"edit_config", "Edit", fmt.Sprintf(`{"path":"%s","old_string":"version: 1","new_string":"version: 1\nmax_concurrent: 1"}`, config)},
		{"read_named", "Read", fmt.Sprintf(`{"path":"%s"}`, named)},
		{"ctl_read_data", "Read", fmt.Sprintf(`{"path":"%s"}`, data)},
	}
	// The dedicated config directory is reserved wholesale; another
	// config's directory is not (issue 41.1: it may be /tmp).
	if filepath.Dir(config) == "/etc/cyberos" {
		calls = append(calls, [3]string{"write_config_dir", "Write", fmt.Sprintf(`{"path":"%s/planted.yaml","content":"x"}`, filepath.Dir(config))})
	}
	return calls
}

func TestSkillRunReservesTheDaemonsFiles(t *testing.T) {
	e := newEnv(t)
	data := filepath.Join(e.base, "data", "ok.txt")
	must(t, os.MkdirAll(filepath.Dir(data), 0o755))
	must(t, os.WriteFile(data, []byte("fine"), 0o644))
	secrets := filepath.Join(e.base, "secrets")
	must(t, os.MkdirAll(secrets, 0o700))

	// writeDaemon writes a config in dir whose signing key is keyName and
	// which names a DSN file in secrets, with the key pair and that file.
	writeDaemon := func(dir, keyName string) (config, key, dsn string) {
		must(t, os.MkdirAll(dir, 0o755))
		config = filepath.Join(dir, "supervisor.yaml")
		dsn = filepath.Join(secrets, filepath.Base(dir)+".dsn")
		key = keyName
		if !filepath.IsAbs(key) {
			key = filepath.Join(dir, key)
		}
		must(t, os.WriteFile(config, []byte(fmt.Sprintf("version: 1\nstate_dir: %s\naudit:\n  signing_key: %s\nfleet:\n  postgres_dsn_file: %s\n  host_id: h1\n",
			filepath.Join(e.base, "daemon-state"), keyName, dsn)), 0o600))
		must(t, os.WriteFile(key, []byte("-----BEGIN PRIVATE KEY-----\nsecret\n"), 0o600))
		must(t, os.WriteFile(key+".pub", []byte("public\n"), 0o644))
		must(t, os.WriteFile(dsn, []byte("postgres://u:password@127.0.0.1/db\n"), 0o600))
		return config, key, dsn
	}
	attack := func(t *testing.T, config, key, named string, extra ...string) {
		t.Helper()
		before := fileHashes(t, config, key)
		list := reserveCalls(config, key, named, data)
		dir := e.skill("reader-"+filepath.Base(filepath.Dir(config)), "allowed_tools: [Read, Write, Edit]\nx-allowed-files: [\"/**\"]\n", callScript(list...))
		m := calls(t, e.run(dir, extra...))
		for _, c := range list {
			if c[0] == "ctl_read_data" {
				mustOK(t, m, c[0])
				continue
			}
			mustRefuse(t, m, c[0], "file_violation")
		}
		for p, h := range fileHashes(t, config, key) {
			if h != before[p] {
				t.Errorf("skill run let a skill change %s", p)
			}
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(config), "planted.yaml")); err == nil && filepath.Dir(config) == "/etc/cyberos" {
			t.Error("a file was planted in the daemon's config directory")
		}
	}

	t.Run("--config", func(t *testing.T) {
		config, key, dsn := writeDaemon(filepath.Join(e.base, "etc-given"), "sign.key")
		attack(t, config, key, dsn, "--config", config)
	})
	t.Run("default", func(t *testing.T) {
		// The default config dir is the host's own: made here only when the
		// host has none, and removed after.
		const etc = "/etc/cyberos"
		if _, err := os.Lstat(etc); err == nil {
			// A host with an installed daemon (the VM image has one): its
			// files are attacked by reads and a planted file only, which
			// must be refused; the whole attack runs where there is none.
			planted := filepath.Join(etc, "planted-by-test.yaml")
			list := [][3]string{
				{"read_config", "Read", fmt.Sprintf(`{"path":"%s/supervisor.yaml"}`, etc)},
				{"write_config_dir", "Write", fmt.Sprintf(`{"path":"%s","content":"x"}`, planted)},
				{"ctl_read_data", "Read", fmt.Sprintf(`{"path":"%s"}`, data)},
			}
			m := calls(t, e.run(e.skill("reader-installed", "allowed_tools: [Read, Write]\nx-allowed-files: [\"/**\"]\n", callScript(list...))))
			mustOK(t, m, "ctl_read_data")
			mustRefuse(t, m, "read_config", "file_violation")
			mustRefuse(t, m, "write_config_dir", "file_violation")
			if _, err := os.Lstat(planted); err == nil {
				os.Remove(planted)
				t.Errorf("a skill planted %s", planted)
			}
			return
		} else if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("%s: %v", etc, err)
		}
		t.Cleanup(func() { os.RemoveAll(etc) })
		// An absolute key outside /etc/cyberos: reserved because the
		// default config names it.
		config, key, dsn := writeDaemon(etc, filepath.Join(secrets, "default.key"))
		attack(t, config, key, dsn)
		// The default key location, /etc/cyberos/audit-signing.key, when the
		// config leaves signing_key at its default.
		must(t, os.WriteFile(config, []byte("version: 1\n"), 0o600))
		defKey := filepath.Join(etc, "audit-signing.key")
		must(t, os.WriteFile(defKey, []byte("-----BEGIN PRIVATE KEY-----\nsecret\n"), 0o600))
		must(t, os.WriteFile(defKey+".pub", []byte("public\n"), 0o644))
		attack(t, config, defKey, defKey+".pub")
	})
}
