package telemetry

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"cyberos.dev/internal/testutil"
)

// promtool is Prometheus's own checker, built by scripts/install-deps.sh
// into .cache/bin (CYBEROS_PROMTOOL overrides).
func promtool(t *testing.T) string {
	t.Helper()
	return testutil.RequiresTool(t, "CYBEROS_PROMTOOL", filepath.Join(repoRoot(t), ".cache", "bin", "promtool"), "run scripts/install-deps.sh")
}

func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// TestAlertRules: the shipped rules load (promtool check rules), and each
// alert fires, with its severity, once synthetic series cross its
// threshold and not before (promtool test rules): the spec's sev-3 alarm
// on an audit emit p95 over 50 ms among them.
func TestAlertRules(t *testing.T) {
	tool := promtool(t)
	dir := filepath.Join(repoRoot(t), "packaging", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(tool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestMetricsPromtoolClean: what /metrics serves, every series with a
// sample, passes `promtool check metrics`.
func TestMetricsPromtoolClean(t *testing.T) {
	tool := promtool(t)
	m := sampled()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: m.Handler()}
	go srv.Serve(ln)
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte("cyberos_build_info")) {
		t.Fatalf("no cyberos_build_info in /metrics:\n%s", body)
	}
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestMetricsOpenMetricsWhenAsked: a scraper that asks for OpenMetrics
// gets it (its content type, the # EOF end); others get the text format.
func TestMetricsOpenMetricsWhenAsked(t *testing.T) {
	m := NewMetrics()
	for _, c := range []struct{ accept, wantType, wantEnd string }{
		{"application/openmetrics-text;version=1.0.0", "application/openmetrics-text", "# EOF\n"},
		{"", "text/plain", ""},
	} {
		req, _ := http.NewRequest("GET", "/metrics", nil)
		if c.accept != "" {
			req.Header.Set("Accept", c.accept)
		}
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, req)
		if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, c.wantType) {
			t.Errorf("Accept %q: Content-Type %q, want %s", c.accept, ct, c.wantType)
		}
		if !strings.HasSuffix(rec.Body.String(), c.wantEnd) || (c.wantEnd == "" && strings.Contains(rec.Body.String(), "# EOF")) {
			t.Errorf("Accept %q: body ends %q", c.accept, rec.Body.String()[max(0, rec.Body.Len()-40):])
		}
	}
}
