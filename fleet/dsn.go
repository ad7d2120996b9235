package fleet

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrDSN: a connection string pgx cannot parse. Its message names the
// problem, never the string.
var ErrDSN = errors.New("fleet: not a valid PostgreSQL connection string")

// ParseDSN parses a connection string (a URL or libpq's key/value form)
// with pgx's parser. pgx's own error quotes the whole string and redacts
// only the password spellings it recognises (not `password = X`), so the
// error returned here is pgx's without the string, and with every
// password the string may hold masked from what is left.
func ParseDSN(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err == nil {
		return cfg, nil
	}
	return nil, fmt.Errorf("%w: %s", ErrDSN, Redact(parseProblem(err), dsn))
}

// parseProblem is pgx's parse error without the connection string.
func parseProblem(err error) string {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return err.Error() // pgxpool's own settings: "cannot parse pool_max_conns: …"
	}
	bare := *pce
	bare.ConnString = ""
	msg := strings.TrimPrefix(bare.Error(), "cannot parse ``: ")
	// net/url's error quotes the whole URL, userinfo included: keep what
	// it says is wrong.
	var ue *url.Error
	if inner := errors.Unwrap(pce); inner != nil && errors.As(inner, &ue) {
		msg = strings.Replace(msg, inner.Error(), ue.Err.Error(), 1)
	}
	return msg
}

var (
	kvPassword    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)password\s*=\s*(?:'((?:[^'\\]|\\.)*)'?|(\S+))`) })
	urlUserinfo   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)@`) })
	queryPassword = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)[?&]password=([^&#]*)`) })
)

// Redact masks in msg every password dsn may hold, in each spelling libpq
// reads: key/value (`password=X`, `password = X`, quoted, escaped), the
// URL's userinfo and its `?password=` parameter, raw and %-decoded. It
// reads dsn itself, leniently, so it masks what a string too broken to
// parse holds too.
func Redact(msg, dsn string) string {
	var secrets []string
	add := func(s string) {
		if s != "" {
			secrets = append(secrets, s)
			if u, err := url.PathUnescape(s); err == nil && u != s {
				secrets = append(secrets, u)
			}
			if u, err := url.QueryUnescape(s); err == nil && u != s {
				secrets = append(secrets, u)
			}
			if u := strings.NewReplacer(`\'`, `'`, `\\`, `\`).Replace(s); u != s {
				secrets = append(secrets, u)
			}
		}
	}
	for _, m := range kvPassword().FindAllStringSubmatch(dsn, -1) {
		add(m[1])
		add(m[2])
	}
	if m := urlUserinfo().FindStringSubmatch(dsn); m != nil {
		if _, pw, ok := strings.Cut(m[1], ":"); ok {
			add(pw)
		}
	}
	for _, m := range queryPassword().FindAllStringSubmatch(dsn, -1) {
		add(m[1])
	}
	// The longest first: a secret may hold another (raw and decoded).
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}
