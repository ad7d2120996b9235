// Package config is the daemon's config file, the operator's format
// (/etc/cyberos/config.yaml): Load reads it strictly over Default and
// validates it, CheckFile lists every problem at once for `serve --check`.
// Unknown keys are errors; each error wraps ErrConfig and names its key.
package config
