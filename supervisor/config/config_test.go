package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"cyberos.dev/supervisor/sandbox"
)

func TestExampleConfigIsValid(t *testing.T) {
	c, err := Load("../../packaging/config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c != Default() {
		t.Errorf("the example config differs from the defaults:\n%+v\n%+v", c, Default())
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ yaml, key string }{
		{"version: 1\nskils_dir: /x\n", "skils_dir"},
		{"version: 1\ndefaults: {memory_mb: 512, pid_max: 3}\n", "pid_max"},
		{"version: 2\n", "version"},
		{"version: 1\nskills_dir: relative\n", "skills_dir"},
		{"version: 1\nmax_concurrent: 0\n", "max_concurrent"},
		{"version: 1\ndefaults: {memory_mb: 1}\n", "defaults.memory_mb"},
		{"version: 1\ndefaults: {seccomp_profile: ../x}\n", "defaults.seccomp_profile"},
		{"version: 1\ndefaults: {cpu: -1}\n", "defaults.cpu"},
		{"version: 1\ndefaults: {cpu: 65}\n", "defaults.cpu"},
		{"version: 1\ndefaults: {cpu: .nan}\n", "defaults.cpu"},
		{"version: 1\ndefaults: {file_size_mb: 0}\n", "defaults.file_size_mb"},
		{"version: 1\ndefaults: {nofile: 16}\n", "defaults.nofile"},
		{"version: 1\ndefaults: {rate_limit_per_minute: 0}\n", "defaults.rate_limit_per_minute"},
		{"version: 1\ndefaults: {max_broker_connections: 2000}\n", "defaults.max_broker_connections"},
		{"version: 1\ndefaults: {max_audit_rows: 10}\n", "defaults.max_audit_rows"},
		{"version: 1\nshutdown_grace: forever\n", "shutdown_grace"},
		{"version: 1\nmetrics_listen: nocolon\n", "metrics_listen"},
		{"version: 1\nadmin_group: no-such-group-cyberos\n", "admin_group"},
		{"version: 1\nmax_concurrent: many\n", "max_concurrent"},
		{"version: 1\nmax_concurrent_starts: -1\n", "max_concurrent_starts"},
		{"version: 1\nuserns: {ranges: 8}\n", "userns.ranges"},
		{"version: 1\nuserns: {ranges: 260}\n", "warm.max_sandboxes"},
		{"version: 1\nwarm: {max_sandboxes: -1}\n", "warm.max_sandboxes"},
		{"version: 1\nwarm: {max_per_skill: 0}\n", "warm.max_per_skill"},
		{"version: 1\nwarm: {max_memory_mb: -5}\n", "warm.max_memory_mb"},
		{"version: 1\nwarm: {idle: 10ms}\n", "warm.idle"},
		{"version: 1\nwarm: {idle: soon}\n", "idle"},
		{"version: 1\nwarm: {max_sandbox: 3}\n", "max_sandbox"},
		{"version: 1\nuserns: {host_id_base: 0}\n", "userns.host_id_base"},
		{"version: 1\nuserns: {host_id_base: 4294000000}\n", "userns.host_id_base"},
		{"version: 1\nuserns: {host_id_base: 1000000, ranges: 70000, extra: 1}\n", "extra"},
		{"version: 1\nfleet: {postgres_dsn: 'postgres://a@b/c', postgres_dsn_file: /etc/dsn}\n", "fleet"},
		{"version: 1\nfleet: {postgres_dsn_file: dsn.txt}\n", "fleet.postgres_dsn_file"},
		{"version: 1\nfleet: {host_id: 'a b'}\n", "fleet.host_id"},
		{"version: 1\nfleet: {host_id: ../x}\n", "fleet.host_id"},
		{"version: 1\nfleet: {dsn: x}\n", "dsn"},
		{"version: 1\naudit: {scrub_interval: 10s}\n", "audit.scrub_interval"},
		{"version: 1\naudit: {scrub_interval: 1000h}\n", "audit.scrub_interval"},
		{"version: 1\naudit: {scrub_interval: often}\n", "audit.scrub_interval"},
		{"version: 1\nlimits: {max_memory_mb: 256}\n", "limits.max_memory_mb: 256 is below defaults.memory_mb (512)"},
		{"version: 1\nlimits: {max_memory_mb: 70000}\n", "limits.max_memory_mb"},
		{"version: 1\nlimits: {max_pids: 32}\n", "limits.max_pids: 32 is below defaults.pids_max (64)"},
		{"version: 1\nlimits: {max_pids: 5000}\n", "limits.max_pids"},
		{"version: 1\nlimits: {max_cpu: 0.5}\n", "limits.max_cpu: 0.5 is below defaults.cpu (1)"},
		{"version: 1\nlimits: {max_cpu: 0}\n", "limits.max_cpu"},
		{"version: 1\nlimits: {max_cpu: .nan}\n", "limits.max_cpu"},
		{"version: 1\ndefaults: {cpu: 0}\nlimits: {max_cpu: 0.25}\n", "limits.max_cpu: 0.25 is below defaults.cpu 0"},
		{"version: 1\nlimits: {max_memory: 1024}\n", "max_memory"},
		{"version: 1\nmemory: {tenant_concurrency: 0}\n", "memory.tenant_concurrency"},
		{"version: 1\nmemory: {statement_timeout: 1ms}\n", "memory.statement_timeout"},
		{"version: 1\nmemory: {statement_timeout: later}\n", "memory.statement_timeout"},
		{"version: 1\nmemory: {tenant_writes_per_second: 0}\n", "memory.tenant_writes_per_second"},
		{"version: 1\nmemory: {tenant_writes_per_second: .nan}\n", "memory.tenant_writes_per_second"},
		{"version: 1\nmemory: {tenant_write_burst: 0}\n", "memory.tenant_write_burst"},
		{"version: 1\nmemory: {tenant_burst: 5}\n", "tenant_burst"},
	} {
		p := filepath.Join(t.TempDir(), "c.yaml")
		os.WriteFile(p, []byte(tc.yaml), 0o644)
		_, err := Load(p)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: err %v, want ErrConfig naming %s", tc.yaml, err, tc.key)
		}
	}
}

// TestConfigScrubInterval: audit.scrub_interval defaults to an hour, and
// 0 turns the scrub off.
func TestConfigScrubInterval(t *testing.T) {
	if got := time.Duration(Default().Audit.ScrubInterval); got != time.Hour {
		t.Errorf("default scrub_interval %v, want 1h", got)
	}
	p := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(p, []byte("version: 1\naudit: {scrub_interval: 0s}\n"), 0o644)
	c, err := Load(p)
	if err != nil || c.Audit.ScrubInterval != 0 {
		t.Errorf("scrub_interval 0s: %v, %v", c.Audit.ScrubInterval, err)
	}
}

// fleet.host_id defaults to $CYBEROS_HOST_ID, then to the hostname; the
// DSN may come from a file (a mounted secret), whose emptiness is an error.
func TestFleetHostIDAndDSN(t *testing.T) {
	t.Setenv(HostIDEnv, "node-7")
	if id, err := (Fleet{}).ResolvedHostID(); err != nil || id != "node-7" {
		t.Errorf("host id from $%s: %q %v", HostIDEnv, id, err)
	}
	if id, err := (Fleet{HostID: "host-a"}).ResolvedHostID(); err != nil || id != "host-a" {
		t.Errorf("configured host id: %q %v", id, err)
	}
	t.Setenv(HostIDEnv, "")
	h, _ := os.Hostname()
	if id, err := (Fleet{}).ResolvedHostID(); err != nil || id != h {
		t.Errorf("host id from the hostname %q: %q %v", h, id, err)
	}
	t.Setenv(HostIDEnv, "bad id")
	if _, err := (Fleet{}).ResolvedHostID(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "$"+HostIDEnv) {
		t.Errorf("a bad $%s: %v", HostIDEnv, err)
	}
	f := filepath.Join(t.TempDir(), "dsn")
	os.WriteFile(f, []byte("postgres://u@db:5432/c\n"), 0o400)
	if dsn, err := (Fleet{PostgresDSNFile: f}).DSN(); err != nil || dsn != "postgres://u@db:5432/c" {
		t.Errorf("DSN from a file: %q %v", dsn, err)
	}
	os.WriteFile(f, []byte("\n"), 0o400)
	if _, err := (Fleet{PostgresDSNFile: f}).DSN(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty DSN file: %v", err)
	}
	if (Fleet{}).Enabled() || !(Fleet{PostgresDSNFile: f}).Enabled() {
		t.Errorf("Enabled: only with a DSN or a DSN file")
	}
}

// The sandboxes' id ranges may not overlap the host's users, groups or
// subordinate ids; the error names the setting and the file.
func TestConfigUsernsOverlapsHostIDs(t *testing.T) {
	dir := t.TempDir()
	subuid := filepath.Join(dir, "subuid")
	os.WriteFile(subuid, []byte("alice:1100000:65536\n"), 0o644)
	old := sandbox.HostIDFiles
	sandbox.HostIDFiles = []string{subuid}
	defer func() { sandbox.HostIDFiles = old }()
	c := Default()
	err := c.Validate()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "userns.host_id_base") || !strings.Contains(err.Error(), subuid) {
		t.Fatalf("default ranges over a subuid range: err %v, want ErrConfig naming userns.host_id_base and %s", err, subuid)
	}
	c.Userns.HostIDBase = 1100000 + 65536
	if err := c.Validate(); err != nil {
		t.Fatalf("ranges after the subuid range: %v", err)
	}
	if c.IDRanges() != c.MaxConcurrent+c.Warm.MaxSandboxes+DefaultTeardowns || c.Teardowns() != DefaultTeardowns {
		t.Fatalf("ranges %d, teardowns %d; want max_concurrent %d + warm.max_sandboxes %d + %d teardowns by default", c.IDRanges(), c.Teardowns(), c.MaxConcurrent, c.Warm.MaxSandboxes, DefaultTeardowns)
	}
	c.Userns.Ranges = c.MaxConcurrent + c.Warm.MaxSandboxes
	if c.Teardowns() != 0 {
		t.Fatalf("teardowns %d with no spare range, want 0", c.Teardowns())
	}
}

// TestConfigSigningKey: a relative audit.signing_key is taken from the
// config file's directory (/etc/cyberos without one), one inside state_dir
// is refused naming the key, and the key is reserved from the file tools.
func TestConfigSigningKey(t *testing.T) {
	c := Default()
	if got := c.SigningKeyPath(""); got != "/etc/cyberos/audit-signing.key" {
		t.Errorf("without a config file: %s", got)
	}
	if got := c.SigningKeyPath("/srv/conf/supervisor.yaml"); got != "/srv/conf/audit-signing.key" {
		t.Errorf("beside the config: %s", got)
	}
	if r := c.ReservedPaths("/srv/conf/supervisor.yaml"); !slices.Contains(r, "/srv/conf/audit-signing.key") || !slices.Contains(r, "/srv/conf/audit-signing.key.pub") {
		t.Errorf("reserved paths %v lack the key", r)
	}
	if r := c.ReservedPaths("/srv/conf/supervisor.yaml"); slices.Contains(r, "/srv/conf") || !slices.Contains(r, "/srv/conf/supervisor.yaml") || !slices.Contains(r, DefaultConfigDir) {
		t.Errorf("reserved paths %v: want the config file and %s, not the config's directory", r, DefaultConfigDir)
	}
	c.Audit.SigningKey = "/var/lib/cyberos/keys/k"
	if err := c.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "audit.signing_key") || !strings.Contains(err.Error(), "inside state_dir") {
		t.Errorf("a key in state_dir: %v", err)
	}
	c.Audit.SigningKey = "../lib/cyberos/k"
	if err := c.CheckSigningKeyPath("/var/etc/supervisor.yaml"); err == nil {
		t.Error("a relative key resolving into state_dir was accepted")
	}
	c.Audit.SigningKey = ""
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "audit.signing_key") {
		t.Errorf("an empty key: %v", err)
	}
	c = Default()
	c.Audit.Syslog = "dev/log"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "audit.syslog") {
		t.Errorf("a relative syslog socket: %v", err)
	}
}
