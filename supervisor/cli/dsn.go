package cli

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"

	"cyberos.dev/fleet"
)

// dsnFlag is a command's PostgreSQL connection string, given as --NAME
// (on the command line, where ps and shell history see a password) or
// --NAME-file (a file holding it). A password may also come from
// PGPASSFILE or ~/.pgpass, which pgx reads when the string has none.
type dsnFlag struct {
	name, dsn, file string
}

// addDSNFlags registers --name and --name-file on fs; what says what the
// connection string is for.
func addDSNFlags(fs *pflag.FlagSet, name, what string) *dsnFlag {
	f := &dsnFlag{name: name}
	fs.StringVar(&f.dsn, name, "", what+" (a PostgreSQL URL or key/value string; a password here is visible in ps: prefer --"+name+"-file or PGPASSFILE)")
	fs.StringVar(&f.file, name+"-file", "", "read --"+name+" from this file (one connection string; the way to give a password)")
	return f
}

// set says whether either flag was given.
func (f *dsnFlag) set() bool { return f.dsn != "" || f.file != "" }

// value is the connection string, read from the file when --NAME-file is
// set; warn (nil: none) hears that a password was given on the command
// line.
func (f *dsnFlag) value(warn io.Writer) (string, error) {
	switch {
	case f.dsn != "" && f.file != "":
		return "", fmt.Errorf("--%s and --%s-file: give one of them", f.name, f.name)
	case f.file != "":
		b, err := os.ReadFile(f.file)
		if err != nil {
			return "", fmt.Errorf("--%s-file: %w", f.name, err)
		}
		dsn := strings.TrimSpace(string(b))
		if dsn == "" {
			return "", fmt.Errorf("--%s-file: %s is empty", f.name, f.file)
		}
		return dsn, nil
	case f.dsn == "":
		return "", fmt.Errorf("--%s or --%s-file is needed", f.name, f.name)
	}
	if cfg, err := fleet.ParseDSN(f.dsn); err == nil && cfg.ConnConfig.Password != "" && warn != nil {
		fmt.Fprintf(warn, "warning: --%s holds a password, which ps and the shell's history show: use --%s-file FILE or PGPASSFILE\n", f.name, f.name)
	}
	return f.dsn, nil
}

// pool is a pool on the connection string (connecting on first use).
func (f *dsnFlag) pool(warn io.Writer) (*pgxpool.Pool, error) {
	dsn, err := f.value(warn)
	if err != nil {
		return nil, err
	}
	pool, err := fleet.NewPool(dsn)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", f.name, err)
	}
	return pool, nil
}
