// Package kubernetes holds no Go code: the directory is the kustomize base
// that runs the daemon as a DaemonSet (docs/kubernetes.md), with its fleet
// and podmonitor components. Its tests check the manifests without a
// cluster: each file decoded strictly into its k8s.io/api type, the
// DaemonSet against the daemon config its ConfigMap holds, and the
// Dockerfile's image against what the DaemonSet runs.
package kubernetes
