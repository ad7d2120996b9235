package kubernetes_test

// The manifests are checked without a cluster: each file is decoded
// strictly into its k8s.io/api type, and the DaemonSet is checked against
// the daemon config its ConfigMap holds (docs/kubernetes.md).

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"cyberos.dev/supervisor/config"
)

const (
	namespace       = "cyberos-system"
	image           = "ghcr.io/cyberos/supervisor:0.1.0"
	binary          = "/usr/local/bin/cyberos"
	hostIDEnv       = "CYBEROS_HOST_ID"
	metricsPortName = "metrics"
	// timeoutPathMax is how long the timeout path may take after
	// shutdown_grace (SIGTERM, SIGKILL after at most 10s).
	timeoutPathMax = 10 * time.Second
	// exampleSecret is an example kustomization.yaml must leave out.
	exampleSecret = "secret.example.yaml"
	kustomizeFile = "kustomization.yaml"
)

// kustomization is the part of kustomize's Kustomization these files use;
// any other field is an error.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// supervisorConfig is the daemon config keys the ConfigMap sets (the
// daemon's own parser, supervisor/config.Config, is strict too).
type supervisorConfig struct {
	Version            int    `json:"version"`
	SkillsDir          string `json:"skills_dir"`
	StateDir           string `json:"state_dir"`
	SocketDir          string `json:"socket_dir"`
	AdminSocket        string `json:"admin_socket"`
	AdminGroup         string `json:"admin_group"`
	MetricsListen      string `json:"metrics_listen"`
	SeccompProfilesDir string `json:"seccomp_profiles_dir"`
	MaxConcurrent      int    `json:"max_concurrent"`
	ShutdownGrace      string `json:"shutdown_grace"`
	CgroupPlacement    string `json:"cgroup_placement"`
	Audit              struct {
		SigningKey string `json:"signing_key"`
	} `json:"audit"`
	Fleet struct {
		PostgresDSNFile string  `json:"postgres_dsn_file"`
		HostID          *string `json:"host_id"`
	} `json:"fleet"`
}

// decodeStrict decodes YAML into v: duplicate keys, unknown fields and
// fields in the wrong case are errors. sigs.k8s.io/yaml's UnmarshalStrict
// alone would not do: encoding/json matches field names case-insensitively,
// so `hostPid: true` would set hostPID. sigs.k8s.io/json is the decoder the
// API server uses.
func decodeStrict(y []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(y)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// decodeManifest decodes one file's single object into the type its
// apiVersion and kind name.
func decodeManifest(y []byte) (any, error) {
	if err := oneDocument(y); err != nil {
		return nil, err
	}
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(y, &tm); err != nil {
		return nil, err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Namespace":
		obj = &corev1.Namespace{}
	case "v1 ServiceAccount":
		obj = &corev1.ServiceAccount{}
	case "v1 ConfigMap":
		obj = &corev1.ConfigMap{}
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "apps/v1 DaemonSet":
		obj = &appsv1.DaemonSet{}
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		obj = &kustomization{}
	default:
		return nil, fmt.Errorf("apiVersion %q kind %q: not a kind these manifests use", tm.APIVersion, tm.Kind)
	}
	if err := decodeStrict(y, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// oneDocument refuses a second YAML document, which decoding would
// silently drop.
func oneDocument(y []byte) error {
	content := false
	for line := range strings.Lines(string(y)) {
		line = strings.TrimRight(line, " \t\r\n")
		switch {
		case line == "---" || strings.HasPrefix(line, "--- "):
			if content {
				return errors.New("more than one YAML document: one object per file")
			}
		case line != "" && !strings.HasPrefix(line, "#"):
			content = true
		}
	}
	return nil
}

// manifests are the decoded files of this directory.
type manifests struct {
	files     []string
	raw       map[string][]byte
	namespace *corev1.Namespace
	account   *corev1.ServiceAccount
	configMap *corev1.ConfigMap
	secret    *corev1.Secret
	daemonSet *appsv1.DaemonSet
	kustomize *kustomization
}

func load(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	yml, _ := filepath.Glob("*.yml")
	if len(yml) > 0 {
		t.Fatalf("%v: name manifests *.yaml", yml)
	}
	m := &manifests{files: files, raw: map[string][]byte{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m.raw[f] = b
		obj, err := decodeManifest(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var dup bool
		switch o := obj.(type) {
		case *corev1.Namespace:
			dup, m.namespace = m.namespace != nil, o
		case *corev1.ServiceAccount:
			dup, m.account = m.account != nil, o
		case *corev1.ConfigMap:
			dup, m.configMap = m.configMap != nil, o
		case *corev1.Secret:
			dup, m.secret = m.secret != nil, o
		case *appsv1.DaemonSet:
			dup, m.daemonSet = m.daemonSet != nil, o
		case *kustomization:
			dup, m.kustomize = m.kustomize != nil, o
		}
		if dup {
			t.Fatalf("%s: a second %T", f, obj)
		}
	}
	for name, missing := range map[string]bool{
		"Namespace": m.namespace == nil, "ServiceAccount": m.account == nil, "ConfigMap": m.configMap == nil,
		"Secret": m.secret == nil, "DaemonSet": m.daemonSet == nil, "Kustomization": m.kustomize == nil,
	} {
		if missing {
			t.Fatalf("no %s among %v", name, files)
		}
	}
	return m
}

// pod is the DaemonSet's pod template spec; container its one container.
func (m *manifests) pod() *corev1.PodSpec { return &m.daemonSet.Spec.Template.Spec }

func (m *manifests) container(t *testing.T) *corev1.Container {
	t.Helper()
	if n := len(m.pod().Containers); n != 1 {
		t.Fatalf("DaemonSet spec.template.spec.containers: want 1 container, got %d", n)
	}
	return &m.pod().Containers[0]
}

func (m *manifests) volume(name string) *corev1.Volume {
	for i, v := range m.pod().Volumes {
		if v.Name == name {
			return &m.pod().Volumes[i]
		}
	}
	return nil
}

// mountAt is the container's mount at exactly path, and its volume.
func (m *manifests) mountAt(c *corev1.Container, path string) (*corev1.VolumeMount, *corev1.Volume) {
	for i, vm := range c.VolumeMounts {
		if filepath.Clean(vm.MountPath) == filepath.Clean(path) {
			return &c.VolumeMounts[i], m.volume(vm.Name)
		}
	}
	return nil, nil
}

// mountOf is the container's mount path is at or under, the deepest one.
func (m *manifests) mountOf(c *corev1.Container, path string) (*corev1.VolumeMount, *corev1.Volume) {
	var best *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if within(path, vm.MountPath) && (best == nil || len(vm.MountPath) > len(best.MountPath)) {
			best = &c.VolumeMounts[i]
		}
	}
	if best == nil {
		return nil, nil
	}
	return best, m.volume(best.Name)
}

// show prints what p points to, or "unset".
func show[T any](p *T) string {
	if p == nil {
		return "unset"
	}
	if s, ok := any(p).(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprint(*p)
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// configPath is the value of --config in the container's command line.
func configPath(c *corev1.Container) string {
	argv := append(slices.Clone(c.Command), c.Args...)
	for i, a := range argv {
		if a == "--config" && i+1 < len(argv) {
			return argv[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
	}
	return ""
}

// metricsPort is the container port named metrics.
func metricsPort(c *corev1.Container) *corev1.ContainerPort {
	for i, p := range c.Ports {
		if p.Name == metricsPortName {
			return &c.Ports[i]
		}
	}
	return nil
}

// supervisorConfig decodes the ConfigMap entry --config names.
func (m *manifests) supervisorConfig(t *testing.T) supervisorConfig {
	t.Helper()
	c := m.container(t)
	path := configPath(c)
	if path == "" {
		t.Fatalf("DaemonSet container %s: no --config in command %v args %v", c.Name, c.Command, c.Args)
	}
	vm, vol := m.mountAt(c, filepath.Dir(path))
	if vm == nil || vol == nil || vol.ConfigMap == nil {
		t.Fatalf("DaemonSet: --config %s: its directory %s is not where a ConfigMap volume is mounted", path, filepath.Dir(path))
	}
	if vol.ConfigMap.Name != m.configMap.Name {
		t.Errorf("DaemonSet volume %s: configMap.name %q, want the ConfigMap %q", vol.Name, vol.ConfigMap.Name, m.configMap.Name)
	}
	if vm.SubPath != "" || !vm.ReadOnly {
		t.Errorf("DaemonSet volumeMount %s: want the whole ConfigMap read-only (readOnly: true, no subPath), got readOnly %v subPath %q", vm.Name, vm.ReadOnly, vm.SubPath)
	}
	doc, ok := m.configMap.Data[filepath.Base(path)]
	if !ok {
		t.Fatalf("ConfigMap %s: no data key %q, which --config %s reads", m.configMap.Name, filepath.Base(path), path)
	}
	var cfg supervisorConfig
	if err := decodeStrict([]byte(doc), &cfg); err != nil {
		t.Fatalf("ConfigMap %s data %s: %v (a key this test does not know: add it to supervisorConfig)", m.configMap.Name, filepath.Base(path), err)
	}
	return cfg
}

func TestManifestsDecodeStrictly(t *testing.T) {
	m := load(t)
	if m.namespace.Name != namespace {
		t.Errorf("Namespace metadata.name = %q, want %q", m.namespace.Name, namespace)
	}
	for what, ns := range map[string]string{
		"ServiceAccount " + m.account.Name: m.account.Namespace, "ConfigMap " + m.configMap.Name: m.configMap.Namespace,
		"Secret " + m.secret.Name: m.secret.Namespace, "DaemonSet " + m.daemonSet.Name: m.daemonSet.Namespace,
	} {
		if ns != m.namespace.Name {
			t.Errorf("%s: metadata.namespace = %q, want %q", what, ns, m.namespace.Name)
		}
	}
	if a := m.account.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("ServiceAccount %s: automountServiceAccountToken must be false (the daemon never talks to the API server)", m.account.Name)
	}
	if _, ok := m.secret.StringData["postgres-dsn"]; !ok || m.secret.Type != corev1.SecretTypeOpaque {
		t.Errorf("Secret %s (%s): want type Opaque with stringData postgres-dsn", m.secret.Name, exampleSecret)
	}
}

func TestKustomization(t *testing.T) {
	m := load(t)
	k := m.kustomize
	seen := map[string]bool{}
	for _, r := range k.Resources {
		if seen[r] {
			t.Errorf("%s resources: %s listed twice", kustomizeFile, r)
		}
		seen[r] = true
		if _, ok := m.raw[r]; !ok {
			t.Errorf("%s resources: %s is not a manifest in this directory", kustomizeFile, r)
		}
	}
	for _, f := range m.files {
		switch {
		case f == kustomizeFile:
		case f == exampleSecret && seen[f]:
			t.Errorf("%s resources: %s is an example; operators create the real Secret", kustomizeFile, f)
		case f != exampleSecret && !seen[f]:
			t.Errorf("%s resources: %s is missing", kustomizeFile, f)
		}
	}
}

func TestDaemonSet(t *testing.T) {
	m := load(t)
	ds, pod, c := m.daemonSet, m.pod(), m.container(t)

	// Explicit, not merely the zero value: a reviewer sees the choice.
	var raw struct {
		Spec struct {
			Template struct {
				Spec map[string]any `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(m.raw["daemonset.yaml"], &raw); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"hostPID", "hostNetwork", "hostIPC"} {
		if v, ok := raw.Spec.Template.Spec[key]; !ok || v != false {
			t.Errorf("DaemonSet spec.template.spec.%s: want explicitly false, got %v (set: %v)", key, v, ok)
		}
	}
	if pod.HostPID || pod.HostNetwork || pod.HostIPC {
		t.Errorf("DaemonSet spec.template.spec: hostPID %v hostNetwork %v hostIPC %v, want all false", pod.HostPID, pod.HostNetwork, pod.HostIPC)
	}

	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("DaemonSet spec.selector %v does not select spec.template.metadata.labels %v (err %v)", ds.Spec.Selector, ds.Spec.Template.Labels, err)
	}
	if pod.ServiceAccountName != m.account.Name {
		t.Errorf("DaemonSet spec.template.spec.serviceAccountName = %q, want %q", pod.ServiceAccountName, m.account.Name)
	}
	if a := pod.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("DaemonSet spec.template.spec.automountServiceAccountToken must be false")
	}
	if pod.PriorityClassName != "system-node-critical" {
		t.Errorf("DaemonSet spec.template.spec.priorityClassName = %q, want system-node-critical", pod.PriorityClassName)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g != 60 {
		t.Errorf("DaemonSet spec.template.spec.terminationGracePeriodSeconds = %s, want 60", show(g))
	}
	if !slices.ContainsFunc(pod.Tolerations, func(tl corev1.Toleration) bool {
		return tl.Operator == corev1.TolerationOpExists && tl.Key == "" && tl.Effect == ""
	}) {
		t.Errorf("DaemonSet spec.template.spec.tolerations %v: want {operator: Exists} (every node)", pod.Tolerations)
	}

	us := ds.Spec.UpdateStrategy
	if us.Type != appsv1.RollingUpdateDaemonSetStrategyType || us.RollingUpdate == nil {
		t.Errorf("DaemonSet spec.updateStrategy: want type RollingUpdate with rollingUpdate, got %+v", us)
	} else {
		if mu := us.RollingUpdate.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) {
			t.Errorf("DaemonSet spec.updateStrategy.rollingUpdate.maxUnavailable = %s, want 1", show(mu))
		}
		if ms := us.RollingUpdate.MaxSurge; ms != nil && *ms != intstr.FromInt32(0) {
			t.Errorf("DaemonSet spec.updateStrategy.rollingUpdate.maxSurge = %v, want 0 (two daemons would share a node's state dir and admin socket)", show(ms))
		}
	}

	if c.Image != image {
		t.Errorf("DaemonSet container %s: image = %q, want %q", c.Name, c.Image, image)
	}
	argv := append(slices.Clone(c.Command), c.Args...)
	if len(argv) < 3 || argv[0] != binary || argv[1] != "supervisor" || argv[2] != "serve" {
		t.Errorf("DaemonSet container %s: command+args %v, want %s supervisor serve --config ...", c.Name, argv, binary)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("DaemonSet container %s: securityContext.privileged must be true (namespaces, cgroups, mounts, seccomp)", c.Name)
	}
	uid := (*int64)(nil)
	if pod.SecurityContext != nil {
		uid = pod.SecurityContext.RunAsUser
	}
	if sc != nil && sc.RunAsUser != nil {
		uid = sc.RunAsUser
	}
	if uid == nil || *uid != 0 {
		t.Errorf("DaemonSet container %s: securityContext.runAsUser = %s, want 0", c.Name, show(uid))
	}

	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == hostIDEnv && e.Value == "" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Errorf("DaemonSet container %s: env %s must come from fieldRef spec.nodeName (a stable host id per node)", c.Name, hostIDEnv)
	}

	r := c.Resources
	if r.Requests.Cpu().IsZero() || r.Requests.Memory().IsZero() {
		t.Errorf("DaemonSet container %s: resources.requests must set cpu and memory, got %v", c.Name, r.Requests)
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if q, ok := r.Limits[res]; ok {
			t.Errorf("DaemonSet container %s: resources.limits.%s = %s: the sandboxes' cgroups are below the daemon's, a limit would cap them all", c.Name, res, q.String())
		}
	}

	p := metricsPort(c)
	if p == nil || p.Protocol != corev1.ProtocolTCP {
		t.Fatalf("DaemonSet container %s: no TCP port named %s", c.Name, metricsPortName)
	}
	for name, probe := range map[string]*corev1.Probe{"livenessProbe": c.LivenessProbe, "readinessProbe": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/healthz" || probe.HTTPGet.Port != intstr.FromString(metricsPortName) {
			t.Errorf("DaemonSet container %s: %s must be httpGet /healthz on port %q, got %+v", c.Name, name, metricsPortName, probe)
		}
	}
	ann := ds.Spec.Template.Annotations
	for k, want := range map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   strconv.Itoa(int(p.ContainerPort)),
		"prometheus.io/path":   "/metrics",
	} {
		if ann[k] != want {
			t.Errorf("DaemonSet spec.template.metadata.annotations[%s] = %q, want %q", k, ann[k], want)
		}
	}

	mounted := map[string]bool{}
	for _, vm := range c.VolumeMounts {
		mounted[vm.Name] = true
		if m.volume(vm.Name) == nil {
			t.Errorf("DaemonSet container %s: volumeMount %s names no volume", c.Name, vm.Name)
		}
	}
	for _, v := range pod.Volumes {
		if !mounted[v.Name] {
			t.Errorf("DaemonSet volume %s is not mounted", v.Name)
		}
	}

	// The layout the issue asks for, path by path.
	hostPaths := []struct {
		path     string
		typ      corev1.HostPathType
		readOnly bool
	}{
		{"/run/cyberos-admin", corev1.HostPathDirectoryOrCreate, false},
		{"/var/lib/cyberos", corev1.HostPathDirectoryOrCreate, false},
		{"/opt/cyberos/skills", corev1.HostPathDirectory, true},
	}
	for _, hp := range hostPaths {
		vm, v := m.mountAt(c, hp.path)
		switch {
		case vm == nil || v == nil || v.HostPath == nil:
			t.Errorf("DaemonSet: want a hostPath volume mounted at %s", hp.path)
		case v.HostPath.Path != hp.path || v.HostPath.Type == nil || *v.HostPath.Type != hp.typ || vm.ReadOnly != hp.readOnly:
			t.Errorf("DaemonSet volume %s: hostPath %s type %v mounted readOnly %v, want hostPath %s type %s readOnly %v",
				v.Name, v.HostPath.Path, show(v.HostPath.Type), vm.ReadOnly, hp.path, hp.typ, hp.readOnly)
		}
	}
	if vm, v := m.mountAt(c, "/run/cyberos"); vm == nil || v == nil || v.EmptyDir == nil || v.EmptyDir.Medium != corev1.StorageMediumMemory {
		t.Errorf("DaemonSet: want an emptyDir (medium: Memory) at /run/cyberos")
	}
	vm, v := m.mountAt(c, "/etc/cyberos/fleet")
	switch {
	case vm == nil || v == nil || v.Secret == nil:
		t.Errorf("DaemonSet: want the Secret %s mounted at /etc/cyberos/fleet", m.secret.Name)
	default:
		if v.Secret.SecretName != m.secret.Name {
			t.Errorf("DaemonSet volume %s: secret.secretName = %q, want %q", v.Name, v.Secret.SecretName, m.secret.Name)
		}
		if dm := v.Secret.DefaultMode; dm == nil || *dm != 0o400 {
			got := "unset"
			if dm != nil {
				got = fmt.Sprintf("%#o", *dm)
			}
			t.Errorf("DaemonSet volume %s: secret.defaultMode = %s, want 0400", v.Name, got)
		}
		if !vm.ReadOnly {
			t.Errorf("DaemonSet volumeMount %s: readOnly must be true", vm.Name)
		}
		// Without a fleet there is no Secret: the pod must still start.
		if o := v.Secret.Optional; o == nil || !*o {
			t.Errorf("DaemonSet volume %s: secret.optional = %s, want true", v.Name, show(o))
		}
	}
}

// TestConfigLoadsInTheDaemon: the ConfigMap's supervisor.yaml passes the
// daemon's own strict loader and its signing-key rule, as serve reads it.
func TestConfigLoadsInTheDaemon(t *testing.T) {
	m := load(t)
	m.supervisorConfig(t) // --config names a key of the ConfigMap
	path := configPath(m.container(t))
	p := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(p, []byte(m.configMap.Data[filepath.Base(path)]), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatalf("the daemon refuses the ConfigMap's config: %v", err)
	}
	if err := cfg.CheckSigningKeyPath(path); err != nil {
		t.Errorf("the daemon refuses the ConfigMap's signing key: %v", err)
	}
	if cfg.Fleet.Enabled() {
		t.Errorf("fleet: the base config must run without one (the Secret is optional), got %+v", cfg.Fleet)
	}
	// With the fleet component: the DSN from the Secret's file.
	fp := filepath.Join(t.TempDir(), filepath.Base(path))
	if err := os.WriteFile(fp, []byte(m.withFleet(t).configMap.Data[filepath.Base(path)]), 0o600); err != nil {
		t.Fatal(err)
	}
	fcfg, err := config.Load(fp)
	if err != nil {
		t.Fatalf("the daemon refuses the fleet component's config: %v", err)
	}
	if !fcfg.Fleet.Enabled() || fcfg.Fleet.PostgresDSNFile == "" {
		t.Errorf("fleet component: want the DSN from the Secret's file, got %+v", fcfg.Fleet)
	}
}

// TestConfigAgreesWithDaemonSet checks the daemon config against the
// pod: what the daemon reads and writes is where the DaemonSet put it.
func TestConfigAgreesWithDaemonSet(t *testing.T) {
	m := load(t)
	c := m.container(t)
	cfg := m.supervisorConfig(t)

	if cfg.Version != 1 {
		t.Errorf("supervisor.yaml version = %d, want 1", cfg.Version)
	}
	if cfg.CgroupPlacement != "auto" {
		t.Errorf("supervisor.yaml cgroup_placement = %q, want auto", cfg.CgroupPlacement)
	}
	if _, err := strconv.Atoi(cfg.AdminGroup); cfg.AdminGroup != "" && err != nil {
		t.Errorf("supervisor.yaml admin_group = %q: want a numeric gid (the image has no group names)", cfg.AdminGroup)
	}

	// admin_socket: in a hostPath directory seen at the same path by the
	// node and its agent pods.
	dir := filepath.Dir(cfg.AdminSocket)
	vm, v := m.mountAt(c, dir)
	switch {
	case vm == nil || v == nil || v.HostPath == nil:
		t.Errorf("supervisor.yaml admin_socket %s: its directory %s must be a hostPath mount", cfg.AdminSocket, dir)
	case v.HostPath.Path != dir || vm.ReadOnly:
		t.Errorf("supervisor.yaml admin_socket %s: volume %s is hostPath %s readOnly %v, want hostPath %s, writable", cfg.AdminSocket, v.Name, v.HostPath.Path, vm.ReadOnly, dir)
	}

	// metrics_listen: outside loopback (kubelet probes the pod IP), on the
	// port the probes and the scrape annotation name.
	host, port, err := net.SplitHostPort(cfg.MetricsListen)
	if err != nil {
		t.Fatalf("supervisor.yaml metrics_listen %q: %v", cfg.MetricsListen, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		t.Errorf("supervisor.yaml metrics_listen %s: loopback, which kubelet's probes and Prometheus cannot reach", cfg.MetricsListen)
	}
	if p := metricsPort(c); p == nil || strconv.Itoa(int(p.ContainerPort)) != port {
		t.Errorf("supervisor.yaml metrics_listen port %s: want the container port named %s (%v)", port, metricsPortName, p)
	}
	if a := m.daemonSet.Spec.Template.Annotations["prometheus.io/port"]; a != port {
		t.Errorf("supervisor.yaml metrics_listen port %s: annotation prometheus.io/port is %q", port, a)
	}

	// state_dir: on the node, so the audit journal outlives the pod.
	vm, v = m.mountAt(c, cfg.StateDir)
	if vm == nil || v == nil || v.HostPath == nil || vm.ReadOnly {
		t.Errorf("supervisor.yaml state_dir %s: must be a writable hostPath mount", cfg.StateDir)
	}
	vm, v = m.mountAt(c, cfg.SkillsDir)
	if vm == nil || v == nil || v.HostPath == nil || !vm.ReadOnly {
		t.Errorf("supervisor.yaml skills_dir %s: must be a read-only hostPath mount", cfg.SkillsDir)
	}
	// socket_dir: the broker sockets are this pod's alone.
	vm, v = m.mountOf(c, cfg.SocketDir)
	if vm == nil || v == nil || v.EmptyDir == nil {
		t.Errorf("supervisor.yaml socket_dir %s: must be under the emptyDir mount, not on the node", cfg.SocketDir)
	}
	// seccomp_profiles_dir: shipped in the image, so no mount may hide it.
	for _, vm := range c.VolumeMounts {
		if within(cfg.SeccompProfilesDir, vm.MountPath) || within(vm.MountPath, cfg.SeccompProfilesDir) {
			t.Errorf("supervisor.yaml seccomp_profiles_dir %s: volumeMount %s at %s hides the image's profiles", cfg.SeccompProfilesDir, vm.Name, vm.MountPath)
		}
	}

	// audit.signing_key: made on the first start and kept by the node,
	// outside state_dir (the daemon refuses a key inside it).
	key := cfg.Audit.SigningKey
	vm, v = m.mountAt(c, filepath.Dir(key))
	switch {
	case !filepath.IsAbs(key):
		t.Errorf("supervisor.yaml audit.signing_key %q: want an absolute path (a relative one lands in the read-only ConfigMap directory)", key)
	case within(key, cfg.StateDir):
		t.Errorf("supervisor.yaml audit.signing_key %s: inside state_dir %s", key, cfg.StateDir)
	case vm == nil || v == nil || v.HostPath == nil || vm.ReadOnly:
		t.Errorf("supervisor.yaml audit.signing_key %s: its directory must be a writable hostPath mount (one key per node across restarts)", key)
	}

	// fleet (the component's): the DSN file from the Secret, the host id
	// from the env.
	cfg = m.withFleet(t).supervisorConfig(t)
	dsn := cfg.Fleet.PostgresDSNFile
	vm, v = m.mountAt(c, filepath.Dir(dsn))
	if vm == nil || v == nil || v.Secret == nil {
		t.Errorf("supervisor.yaml fleet.postgres_dsn_file %q: its directory must be where the Secret is mounted", dsn)
	} else {
		key := filepath.Base(dsn)
		for _, it := range v.Secret.Items {
			if it.Path == filepath.Base(dsn) {
				key = it.Key
			}
		}
		_, inData := m.secret.Data[key]
		_, inString := m.secret.StringData[key]
		if !inData && !inString {
			t.Errorf("supervisor.yaml fleet.postgres_dsn_file %s: Secret %s has no key %q", dsn, m.secret.Name, key)
		}
	}
	if id := cfg.Fleet.HostID; id == nil || *id != "" {
		t.Errorf("supervisor.yaml fleet.host_id must be \"\" so %s (the node name) decides", hostIDEnv)
	}

	// shutdown_grace, then the timeout path, within the pod's grace.
	grace, err := time.ParseDuration(cfg.ShutdownGrace)
	if err != nil {
		t.Fatalf("supervisor.yaml shutdown_grace %q: %v", cfg.ShutdownGrace, err)
	}
	if g := m.pod().TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= grace+timeoutPathMax {
		t.Errorf("DaemonSet terminationGracePeriodSeconds %s must exceed shutdown_grace %v + %v (the timeout path)", show(g), grace, timeoutPathMax)
	}
}

// TestStrictDecodingRejects proves the decoding above is strict.
func TestStrictDecodingRejects(t *testing.T) {
	read := func(t *testing.T, f string) string {
		t.Helper()
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	cases := []struct {
		name, file, old, new, want string
	}{
		// encoding/json would take hostPid for hostPID.
		{"field in the wrong case", "daemonset.yaml", "hostPID: false", "hostPid: false", `unknown field "spec.template.spec.hostPid"`},
		{"unknown field", "daemonset.yaml", "priorityClassName:", "priorityClass:", `unknown field "spec.template.spec.priorityClass"`},
		{"duplicate field", "serviceaccount.yaml", "automountServiceAccountToken: false", "automountServiceAccountToken: false\nautomountServiceAccountToken: true", "automountServiceAccountToken"},
		{"unknown kind", "namespace.yaml", "kind: Namespace", "kind: Namespaces", "not a kind"},
		{"second document", "namespace.yaml", "kind: Namespace", "kind: Namespace\n---\nkind: Namespace", "one object per file"},
		{"unknown kustomization field", "kustomization.yaml", "resources:", "resource:", `unknown field "resource"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			orig := read(t, tc.file)
			if strings.Count(orig, tc.old) != 1 {
				t.Fatalf("%s: want exactly one %q to change", tc.file, tc.old)
			}
			if _, err := decodeManifest([]byte(orig)); err != nil {
				t.Fatalf("%s unchanged: %v", tc.file, err)
			}
			_, err := decodeManifest([]byte(strings.Replace(orig, tc.old, tc.new, 1)))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s with %q for %q: error %v, want one containing %q", tc.file, tc.new, tc.old, err, tc.want)
			}
		})
	}
}
