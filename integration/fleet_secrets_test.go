//go:build linux

package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
)

// dsnSpellings are the ways a connection string holds a password (as in
// the fleet package's unit test): {host}, {port} and {sslmode} are filled
// in by the error kind. Every password holds "sekret", which nothing else
// in an output does.
var dsnSpellings = map[string]string{
	"url":           "postgres://cyberos:Zsekret1@{host}:{port}/fleet?sslmode={sslmode}",
	"url-encoded":   "postgres://cyberos:p%40sekret%20two%2F@{host}:{port}/fleet?sslmode={sslmode}",
	"url-query":     "postgres://cyberos@{host}:{port}/fleet?sslmode={sslmode}&password=sekret3",
	"kv":            "host={host} port={port} user=cyberos password=sekret4 dbname=fleet sslmode={sslmode}",
	"kv-spaces":     "host={host} port={port} user=cyberos password = sekret5 dbname=fleet sslmode={sslmode}",
	"kv-quoted":     "host = {host} port = {port} user = cyberos password = 'sekret six here' dbname = fleet sslmode = {sslmode}",
	"kv-quoted-esc": `host={host} port={port} user=cyberos password='it\'s sekret7' dbname=fleet sslmode={sslmode}`,
}

// Must show (issue 37, finding 2): whatever the spelling of the DSN and
// whatever goes wrong (a DSN that does not parse, a config key that is
// wrong, a host that does not resolve, a server that does not answer, a
// password the server refuses), no output of serve --check, serve (its
// log and /metrics), audit verify|export --dsn-file and fleet migrate
// holds the password. audit verify --dsn, which puts it on the command
// line, says so on stderr.
func TestFleetDSNPasswordInNoOutput(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pg.CreateDatabase("fleet")
	pg.Psql("postgres", "CREATE ROLE cyberos LOGIN PASSWORD 'the-right-one'")
	pg.For(t).RequirePasswords()
	port := strconv.Itoa(pg.Port)
	kinds := []struct {
		name, host, port, sslmode string
		runs                      bool   // serve starts (PostgreSQL may be away)
		config                    string // a config line besides the fleet's
	}{
		{name: "bad port", host: "127.0.0.1", port: "5x432", sslmode: "disable"},
		{name: "bad sslmode", host: "127.0.0.1", port: port, sslmode: "bogus"},
		{name: "other config key wrong", host: "127.0.0.1", port: port, sslmode: "disable", config: "max_concurrent: 0"},
		{name: "bad host", host: "no-such-host.invalid", port: port, sslmode: "disable", runs: true},
		{name: "unreachable", host: "127.0.0.1", port: "1", sslmode: "disable", runs: true},
		{name: "auth failure", host: "127.0.0.1", port: port, sslmode: "disable", runs: true},
	}
	dir := t.TempDir()
	for sp, tmpl := range dsnSpellings {
		for _, k := range kinds {
			dsn := strings.NewReplacer("{host}", k.host, "{port}", k.port, "{sslmode}", k.sslmode).Replace(tmpl)
			what := sp + ", " + k.name
			dsnFile := filepath.Join(dir, "dsn")
			if err := os.WriteFile(dsnFile, []byte(dsn+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			outputs := map[string]string{}
			run := func(name string, cmd *exec.Cmd) {
				out, _ := cmd.CombinedOutput()
				outputs[name] = string(out)
			}
			if k.config == "" {
				run("audit verify --dsn-file", cyberos("audit", "verify", "--dsn-file", dsnFile))
				run("audit export --dsn-file", cyberos("audit", "export", "--dsn-file", dsnFile))
				run("fleet migrate --dsn-file", cyberos("fleet", "migrate", "--dsn-file", dsnFile))
				out, _ := cyberos("audit", "verify", "--dsn", dsn).CombinedOutput()
				outputs["audit verify --dsn"] = string(out)
				if k.port != "5x432" && k.sslmode != "bogus" && !strings.Contains(string(out), "use --dsn-file") {
					t.Errorf("%s: audit verify --dsn with a password does not warn about it:\n%s", what, out)
				}
			}
			e := newEnv(t)
			e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
			extra := []string{fmt.Sprintf("fleet: {postgres_dsn: '%s', host_id: host-a}", strings.ReplaceAll(dsn, "'", "''"))}
			if k.config != "" {
				extra = append(extra, k.config)
			}
			cfg := filepath.Join(e.base, "etc", "supervisor.yaml")
			os.MkdirAll(filepath.Dir(cfg), 0o755)
			if err := os.WriteFile(cfg, []byte(e.daemonConfig(freePort(t), extra...)), 0o644); err != nil {
				t.Fatal(err)
			}
			check := cyberos("supervisor", "serve", "--check", "--config", cfg, "--run-dir", e.runDir)
			run("serve --check", check)
			if k.runs {
				if code := check.ProcessState.ExitCode(); code != 0 {
					t.Errorf("%s: serve --check refused a DSN that parses: exit %d\n%s", what, code, outputs["serve --check"])
				}
				d := startDaemon(t, e, extra...)
				// The start's check of the database, then shipping, fail.
				waitFor(t, 30*time.Second, func() bool { return d.gauge(`cyberos_audit_ship_errors_total{reason="database"}`) > 0 })
				if resp, err := http.Get("http://" + d.metricsAddr + "/metrics"); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					outputs["/metrics"] = string(b)
				}
				d.stop(30 * time.Second)
				outputs["serve log"] = d.logs.String()
				if !strings.Contains(outputs["serve log"], "failed to connect") && !strings.Contains(outputs["serve log"], "connect") {
					t.Errorf("%s: the serve log does not say the connection failed:\n%s", what, outputs["serve log"])
				}
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), slow(60*time.Second))
				cmd := exec.CommandContext(ctx, cyberosBin, "supervisor", "serve", "--config", cfg, "--run-dir", e.runDir)
				out, err := cmd.CombinedOutput()
				cancel()
				outputs["serve"] = string(out)
				if exitCode(err) != 2 {
					t.Errorf("%s: serve: exit %d, want 2 (a config error)\n%s", what, exitCode(err), out)
				}
				if !strings.Contains(outputs["serve --check"], "max_concurrent") && !strings.Contains(outputs["serve --check"], "fleet.postgres_dsn") {
					t.Errorf("%s: serve --check does not name what is wrong:\n%s", what, outputs["serve --check"])
				}
			}
			for name, out := range outputs {
				if strings.Contains(strings.ToLower(out), "sekret") {
					t.Errorf("%s: %s prints the password:\n%s", what, name, out)
				}
			}
		}
	}
}
