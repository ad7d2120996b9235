package testutil

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Postgres is a PostgreSQL server of the machine's own package, started by
// a test in a temporary directory on a free loopback port.
type Postgres struct {
	t    testing.TB
	bin  string // the server's bin directory (initdb, pg_ctl)
	dir  string // the cluster's data directory
	Port int
	uid  int
	gid  int
}

// PostgresBinDir finds the newest /usr/lib/postgresql/N/bin holding initdb
// (Debian's postgresql package); "" when there is none.
func PostgresBinDir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) < pgMajor(dirs[j]) })
	if len(dirs) == 0 {
		return ""
	}
	return filepath.Dir(dirs[len(dirs)-1])
}

func pgMajor(initdb string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return n
}

// StartPostgres initialises and starts a server for t, stopped and removed
// when t ends. initdb refuses root, so the cluster belongs to the postgres
// user (as root) or to the caller. A missing server package skips the test,
// loudly; under CI (env CI set) it fails.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	if PostgresBinDir() == "" {
		RequiresPostgres(t, errNoPostgres)
	}
	p, stop, err := LaunchPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	p.t = t
	return p
}

var errNoPostgres = fmt.Errorf("no PostgreSQL server (Debian's postgresql package: apt-get install postgresql)")

// RequiresPostgres stops a test whose PostgreSQL could not be had (err):
// skipped, loudly; under CI (env CI set) failed, so the test cannot rot
// unrun. A nil err lets the test go on.
func RequiresPostgres(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s needs PostgreSQL and CI is set: %v", t.Name(), err)
	}
	t.Skipf("SKIPPED %s: needs PostgreSQL: %v", t.Name(), err)
}

// LaunchPostgres is StartPostgres for a TestMain: the caller stops it, and
// uses it from tests through For.
func LaunchPostgres() (_ *Postgres, stop func(), err error) {
	bin := PostgresBinDir()
	if bin == "" {
		return nil, nil, errNoPostgres
	}
	p := &Postgres{bin: bin, uid: os.Getuid(), gid: os.Getgid()}
	if p.uid == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, nil, fmt.Errorf("PostgreSQL as root needs the postgres user (initdb refuses root): %w", err)
		}
		p.uid, _ = strconv.Atoi(u.Uid)
		p.gid, _ = strconv.Atoi(u.Gid)
	}
	base, err := os.MkdirTemp("", "cyberos-pg-")
	if err != nil {
		return nil, nil, err
	}
	fail := func(err error) (*Postgres, func(), error) { os.RemoveAll(base); return nil, nil, err }
	if err := os.Chown(base, p.uid, p.gid); err != nil {
		return fail(err)
	}
	p.dir = filepath.Join(base, "data")
	if out, err := p.command("initdb", "-D", p.dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %w\n%s", err, out))
	}
	if p.Port, err = freeTCPPort(); err != nil {
		return fail(err)
	}
	conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\nfsync = off\nmax_connections = 200\n", p.Port, base)
	f, err := os.OpenFile(filepath.Join(p.dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	_, err = f.WriteString(conf)
	f.Close()
	if err != nil {
		return fail(err)
	}
	if err := p.start(); err != nil {
		return fail(err)
	}
	return p, func() {
		_ = p.command("pg_ctl", "-D", p.dir, "-m", "immediate", "-w", "stop").Run()
		os.RemoveAll(base)
	}, nil
}

// For is p used by test t: Start, Stop, Psql and CreateDatabase fail t.
func (p *Postgres) For(t testing.TB) *Postgres {
	q := *p
	q.t = t
	return &q
}

func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	if p.uid != os.Getuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(p.uid), Gid: uint32(p.gid), Groups: []uint32{}}}
	}
	cmd.Dir = "/"
	return cmd
}

// Start starts the server (again) and waits until it accepts connections.
func (p *Postgres) Start() {
	p.t.Helper()
	if err := p.start(); err != nil {
		p.t.Fatal(err)
	}
}

func (p *Postgres) start() error {
	logFile := filepath.Join(filepath.Dir(p.dir), "server.log")
	if out, err := p.command("pg_ctl", "-D", p.dir, "-l", logFile, "-w", "-t", "60", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(logFile)
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return nil
}

// Stop stops the server at once, as a crash or a network partition would
// look to its clients.
func (p *Postgres) Stop() {
	p.t.Helper()
	if out, err := p.command("pg_ctl", "-D", p.dir, "-m", "immediate", "-w", "stop").CombinedOutput(); err != nil {
		p.t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
}

// RequirePasswords makes the server ask every role but the superuser for
// its password over TCP (scram-sha-256), as a production server does; the
// superuser, which Psql and DSN use, stays trusted.
func (p *Postgres) RequirePasswords() {
	p.t.Helper()
	hba := "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(p.dir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(p.dir, "pg_hba.conf"), p.uid, p.gid); err != nil {
		p.t.Fatal(err)
	}
	p.Psql("postgres", "SELECT pg_reload_conf()")
	// The reload is asynchronous: wait until a role is asked for its
	// password (a role that does not exist is, rather than refused).
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := p.command("psql", "-X", "-w", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "cyberos_probe", "-d", "postgres", "-c", "SELECT 1").CombinedOutput()
		if strings.Contains(string(out), "password") {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("pg_hba.conf not in force after a reload: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// DSN is a superuser connection URL to database db.
func (p *Postgres) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// CreateDatabase creates database name and returns a superuser URL to it.
func (p *Postgres) CreateDatabase(name string) string {
	p.t.Helper()
	p.Psql("postgres", "CREATE DATABASE "+name)
	return p.DSN(name)
}

// Psql runs sql in db as the superuser and returns its unaligned output.
func (p *Postgres) Psql(db, sql string) string {
	p.t.Helper()
	out, err := p.command("psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Port), "-U", "postgres", "-d", db, "-c", sql).CombinedOutput()
	if err != nil {
		p.t.Fatalf("psql %q: %v\n%s", sql, err, out)
	}
	return strings.TrimSpace(string(out))
}

func freeTCPPort() (int, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			port := l.Addr().(*net.TCPAddr).Port
			l.Close()
			return port, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no free port: %w", err)
		}
	}
}
