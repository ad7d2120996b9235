package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// --NAME-file is read and trimmed; one of --NAME and --NAME-file, not
// both, not an empty file; --NAME with a password warns, and no message
// holds the password.
func TestDSNFlag(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "dsn")
	os.WriteFile(good, []byte("  host=db password = sekret dbname=x\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, c := range []struct {
		args      []string
		want, err string
		warns     bool
	}{
		{args: []string{"--from-dsn-file", good}, want: "host=db password = sekret dbname=x"},
		{args: []string{"--from-dsn", "postgres://u:sekret@db/x"}, want: "postgres://u:sekret@db/x", warns: true},
		{args: []string{"--from-dsn", "postgres://u@db/x"}, want: "postgres://u@db/x"},
		{args: []string{"--from-dsn", "postgres://u@db/x", "--from-dsn-file", good}, err: "give one of them"},
		{args: []string{"--from-dsn-file", empty}, err: "is empty"},
		{args: []string{"--from-dsn-file", filepath.Join(dir, "missing")}, err: "no such file"},
		{args: nil, err: "--from-dsn or --from-dsn-file is needed"},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f := addDSNFlags(fs, "from-dsn", "the source")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		var warn bytes.Buffer
		got, err := f.value(&warn)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%v: %q %v, want %q", c.args, got, err, c.want)
		case c.warns != strings.Contains(warn.String(), "use --from-dsn-file"):
			t.Errorf("%v: warned %q, want a warning: %v", c.args, warn.String(), c.warns)
		case strings.Contains(warn.String(), "sekret") || (err != nil && strings.Contains(err.Error(), "sekret")):
			t.Errorf("%v: a message holds the password: %q %v", c.args, warn.String(), err)
		}
		if f.set() != (len(c.args) > 0) {
			t.Errorf("%v: set() = %v", c.args, f.set())
		}
	}
}

// `audit repair` takes its source as --from-dsn or --from-dsn-file, one
// of them, and refuses --accept-loss beside either.
func TestAuditRepairFromDSNFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "dsn")
	os.WriteFile(file, []byte("postgres://u@127.0.0.1:1/x\n"), 0o600)
	for _, c := range []struct {
		args []string
		err  string
	}{
		{[]string{"--from-dsn", "postgres://u@db/x", "--from-dsn-file", file}, "give one of them"},
		{[]string{"--from-dsn-file", file, "--accept-loss"}, "--accept-loss and --signing-key are for a repair without it"},
		{[]string{"--host", "host-a"}, "it needs --from-dsn"},
	} {
		cmd := newAuditCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(append([]string{"repair", "--state-dir", dir}, c.args...))
		err := cmd.Execute()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage || !strings.Contains(err.Error(), c.err) {
			t.Errorf("audit repair %v: %v, want a usage error saying %q", c.args, err, c.err)
		}
	}
}
