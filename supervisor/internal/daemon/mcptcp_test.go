package daemon

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cyberos.dev/supervisor/config"
)

// The token file must be root's, private, a regular file and long enough.
func TestReadMCPToken(t *testing.T) {
	dir := t.TempDir()
	good := strings.Repeat("ab", 32)
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok", good+"\n", 0o600)
	if os.Geteuid() == 0 { // the file is root's only when the test is
		tok, err := readMCPToken(ok)
		if err != nil || string(tok) != good {
			t.Fatalf("readMCPToken(good) = %q, %v", tok, err)
		}
	} else if _, err := readMCPToken(ok); !errors.Is(err, ErrMCPToken) || !strings.Contains(err.Error(), "owned by root") {
		t.Fatalf("a token file not root's: %v, want refused", err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]string{
		"group-readable": write("g", good, 0o640),
		"world-readable": write("w", good, 0o644),
		"too short":      write("short", "secret", 0o600),
		"symlink":        link,
		"directory":      dir,
		"missing":        filepath.Join(dir, "none"),
	} {
		if _, err := readMCPToken(p); !errors.Is(err, ErrMCPToken) {
			t.Errorf("%s: %v, want ErrMCPToken", name, err)
		}
	}
}

// Only a request with the exact bearer token reaches /mcp.
func TestRequireBearer(t *testing.T) {
	tok := []byte(strings.Repeat("x", 40))
	reached := 0
	srv := httptest.NewServer(requireBearer(tok, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached++ })))
	defer srv.Close()
	for _, tc := range []struct {
		auth string
		code int
	}{
		{"", http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"Bearer " + string(tok[:39]), http.StatusUnauthorized},
		{"Bearer " + string(tok) + "x", http.StatusUnauthorized},
		{"Basic " + string(tok), http.StatusUnauthorized},
		{"bearer " + string(tok), http.StatusUnauthorized},
		{"Bearer " + string(tok), http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", nil)
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("Authorization %q: %d, want %d", tc.auth, resp.StatusCode, tc.code)
		}
		if tc.code == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: 401 without WWW-Authenticate", tc.auth)
		}
	}
	if reached != 1 {
		t.Errorf("handler reached %d times, want once", reached)
	}
}

// The token file is reserved from skills' file tools like the signing key.
func TestMCPTokenFileReserved(t *testing.T) {
	c := config.Default()
	c.MCPHTTP = config.MCPHTTP{Listen: "127.0.0.1:8765", TokenFile: "/srv/secrets/mcp-token"}
	for _, p := range c.ReservedPaths("") {
		if p == c.MCPHTTP.TokenFile {
			return
		}
	}
	t.Fatalf("ReservedPaths %v lacks mcp_http.token_file", c.ReservedPaths(""))
}
