package kubernetes_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The image has no registry here to be built against, so these tests
// check what can be checked without one: the Dockerfile builds what the
// DaemonSet runs, from files that exist, into an image holding only them.

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string   // upper case: FROM, COPY, RUN, ...
	args []string // split on white space
}

// stage is one FROM and what follows it.
type stage struct {
	from, name string
	ins        []instruction
}

func dockerfile(t *testing.T) (stages []stage, comments []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var cur strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") {
			comments = append(comments, line)
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		full := strings.Fields(cur.String())
		cur.Reset()
		if len(full) == 0 {
			continue
		}
		in := instruction{cmd: strings.ToUpper(full[0]), args: full[1:]}
		if in.cmd == "FROM" {
			st := stage{from: in.args[0]}
			if len(in.args) == 3 && strings.EqualFold(in.args[1], "AS") {
				st.name = in.args[2]
			}
			stages = append(stages, st)
			continue
		}
		if len(stages) == 0 {
			t.Fatalf("Dockerfile: %s before FROM", in.cmd)
		}
		stages[len(stages)-1].ins = append(stages[len(stages)-1].ins, in)
	}
	if len(stages) < 2 {
		t.Fatalf("Dockerfile: %d stages, want a build stage and a final one", len(stages))
	}
	return stages, comments
}

// TestDockerfileTagIsTheDaemonSets: the tag the Dockerfile says to build
// (its `docker build -t` line and its version label) is the DaemonSet's
// image, and the DaemonSet's command is the image's binary.
func TestDockerfileTagIsTheDaemonSets(t *testing.T) {
	stages, comments := dockerfile(t)
	var tag string
	for _, c := range comments {
		if m := regexp.MustCompile(`docker build -t (\S+) \.$`).FindStringSubmatch(c); m != nil {
			tag = m[1]
		}
	}
	m := load(t)
	c := m.container(t)
	if tag == "" || tag != c.Image {
		t.Errorf("Dockerfile documents `docker build -t %s .`; the DaemonSet runs %s", tag, c.Image)
	}
	final := stages[len(stages)-1]
	var version, entry string
	for _, in := range final.ins {
		switch in.cmd {
		case "LABEL":
			for _, a := range in.args {
				if v, ok := strings.CutPrefix(a, "org.opencontainers.image.version="); ok {
					version = strings.Trim(v, `"`)
				}
			}
		case "ENTRYPOINT":
			entry = strings.Trim(strings.Join(in.args, " "), `[]"`)
		}
	}
	if _, v, _ := strings.Cut(c.Image, ":"); version != v {
		t.Errorf("Dockerfile label org.opencontainers.image.version %q, the DaemonSet's tag %q", version, v)
	}
	if len(c.Command) == 0 || c.Command[0] != entry || entry != binary {
		t.Errorf("DaemonSet command %v, the image's entrypoint %q, want %s", c.Command, entry, binary)
	}
}

// TestDockerfileCopiesWhatExists: every COPY from the build context names
// files that exist and .dockerignore keeps; every COPY from the build
// stage names a binary the Makefile's build target writes (-o) there.
func TestDockerfileCopiesWhatExists(t *testing.T) {
	stages, _ := dockerfile(t)
	ignore, _ := os.ReadFile(filepath.Join("..", "..", ".dockerignore"))
	var ignored []string
	for line := range strings.Lines(string(ignore)) {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			ignored = append(ignored, l)
		}
	}
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	built := map[string]bool{"bin/cyberos": true} // $(BIN)
	for _, m := range regexp.MustCompile(`-o (bin/\S+)`).FindAllStringSubmatch(string(mk), -1) {
		built[m[1]] = true
	}
	names := map[string]stage{}
	for _, st := range stages {
		names[st.name] = st
	}
	for _, st := range stages {
		for _, in := range st.ins {
			if in.cmd != "COPY" {
				continue
			}
			args, from := in.args, ""
			if f, ok := strings.CutPrefix(args[0], "--from="); ok {
				args, from = args[1:], f
			}
			for _, src := range args[:len(args)-1] {
				switch {
				case from == "":
					if src == "." {
						continue
					}
					found, _ := filepath.Glob(filepath.Join("..", "..", src))
					if len(found) == 0 {
						t.Errorf("Dockerfile COPY %s: no such file in the build context", src)
					}
					for _, ig := range ignored {
						if strings.HasPrefix(src, strings.TrimPrefix(ig, "/")) {
							t.Errorf("Dockerfile COPY %s: .dockerignore leaves it out (%s)", src, ig)
						}
					}
				default:
					bst, ok := names[from]
					if !ok {
						t.Errorf("Dockerfile COPY --from=%s: no such stage", from)
						continue
					}
					rel, ok := strings.CutPrefix(src, buildWorkdir(bst)+"/")
					if !ok || !built[rel] {
						t.Errorf("Dockerfile COPY --from=%s %s: not a binary `make build` writes in %s (%v)", from, src, buildWorkdir(bst), built)
					}
				}
			}
		}
	}
}

func buildWorkdir(st stage) string {
	for _, in := range st.ins {
		if in.cmd == "WORKDIR" {
			return in.args[0]
		}
	}
	return ""
}

// TestImageHoldsOnlyWhatRuns: the final stage copies the four binaries
// into the DaemonSet's binary's directory and the seccomp profiles into
// the config's seccomp_profiles_dir, nothing else; the build stage runs
// `make build` without its deps (PostgreSQL, golangci-lint).
func TestImageHoldsOnlyWhatRuns(t *testing.T) {
	stages, _ := dockerfile(t)
	m := load(t)
	cfg := m.supervisorConfig(t)
	final := stages[len(stages)-1]
	copied := map[string][]string{} // destination → sources
	for _, in := range final.ins {
		if in.cmd == "COPY" {
			args := in.args
			if strings.HasPrefix(args[0], "--from=") {
				args = args[1:]
			}
			dst := args[len(args)-1]
			for _, src := range args[:len(args)-1] {
				copied[dst] = append(copied[dst], filepath.Base(src))
			}
		}
	}
	bins := copied[filepath.Dir(binary)+"/"]
	slices.Sort(bins)
	if want := []string{"cyberos", "cyberos-init", "cyberos-spawn", "cyberos-tool"}; !slices.Equal(bins, want) {
		t.Errorf("image %s: %v, want %v", filepath.Dir(binary), bins, want)
	}
	if got := copied[cfg.SeccompProfilesDir+"/"]; !slices.Equal(got, []string{"*.json"}) {
		t.Errorf("image %s (seccomp_profiles_dir): %v, want the profiles (*.json)", cfg.SeccompProfilesDir, got)
	}
	if len(copied) != 2 {
		t.Errorf("final stage copies into %v: want only the binaries and the profiles", copied)
	}
	var makeBuild bool
	for _, in := range stages[0].ins {
		makeBuild = makeBuild || in.cmd == "RUN" && strings.Join(in.args, " ") == "make -o deps build"
	}
	if !makeBuild {
		t.Error("build stage: want `RUN make -o deps build` (the Makefile's flags, without make deps)")
	}
}

// TestFleetComponent: the fleet component replaces the ConfigMap with the
// base's supervisor.yaml plus a fleet section, nothing else changed.
func TestFleetComponent(t *testing.T) {
	m := load(t)
	var k struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Patches    []struct {
			Path string `json:"path"`
		} `json:"patches"`
	}
	b, err := os.ReadFile(filepath.Join("fleet", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(b, &k); err != nil || k.Kind != "Component" || len(k.Patches) != 1 || k.Patches[0].Path != "configmap.yaml" {
		t.Fatalf("fleet/kustomization.yaml: %+v %v, want a Component patching configmap.yaml", k, err)
	}
	f := m.withFleet(t)
	key := filepath.Base(configPath(m.container(t)))
	base, fleet := m.configMap.Data[key], f.configMap.Data[key]
	rest, ok := strings.CutPrefix(fleet, base)
	if !ok || !strings.HasPrefix(rest, "fleet:\n") || strings.Count(rest, "\n") != 3 {
		t.Errorf("fleet/configmap.yaml %s: want the base's text then the fleet section (3 lines), got after the common part:\n%s", key, rest)
	}
}

// withFleet is m with the fleet component's ConfigMap.
func (m *manifests) withFleet(t *testing.T) *manifests {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("fleet", "configmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	obj, err := decodeManifest(b)
	if err != nil {
		t.Fatalf("fleet/configmap.yaml: %v", err)
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok || cm.Name != m.configMap.Name || cm.Namespace != m.configMap.Namespace {
		t.Fatalf("fleet/configmap.yaml: want the ConfigMap %s/%s, got %T", m.configMap.Namespace, m.configMap.Name, obj)
	}
	c := *m
	c.configMap = cm
	return &c
}

// podMonitor is the part of prometheus-operator's PodMonitor used here;
// anything else is an error.
type podMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		JobLabel            string               `json:"jobLabel"`
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			Interval    string `json:"interval"`
			Relabelings []struct {
				SourceLabels []string `json:"sourceLabels"`
				TargetLabel  string   `json:"targetLabel"`
			} `json:"relabelings"`
		} `json:"podMetricsEndpoints"`
	} `json:"spec"`
}

// TestPodMonitor: the optional PodMonitor component selects the
// DaemonSet's pods, scrapes their metrics port at /metrics, and names the
// job cyberos-supervisor, the job the daemon-down alerts select.
func TestPodMonitor(t *testing.T) {
	m := load(t)
	b, err := os.ReadFile(filepath.Join("podmonitor", "podmonitor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pm podMonitor
	if err := decodeStrict(b, &pm); err != nil || pm.APIVersion != "monitoring.coreos.com/v1" || pm.Kind != "PodMonitor" {
		t.Fatalf("podmonitor.yaml: %v (%s %s)", err, pm.APIVersion, pm.Kind)
	}
	if pm.Metadata.Namespace != namespace {
		t.Errorf("PodMonitor namespace %q, want %s", pm.Metadata.Namespace, namespace)
	}
	sel, err := metav1.LabelSelectorAsSelector(&pm.Spec.Selector)
	podLabels := labels.Set(m.daemonSet.Spec.Template.Labels)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("PodMonitor selector %v does not select the DaemonSet's pods %v (%v)", sel, podLabels, err)
	}
	c := m.container(t)
	if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port != metricsPort(c).Name || pm.Spec.PodMetricsEndpoints[0].Path != "/metrics" {
		t.Errorf("PodMonitor endpoints %+v, want port %s path /metrics", pm.Spec.PodMetricsEndpoints, metricsPortName)
	}
	job := podLabels[pm.Spec.JobLabel]
	rules, err := os.ReadFile(filepath.Join("..", "prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if job == "" || !strings.Contains(string(rules), `up{job="`+job+`"}`) {
		t.Errorf("PodMonitor jobLabel %q gives job %q, which the daemon-down alerts do not select", pm.Spec.JobLabel, job)
	}
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	kb, err := os.ReadFile(filepath.Join("podmonitor", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeStrict(kb, &k); err != nil || k.Kind != "Component" || !slices.Equal(k.Resources, []string{"podmonitor.yaml"}) {
		t.Errorf("podmonitor/kustomization.yaml: %+v %v, want a Component with podmonitor.yaml", k, err)
	}
}
