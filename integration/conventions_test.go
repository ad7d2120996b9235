//go:build linux

package integration

import (
	"bytes"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
)

// TestSpansFromStandardOTelVariables: with no otlp_endpoint in the config,
// the daemon exports where OTEL_EXPORTER_OTLP_ENDPOINT says (that variable
// alone is enough), with the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES give, sampled as OTEL_TRACES_SAMPLER says; the
// spans carry the spec's attribute names and their cyberos.* twins, under
// the names docs/operating.md ("Traces") lists.
func TestSpansFromStandardOTelVariables(t *testing.T) {
	t.Run("only the endpoint", func(t *testing.T) {
		byName := spansOfOneInvocation(t)
		checkSpans(t, byName, map[string]string{"service.name": "cyberos-supervisor"})
	})
	t.Run("service name, resource attributes, sampler", func(t *testing.T) {
		byName := spansOfOneInvocation(t,
			"OTEL_SERVICE_NAME=agent-host-7",
			"OTEL_RESOURCE_ATTRIBUTES=deployment.environment=test,host.role=skills",
			"OTEL_TRACES_SAMPLER=always_on")
		checkSpans(t, byName, map[string]string{"service.name": "agent-host-7", "deployment.environment": "test", "host.role": "skills"})
	})
	t.Run("sampler always_off", func(t *testing.T) {
		if byName := spansOfOneInvocation(t, "OTEL_TRACES_SAMPLER=always_off"); len(byName) != 0 {
			t.Errorf("OTEL_TRACES_SAMPLER=always_off, yet spans were exported: %v", keys(byName))
		}
	})
}

// spansOfOneInvocation runs one invocation of a skill that calls tools in a
// daemon whose environment has OTEL_EXPORTER_OTLP_ENDPOINT (a collector in
// this process) and env, and returns the spans the collector received, by
// name, once the daemon has stopped (which flushes them).
func spansOfOneInvocation(t *testing.T, env ...string) map[string]span {
	e := newEnv(t)
	callsSkill(e, "calls")
	col := newOTLPCollector(t)
	d := startDaemonWith(t, e, daemonStart{env: append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.url}, env...)})
	if code, env, raw := d.invoke(map[string]any{"skill_id": "calls"}); code != 200 || env.Outcome != "success" {
		t.Fatalf("calls: %d %s", code, raw)
	}
	d.stop(slow(30 * time.Second))
	byName := map[string]span{}
	for _, s := range col.spans() {
		byName[s.name] = s
	}
	return byName
}

// checkSpans asserts the spans of docs/operating.md ("Traces"), their attributes, and resource.
func checkSpans(t *testing.T, byName map[string]span, resource map[string]string) {
	t.Helper()
	want := map[string][]string{
		"skill.invoke":           {"skill_id", "cyberos.skill.id", "invocation_id", "cyberos.invocation.id", "tenant_id", "cyberos.tenant.id", "outcome", "cyberos.outcome"},
		"skill.broker.tool_call": {"tool_name", "cyberos.tool.name", "duration_ms", "cyberos.duration_ms", "args_size_bytes", "cyberos.tool.args_size_bytes"},
		"skill.tool.read.exec":   nil,
	}
	for name, attrs := range want {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no %s span received; got %v", name, keys(byName))
			continue
		}
		for _, a := range attrs {
			if _, ok := s.attrs[a]; !ok {
				t.Errorf("%s has no %s attribute: %v", name, a, s.attrs)
			}
		}
		for k, v := range resource {
			if s.resource[k] != v {
				t.Errorf("%s resource %v: want %s=%s", name, s.resource, k, v)
			}
		}
	}
	if s := byName["skill.invoke"]; s.attrs["skill_id"] != s.attrs["cyberos.skill.id"] || !strings.Contains(s.attrs["cyberos.skill.id"], "calls") {
		t.Errorf("skill_id %q and cyberos.skill.id %q differ", s.attrs["skill_id"], s.attrs["cyberos.skill.id"])
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestLiveMetricsPromtoolClean: the daemon's /metrics, after invocations
// that fill its labelled series, passes `promtool check metrics`
// (Prometheus's own lint of names, units and types).
func TestLiveMetricsPromtoolClean(t *testing.T) {
	tool := testutil.RequiresTool(t, "CYBEROS_PROMTOOL", filepath.Join(repoRoot, ".cache", "bin", "promtool"), "run scripts/install-deps.sh")
	e := newEnv(t)
	callsSkill(e, "calls")
	d := startDaemon(t, e)
	if code, env, raw := d.invoke(map[string]any{"skill_id": "calls"}); code != 200 || env.Outcome != "success" {
		t.Fatalf("calls: %d %s", code, raw)
	}
	resp, err := http.Get("http://" + d.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(body, []byte(`cyberos_skill_invocations_total{outcome="success",skill_id="calls"} 1`)) {
		t.Fatalf("the invocation is not in /metrics:\n%s", body)
	}
	cmd := exec.Command(tool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	if out, err := cmd.CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("promtool check metrics on the daemon's /metrics: %v\n%s", err, out)
	}
}
