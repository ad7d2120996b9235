// Package kubernetes holds no code: its tests check the manifests in this
// directory without a cluster (each decoded strictly into its k8s.io/api
// type, the DaemonSet against the daemon config its ConfigMap holds) and the
// image the repository's Dockerfile builds for them (docs/kubernetes.md).
package kubernetes
