package config

import (
	"fmt"
	"net"
	"path/filepath"
)

// MCPHTTP is the optional loopback TCP listener for MCP clients that speak
// Streamable HTTP but cannot reach the admin socket. The admin socket is
// guarded by its file mode; a TCP port is open to every local user, so each
// request there must carry the bearer token kept in TokenFile.
type MCPHTTP struct {
	// Listen is a loopback host:port; empty (the default) means no listener.
	Listen string `yaml:"listen"`
	// TokenFile is an absolute path to a root-owned file, mode 0600 or
	// stricter, holding the bearer token (at least 32 bytes).
	TokenFile string `yaml:"token_file"`
}

// check validates the section: a loopback address and a token file, or
// neither.
func (m MCPHTTP) check() error {
	bad := func(key, why string, a ...any) error {
		return fmt.Errorf("%w: mcp_http.%s: %s", ErrConfig, key, fmt.Sprintf(why, a...))
	}
	if m.Listen == "" {
		if m.TokenFile != "" {
			return bad("token_file", "set without mcp_http.listen")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(m.Listen)
	if err != nil {
		return bad("listen", "must be host:port, got %q", m.Listen)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return bad("listen", "%q: the port must be a number from 0 to 65535", m.Listen)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return bad("listen", "%q is not a loopback address (127.0.0.0/8, ::1 or localhost): the listener is for clients on this host only", m.Listen)
	}
	if m.TokenFile == "" || !filepath.IsAbs(m.TokenFile) {
		return bad("token_file", "must be an absolute path when mcp_http.listen is set, got %q", m.TokenFile)
	}
	return nil
}
