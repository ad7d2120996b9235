package fleet

import (
	"errors"
	"strings"
	"testing"
)

// dsnSpellings are the ways a connection string holds a password, each a
// template: {host}, {port} and {sslmode} are filled in by the error kind.
// Every password holds "sekret", which nothing else in an output does.
var dsnSpellings = map[string]string{
	"url":           "postgres://cyberos:Zsekret1@{host}:{port}/fleet?sslmode={sslmode}",
	"url-encoded":   "postgres://cyberos:p%40sekret%20two%2F@{host}:{port}/fleet?sslmode={sslmode}",
	"url-query":     "postgres://cyberos@{host}:{port}/fleet?sslmode={sslmode}&password=sekret3",
	"kv":            "host={host} port={port} user=cyberos password=sekret4 dbname=fleet sslmode={sslmode}",
	"kv-spaces":     "host={host} port={port} user=cyberos password = sekret5 dbname=fleet sslmode={sslmode}",
	"kv-quoted":     "host = {host} port = {port} user = cyberos password = 'sekret six here' dbname = fleet sslmode = {sslmode}",
	"kv-quoted-esc": `host={host} port={port} user=cyberos password='it\'s sekret7' dbname=fleet sslmode={sslmode}`,
}

func fillDSN(tmpl, host, port, sslmode string) string {
	return strings.NewReplacer("{host}", host, "{port}", port, "{sslmode}", sslmode).Replace(tmpl)
}

// A connection string that does not parse is refused with a message that
// names the problem and holds no part of the password, however it is
// spelt (pgx's own message quotes the string, redacting only some
// spellings).
func TestParseErrorsNeverEchoThePassword(t *testing.T) {
	kinds := map[string][3]string{
		"bad port":    {"127.0.0.1", "5x432", "disable"},
		"bad sslmode": {"127.0.0.1", "5432", "bogus"},
		"bad host":    {"db host", "5432", "disable"},
	}
	for sp, tmpl := range dsnSpellings {
		for kind, f := range kinds {
			dsn := fillDSN(tmpl, f[0], f[1], f[2])
			_, err := NewPool(dsn)
			if kind == "bad host" && err == nil {
				continue // a key/value host may hold a space: it fails at connect
			}
			if err == nil {
				t.Errorf("%s, %s: %q parsed", sp, kind, dsn)
				continue
			}
			if strings.Contains(strings.ToLower(err.Error()), "sekret") {
				t.Errorf("%s, %s: the error holds the password: %v", sp, kind, err)
			}
			if !errors.Is(err, ErrDSN) {
				t.Errorf("%s, %s: %v, want ErrDSN", sp, kind, err)
			}
		}
	}
}

// The message still says what is wrong.
func TestParseErrorSaysWhatIsWrong(t *testing.T) {
	for dsn, want := range map[string]string{
		"host=h port=5x432 password = sekret":            "invalid port",
		"postgres://u:sekret@h:5x432/db":                 "invalid port",
		"host=h sslmode=bogus password='sekret'":         "sslmode is invalid",
		"host=h password='sekret":                        "unterminated quoted string",
		"postgres://u:sek%zzret@h/db?sslmode=disable":    "invalid percent-encoded token",
		"postgres://u@h/db?password=sekret&sslmode=nope": "sslmode is invalid",
	} {
		_, err := ParseDSN(dsn)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "sekret") {
			t.Errorf("%q: %v, want it to say %q and hold no password", dsn, err, want)
		}
	}
}
