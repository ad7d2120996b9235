package config

import (
	"errors"
	"strings"
	"testing"
)

// mcp_http takes a loopback address and an absolute token file, or
// neither; anything else names the key.
func TestMCPHTTPConfig(t *testing.T) {
	for _, tc := range []struct {
		m    MCPHTTP
		want string // "" = valid
	}{
		{MCPHTTP{}, ""},
		{MCPHTTP{Listen: "127.0.0.1:8765", TokenFile: "/etc/cyberos/mcp-token"}, ""},
		{MCPHTTP{Listen: "[::1]:0", TokenFile: "/t"}, ""},
		{MCPHTTP{Listen: "localhost:8765", TokenFile: "/t"}, ""},
		{MCPHTTP{Listen: "0.0.0.0:8765", TokenFile: "/t"}, "mcp_http.listen"},
		{MCPHTTP{Listen: "10.0.0.1:8765", TokenFile: "/t"}, "not a loopback address"},
		{MCPHTTP{Listen: ":8765", TokenFile: "/t"}, "not a loopback address"},
		{MCPHTTP{Listen: "example.com:8765", TokenFile: "/t"}, "not a loopback address"},
		{MCPHTTP{Listen: "127.0.0.1", TokenFile: "/t"}, "must be host:port"},
		{MCPHTTP{Listen: "127.0.0.1:99999", TokenFile: "/t"}, "port"},
		{MCPHTTP{Listen: "127.0.0.1:8765"}, "mcp_http.token_file"},
		{MCPHTTP{Listen: "127.0.0.1:8765", TokenFile: "token"}, "absolute path"},
		{MCPHTTP{TokenFile: "/t"}, "set without mcp_http.listen"},
	} {
		err := tc.m.check()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want valid", tc.m, err)
		case tc.want != "" && (err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want ErrConfig naming %q", tc.m, err, tc.want)
		}
	}
}
