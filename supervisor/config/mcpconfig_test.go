package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func loadYAML(t *testing.T, y string) (Config, error) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return Load(p)
}

func TestMCPConfigValid(t *testing.T) {
	c, err := loadYAML(t, `version: 1
mcp_servers:
  everything:
    command: /usr/bin/node
    args: [/opt/mcp/everything/dist/index.js, stdio]
    env: {NODE_ENV: production}
    memory_mb: 256
    pids_max: 32
    cpu: 0.5
    files: [{path: /srv/data}, {path: /srv/out, mode: rw}]
    share: per_invocation
    idle: 30s
    call_timeout: 5s
    approve: auto
    secrets: {TOKEN: /etc/cyberos/mcp-token}
`)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.MCPServerNames(); !slices.Equal(got, []string{"everything"}) {
		t.Fatalf("names %v", got)
	}
	s, _ := c.MCPServer("everything")
	if s.Share != MCPSharePerInvocation || time.Duration(s.Idle) != 30*time.Second || s.Approve != MCPApproveAuto || s.Files[1].Mode != "rw" {
		t.Errorf("everything: %+v", s)
	}
	if time.Duration(s.CallTimeout) != 5*time.Second {
		t.Errorf("call_timeout %v", time.Duration(s.CallTimeout))
	}
	c2, err := loadYAML(t, "version: 1\nmcp_servers: {x: {command: /usr/bin/x}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := c2.MCPServer("x"); d.Share != MCPSharePerTenant || d.Approve != MCPApproveManual || time.Duration(d.CallTimeout) != DefaultMCPCallTimeout || time.Duration(d.Idle) != DefaultMCPIdle {
		t.Errorf("defaults: %+v", d)
	}
	if !slices.Contains(c.ReservedPaths(""), "/etc/cyberos/mcp-token") {
		t.Errorf("the secret file is not reserved from skills: %v", c.ReservedPaths(""))
	}
}

// Every problem of mcp_servers is reported at once, each naming its key.
func TestMCPConfigEveryProblemAtOnce(t *testing.T) {
	_, err := loadYAML(t, `version: 1
mcp_servers:
  Bad.Name: {command: /usr/bin/true}
  a__b: {command: /usr/bin/true}
  both: {command: /usr/bin/true, url: https://x.example}
  neither: {}
  rel: {command: node, share: sometimes, approve: maybe, idle: 1ms, memory_mb: 1, files: [{path: /var/lib/cyberos/audit}, {path: /srv, mode: rx}]}
  net: {command: /usr/bin/node, domains: [api.github.com, "https://x.example", "*"]}
  secret: {command: /usr/bin/node, secrets: {TOKEN: token.txt, "1X": /a}, env: {TOKEN: x}}
  remote: {url: "ftp://x", headers: {"Bad Header": /h, X-Key: rel}, args: [a], share: sometimes, domains: [x.example]}
  cred: {url: "https://u:p@x.example/mcp"}
`)
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("err %v, want ErrConfig", err)
	}
	for _, key := range []string{
		"mcp_servers.Bad.Name:", "mcp_servers.a__b:", "mcp_servers.both:", "mcp_servers.neither:",
		"mcp_servers.rel.command:", "mcp_servers.rel.share:", "mcp_servers.rel.approve:", "mcp_servers.rel.idle:",
		"mcp_servers.rel.memory_mb:", "mcp_servers.rel.files[0].path:", "mcp_servers.rel.files[1].mode:",
		`mcp_servers.net.domains[1]: "https://x.example" must be a host name, not a URL`, `mcp_servers.net.domains[2]: "*" a bare wildcard`,
		"mcp_servers.secret.secrets.TOKEN:", `mcp_servers.secret.secrets: "1X"`, "mcp_servers.secret.env.TOKEN: is also in secrets",
		"mcp_servers.remote.url: must be an http(s) URL", `mcp_servers.remote.headers: "Bad Header"`, "mcp_servers.remote.headers.X-Key:",
		"mcp_servers.remote.args:", "mcp_servers.remote.share:", "mcp_servers.remote.domains: is for a stdio server", "mcp_servers.cred.url: must not carry credentials",
	} {
		if !strings.Contains(err.Error(), key) {
			t.Errorf("the error does not name %q:\n%v", key, err)
		}
	}
	if strings.Contains(err.Error(), "domains[0]") {
		t.Errorf("a valid domain is reported:\n%v", err)
	}
}

// A remote server and a stdio server with domains are valid.
func TestMCPConfigRemoteAndDomains(t *testing.T) {
	c, err := loadYAML(t, `version: 1
mcp_servers:
  gh: {url: "https://api.githubcopilot.com/mcp/", headers: {Authorization: /etc/cyberos/gh-auth}, share: global, idle: 1m}
  fetcher: {command: /usr/bin/node, domains: [api.example.com, "*.example.org"]}
`)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := c.MCPServer("gh"); s.Share != MCPShareGlobal || s.URL == "" {
		t.Errorf("remote: %+v", s)
	}
	if s, _ := c.MCPServer("fetcher"); len(s.Domains) != 2 {
		t.Errorf("domains: %+v", s)
	}
	if !slices.Contains(c.ReservedPaths(""), "/etc/cyberos/gh-auth") {
		t.Errorf("the header file is not reserved from skills")
	}
}

// A misspelt key under a server is an error (strict decoding), and so is
// a server given as something other than a map.
func TestMCPConfigStrict(t *testing.T) {
	for _, y := range []string{
		"version: 1\nmcp_servers: {fs: {command: /usr/bin/node, memroy_mb: 64}}\n",
		"version: 1\nmcp_servers: {fs: {command: /usr/bin/node, files: [{path: /srv, writable: true}]}}\n",
		"version: 1\nmcp_servers: [fs]\n",
		"version: 1\nmcp_servers: {fs: {command: /usr/bin/node, idle: soon}}\n",
	} {
		if _, err := loadYAML(t, y); !errors.Is(err, ErrConfig) {
			t.Errorf("%q: err %v, want ErrConfig", y, err)
		}
	}
}

// MCP problems come beside the first problem of the rest of the config.
func TestMCPConfigProblemsBesideOthers(t *testing.T) {
	_, err := loadYAML(t, "version: 1\nmax_concurrent: 0\nmcp_servers: {x: {}}\n")
	if err == nil || !strings.Contains(err.Error(), "max_concurrent") || !strings.Contains(err.Error(), "mcp_servers.x") {
		t.Fatalf("err %v, want both max_concurrent and mcp_servers.x", err)
	}
}

// A secret must sit in a regular, root-only file: one other users may read
// is refused, as are a symlink, an empty file and a missing one.
func TestMCPSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "ghp_token\n", 0o600)
	if v, err := ReadMCPSecret(good); err != nil || v != "ghp_token" {
		t.Fatalf("good: %q, %v", v, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{
		"world-readable": write("wr", "x", 0o644),
		"group-readable": write("gr", "x", 0o640),
		"empty":          write("empty", "\n", 0o600),
		"two lines":      write("two", "a\nb\n", 0o600),
		"symlink":        link,
		"missing":        filepath.Join(dir, "none"),
		"directory":      dir,
	} {
		if _, err := ReadMCPSecret(p); !errors.Is(err, ErrMCPSecret) {
			t.Errorf("%s: err %v, want ErrMCPSecret", name, err)
		}
	}
	c := Default()
	c.MCPServers = &MCPServers{"gh": {Command: "/usr/bin/node", Secrets: map[string]string{"TOKEN": filepath.Join(dir, "wr")},
		Files: []MCPFile{{Path: filepath.Join(dir, "nope")}}, SeccompProfile: "strict"}}
	problems := c.MCPPreflight(func(string) error { return errors.New("no such profile") })
	if len(problems) != 3 || !strings.Contains(problems[0], "mcp_servers.gh.secrets.TOKEN") ||
		!strings.Contains(problems[1], "mcp_servers.gh.files[0].path") || !strings.Contains(problems[2], "mcp_servers.gh.seccomp_profile") {
		t.Errorf("preflight problems %q", problems)
	}
}

// Each running MCP server sandbox holds a host id range, and so does the
// standby sandbox of each stdio server without domains: the default
// ranges make room for mcp_max_running of them and the standbys once a
// server is set.
func TestMCPMaxRunning(t *testing.T) {
	plain := Default()
	c, err := loadYAML(t, "version: 1\nmcp_max_running: 5\nmcp_servers: {x: {command: /usr/bin/x}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.IDRanges(), plain.IDRanges()+5+1; got != want {
		t.Errorf("IDRanges %d, want %d", got, want)
	}
	c, err = loadYAML(t, "version: 1\nmcp_max_running: 5\nmcp_servers: {x: {command: /usr/bin/x}, y: {command: /usr/bin/y, domains: [example.com]}, z: {url: 'https://example.com/mcp'}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.IDRanges(), plain.IDRanges()+5+1; got != want {
		t.Errorf("IDRanges with a server with domains and a remote one %d, want %d (one standby)", got, want)
	}
	if _, err := loadYAML(t, "version: 1\nmcp_max_running: 0\n"); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "mcp_max_running") {
		t.Errorf("mcp_max_running 0: %v", err)
	}
}

// serve --check (CheckConfigFile) reads mcp_servers: its servers are
// loaded and their problems listed with the rest.
func TestCheckConfigFileMCPServers(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("version: 1\nmcp_servers:\n  ok: {command: /usr/bin/node}\n  bad: {command: node}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, problems := CheckFile(p)
	if err := errors.Join(problems...); err == nil || !strings.Contains(err.Error(), "mcp_servers.bad.command") {
		t.Errorf("problems: %v", err)
	}
	if err := os.WriteFile(p, []byte("version: 1\nmcp_servers:\n  ok: {command: /usr/bin/node}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if cfg, problems := CheckFile(p); len(problems) != 0 || !slices.Equal(cfg.MCPServerNames(), []string{"ok"}) {
		t.Errorf("servers %v, problems %v", cfg.MCPServerNames(), problems)
	}
}
