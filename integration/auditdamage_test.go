//go:build linux

package integration

import (
	"bytes"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// repairWord is what every refusal of a damaged store names.
const repairWord = "cyberos audit repair"

// journalLines returns the state dir's journal split into its lines (each
// without its newline) and the bytes past the last one (zeros the writer
// preallocated).
func journalLines(t *testing.T, stateDir string) (lines [][]byte, rest []byte) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(stateDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	end := bytes.LastIndexByte(b, '\n') + 1
	for _, l := range bytes.SplitAfter(b[:end], []byte("\n")) {
		if len(l) > 0 {
			lines = append(lines, bytes.TrimSuffix(l, []byte("\n")))
		}
	}
	return lines, b[end:]
}

func writeJournal(t *testing.T, stateDir string, lines [][]byte, rest []byte) {
	t.Helper()
	out := append(bytes.Join(lines, []byte("\n")), '\n')
	if err := os.WriteFile(filepath.Join(stateDir, "audit.jsonl"), append(out, rest...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tamper is one way a careless operator, a failing disk or an attacker
// damages a stopped daemon's state dir; victim is a line index of the
// journal (0-based) inside the chain, neither its first row nor its last.
type tamper struct {
	name string
	do   func(t *testing.T, stateDir string, victim int)
}

var tampers = []tamper{
	{"journal byte flipped", func(t *testing.T, dir string, v int) {
		lines, rest := journalLines(t, dir)
		l := lines[v]
		i := bytes.Index(l, []byte(`"ts":"`)) + len(`"ts":"`) + 3 // a digit of the year
		l[i] ^= 0x01
		writeJournal(t, dir, lines, rest)
	}},
	{"journal row_hash digit changed", func(t *testing.T, dir string, v int) {
		lines, rest := journalLines(t, dir)
		l := lines[v]
		i := bytes.Index(l, []byte(`"row_hash":"`)) + len(`"row_hash":"`)
		if l[i] == '0' {
			l[i] = '1'
		} else {
			l[i] = '0'
		}
		writeJournal(t, dir, lines, rest)
	}},
	{"journal rows swapped", func(t *testing.T, dir string, v int) {
		lines, rest := journalLines(t, dir)
		lines[v], lines[v+1] = lines[v+1], lines[v]
		writeJournal(t, dir, lines, rest)
	}},
	{"index payload edited", func(t *testing.T, dir string, v int) {
		db, err := sql.Open("sqlite", filepath.Join(dir, "audit.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`DROP TRIGGER audit_rows_no_update`); err != nil {
			t.Fatal(err)
		}
		res, err := db.Exec(`UPDATE audit_rows SET payload = replace(payload, '"skill_id":"', '"skill_id":"x') WHERE seq = ?`, v+1)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("edited %d rows", n)
		}
	}},
}

// garbagePages writes random bytes over the root pages of the index's two
// secondary indexes (pages a `skill run` on main never reads back).
func garbagePages(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, "audit.db")
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	var pageSize int64
	if err := db.QueryRow(`PRAGMA page_size`).Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	rs, err := db.Query(`SELECT rootpage FROM sqlite_schema WHERE name IN ('audit_rows_kind', 'audit_rows_invocation')`)
	if err != nil {
		t.Fatal(err)
	}
	var pages []int64
	for rs.Next() {
		var p int64
		if err := rs.Scan(&p); err != nil {
			t.Fatal(err)
		}
		pages = append(pages, p)
	}
	rs.Close()
	db.Close()
	if len(pages) != 2 {
		t.Fatalf("index root pages: %v", pages)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := bytes.Repeat([]byte{0xa5, 0x3c, 0xff, 0x01}, int(pageSize)/4)
	for _, p := range pages {
		if _, err := f.WriteAt(junk, (p-1)*pageSize); err != nil {
			t.Fatal(err)
		}
	}
}

// copyStateDir copies the regular files of src into a new state dir of e.
func copyStateDir(t *testing.T, src string, e *env) {
	t.Helper()
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		if !ent.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, ent.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(e.stateDir, ent.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAuditDamagedStateRefused: each damage of the tamper table, made while
// nothing runs, is refused before the first invocation: `skill run` exits
// non-zero naming the repair, and a daemon started on it answers every
// invocation 503 naming the repair. So is `skill run` on an index with
// garbage pages.
func TestAuditDamagedStateRefused(t *testing.T) {
	base := newEnv(t)
	dir := base.skill("damaged", "", "#!/bin/sh\necho '{\"n\":1}'\n")
	for range 3 {
		base.run(dir).mustOutcome(t, "success")
	}
	lines, _ := journalLines(t, base.stateDir)
	if len(lines) < 6 {
		t.Fatalf("journal has %d lines, want 6", len(lines))
	}
	victim := 2 // seq 3: the second invocation's started row

	cases := append([]tamper{}, tampers...)
	cases = append(cases, tamper{"index garbage pages", func(t *testing.T, d string, _ int) { garbagePages(t, d) }})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			copyStateDir(t, base.stateDir, e)
			tc.do(t, e.stateDir, victim)
			if code, out := e.verify(); code == 0 {
				t.Fatalf("audit verify passes the damaged store:\n%s", out)
			}
			sk := e.skill("damaged", "", "#!/bin/sh\necho '{\"n\":1}'\n")
			r := e.run(sk)
			if r.code == 0 || !strings.Contains(r.stderr, repairWord) {
				t.Errorf("skill run on a damaged store: exit %d (want non-zero), stderr names %q: %v\nstdout: %s\nstderr: %s",
					r.code, repairWord, strings.Contains(r.stderr, repairWord), r.stdout, r.stderr)
			}
			if tc.name == "index garbage pages" {
				return // the daemon's start refuses it (quick_check), as before
			}
			d := startDaemon(t, e)
			code, _, body := d.invoke(map[string]any{"skill_id": "damaged"})
			if code != http.StatusServiceUnavailable || !strings.Contains(body, repairWord) {
				t.Errorf("daemon on a damaged store: invocation answered %d (want 503 naming %q): %s", code, repairWord, body)
			}
		})
	}
}

// metricValue reads one series' value from the daemon's /metrics ("" when
// it is not there).
func (d *daemonProc) metricValue(series string) string {
	d.t.Helper()
	resp, err := http.Get("http://" + d.metricsAddr + "/metrics")
	if err != nil {
		d.t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestAuditScrubFindsOldDamage: a row signed by a checkpoint is not read
// again at start; the scrub, which runs once at start and then every
// audit.scrub_interval, finds it damaged, and from then on the daemon
// refuses invocations (503 naming the repair), with the damage in its
// metrics.
func TestAuditScrubFindsOldDamage(t *testing.T) {
	e := newEnv(t)
	e.skill("old", "", "#!/bin/sh\necho '{\"n\":1}'\n")
	d := startDaemon(t, e)
	for range 3 {
		if code, _, body := d.invoke(map[string]any{"skill_id": "old"}); code != 200 {
			t.Fatalf("invoke: %d %s", code, body)
		}
	}
	d.stop(30 * time.Second)
	lines, _ := journalLines(t, e.stateDir)
	if !bytes.Contains(lines[len(lines)-1], []byte(`"kind":"audit.checkpoint"`)) {
		t.Fatalf("the stopped daemon's last row is not a checkpoint: %s", lines[len(lines)-1])
	}
	tampers[0].do(t, e.stateDir, 2) // a byte of seq 3, before the checkpoint

	d = startDaemon(t, e, "audit:", "  scrub_interval: 1h")
	waitFor(t, 20*time.Second, func() bool { return d.metricValue("cyberos_audit_damaged") == "1" })
	if v := d.metricValue("cyberos_audit_scrub_last_ok"); v != "0" {
		t.Errorf("cyberos_audit_scrub_last_ok = %q, want 0", v)
	}
	code, _, body := d.invoke(map[string]any{"skill_id": "old"})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, repairWord) || !strings.Contains(body, fmt.Sprintf("seq %d", 3)) {
		t.Errorf("after the scrub found damage: invocation answered %d (want 503 naming %q and seq 3): %s", code, repairWord, body)
	}
}
