package telemetry

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"sigs.k8s.io/yaml"
)

// synthetic are the series Prometheus itself makes for every target.
var synthetic = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}

// TestExpressionsUseExposedMetrics: every alert rule expression and every
// Grafana dashboard expression (queries and template variables) parses with
// Prometheus's PromQL parser, and every series it names is one the daemon
// exposes (gathered from NewMetrics' registry) or one Prometheus makes.
func TestExpressionsUseExposedMetrics(t *testing.T) {
	exposed := exposedNames(t)
	exprs := map[string]string{} // where → expression
	for _, r := range alertRules(t) {
		exprs["alert "+r.Alert] = r.Expr
	}
	dashboards, _ := filepath.Glob(filepath.Join(repoRoot(t), "packaging", "grafana", "*.json"))
	if len(dashboards) == 0 {
		t.Fatal("no dashboard in packaging/grafana")
	}
	for _, f := range dashboards {
		for where, e := range dashboardExprs(t, f) {
			exprs[filepath.Base(f)+" "+where] = e
		}
	}
	for where, e := range exprs {
		names, err := seriesNames(grafanaVars(e))
		if err != nil {
			t.Errorf("%s: %q: %v", where, e, err)
			continue
		}
		if len(names) == 0 {
			t.Errorf("%s: %q names no series", where, e)
		}
		for _, n := range names {
			if !exposed[n] && !slices.Contains(synthetic, n) {
				t.Errorf("%s: series %s is not one the daemon exposes", where, n)
			}
		}
	}
}

// TestExpressionCheckCatchesUnknownSeries: the check above fails an
// expression naming a series the daemon does not expose, or one that does
// not parse.
func TestExpressionCheckCatchesUnknownSeries(t *testing.T) {
	exposed := exposedNames(t)
	names, err := seriesNames(`rate(cyberos_skill_invocations_totl[5m])`)
	if err != nil || len(names) != 1 || exposed[names[0]] {
		t.Errorf("a misspelt series: names %v, err %v; want one unexposed name", names, err)
	}
	if _, err := seriesNames(`sum by (outcome (rate(x[5m]))`); err == nil {
		t.Error("an expression that does not parse was accepted")
	}
	if !exposed["cyberos_sandbox_start_duration_seconds_bucket"] || !exposed["cyberos_admission_refusals_total"] {
		t.Error("a histogram's _bucket series or a counter of the daemon is missing from the exposed names")
	}
}

// TestRunbooksExist: every alert has a severity Alertmanager routes on and
// a runbook_url whose anchor is a heading of docs/operating.md.
func TestRunbooksExist(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(doc), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	for _, r := range alertRules(t) {
		if s := r.Labels["severity"]; s != "critical" && s != "warning" {
			t.Errorf("%s: severity %q, want critical or warning", r.Alert, s)
		}
		u := r.Annotations["runbook_url"]
		base, anchor, ok := strings.Cut(u, "#")
		if !ok || !strings.HasSuffix(base, "/docs/operating.md") || !anchors[anchor] {
			t.Errorf("%s: runbook_url %q is not a section of docs/operating.md", r.Alert, u)
		}
	}
}

type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "packaging", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string      `json:"name"`
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) == 0 {
		t.Fatal("no rules in alerts.yaml")
	}
	return out
}

// dashboardExprs returns each panel target's expr and each query
// variable's label_values() selector, by panel title or variable name.
func dashboardExprs(t *testing.T, file string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	out := map[string]string{}
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", file, p.Title)
		}
		for _, tg := range p.Targets {
			out["panel "+p.Title+" "+tg.RefID] = tg.Expr
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			_ = json.Unmarshal(v.Query, &q.Query) // the older plain-string form
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("%s: variable %s: query %q is not label_values(selector, label)", file, v.Name, q.Query)
			continue
		}
		out["variable "+v.Name] = m[1]
	}
	return out
}

// grafanaVars replaces Grafana's variables with values PromQL accepts.
func grafanaVars(e string) string {
	return strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "$instance", ".*").Replace(e)
}

// seriesNames parses e and returns the metric name of every selector in it.
func seriesNames(e string) ([]string, error) {
	expr, err := parser.NewParser(parser.Options{}).ParseExpr(e)
	if err != nil {
		return nil, err
	}
	var names []string
	parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return names, nil
}

// exposedNames are the series names a scrape of the daemon can return:
// each family NewMetrics registers (sampled, so labelled ones appear), a
// histogram's as its _bucket, _sum and _count series.
func exposedNames(t *testing.T) map[string]bool {
	t.Helper()
	mfs, err := sampled().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, mf := range mfs {
		n := mf.GetName()
		switch mf.GetType() {
		case dto.MetricType_HISTOGRAM:
			out[n+"_bucket"], out[n+"_sum"], out[n+"_count"] = true, true, true
		case dto.MetricType_SUMMARY:
			out[n], out[n+"_sum"], out[n+"_count"] = true, true, true
		default:
			out[n] = true
		}
	}
	return out
}

// githubAnchor is the fragment GitHub gives a Markdown heading.
func githubAnchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}
