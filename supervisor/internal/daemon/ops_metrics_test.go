package daemon

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"cyberos.dev/telemetry"
)

// TestAdminRequestsCounted: every admin request is counted by the route
// pattern it matched and its status code; one that matched none by
// "unmatched"; an invocation refused while draining also by its reason.
func TestAdminRequestsCounted(t *testing.T) {
	d := &Daemon{metrics: telemetry.NewMetrics()}
	d.draining.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/invocations", d.handleInvoke)
	mux.HandleFunc("GET /healthz", healthz)
	h := d.countRequests(mux)
	for _, r := range []*http.Request{
		httptest.NewRequest(http.MethodPost, "/v1/invocations", strings.NewReader(`{"skill_id":"notes"}`)),
		httptest.NewRequest(http.MethodGet, "/healthz", nil),
		httptest.NewRequest(http.MethodGet, "/healthz", nil),
		httptest.NewRequest(http.MethodGet, "/v1/nothing", nil),
	} {
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	for _, c := range []struct {
		route, code string
		want        float64
	}{{"POST /v1/invocations", "503", 1}, {"GET /healthz", "200", 2}, {"unmatched", "404", 1}} {
		if got := testutil.ToFloat64(d.metrics.AdminRequests.WithLabelValues(c.route, c.code)); got != c.want {
			t.Errorf("cyberos_admin_requests_total{route=%q,code=%q} = %v, want %v", c.route, c.code, got, c.want)
		}
	}
	if got := testutil.ToFloat64(d.metrics.AdmissionRefused.WithLabelValues(telemetry.RefusedShuttingDown)); got != 1 {
		t.Errorf("cyberos_admission_refusals_total{reason=shutting_down} = %v, want 1", got)
	}
}

// TestStatusWriterFlushes: the counting wrapper keeps the streams (tail,
// events) flushing.
func TestStatusWriterFlushes(t *testing.T) {
	rec := httptest.NewRecorder()
	var w http.ResponseWriter = &statusWriter{ResponseWriter: rec}
	f, ok := w.(http.Flusher)
	if !ok {
		t.Fatal("statusWriter is not an http.Flusher")
	}
	_, _ = w.Write([]byte("x"))
	f.Flush()
	if !rec.Flushed {
		t.Error("Flush did not reach the underlying writer")
	}
}
