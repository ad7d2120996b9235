package daemon

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
)

// minMCPTokenLen is the shortest bearer token accepted: 32 random bytes'
// worth of hex or base64 is what `openssl rand -hex 32` prints.
const minMCPTokenLen = 32

// ErrMCPToken is a token file that cannot be used: missing, not a regular
// file, not root's, readable by others, or too short.
var ErrMCPToken = errors.New("mcp_http.token_file")

// readMCPToken reads the bearer token from path: a regular file (no
// symlink) owned by root and readable by no one else.
func readMCPToken(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMCPToken, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMCPToken, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrMCPToken, path)
	case !ok || st.Uid != 0:
		return nil, fmt.Errorf("%w: %s must be owned by root", ErrMCPToken, path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%w: %s is mode %04o; make it 0600 or stricter", ErrMCPToken, path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMCPToken, err)
	}
	tok := []byte(strings.TrimSpace(string(b)))
	if len(tok) < minMCPTokenLen {
		return nil, fmt.Errorf("%w: %s holds %d characters; a token must have at least %d (e.g. openssl rand -hex 32)",
			ErrMCPToken, path, len(tok), minMCPTokenLen)
	}
	return tok, nil
}

// requireBearer lets through only requests whose Authorization header is
// "Bearer <token>". Both sides are hashed first, so the comparison takes
// the same time whatever the length of the guess.
func requireBearer(token []byte, next http.Handler) http.Handler {
	want := sha256.Sum256(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="cyberos"`)
			apiErr(w, kindUnauthorized, errors.New("this listener needs the bearer token of mcp_http.token_file"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// listenMCPHTTP opens the loopback listener of mcp_http, serving only
// /mcp behind the bearer token, with the admin socket's connection cap
// and timeouts.
func (d *Daemon) listenMCPHTTP(mcpH http.Handler) error {
	tok, err := readMCPToken(d.cfg.MCPHTTP.TokenFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", d.cfg.MCPHTTP.Listen)
	if err != nil {
		return fmt.Errorf("mcp_http.listen %s: %w", d.cfg.MCPHTTP.Listen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", requireBearer(tok, mcpH))
	var capped *connCap
	d.mcpSrv, capped = adminServer(ln, d.cfg.AdminConnections(), defaultAdminTimeouts, mux, d.log)
	d.mcpLn = capped
	return nil
}

// MCPHTTPAddr is where the loopback MCP listener listens ("" when off).
func (d *Daemon) MCPHTTPAddr() string {
	if d.mcpLn == nil {
		return ""
	}
	return d.mcpLn.Addr().String()
}
