package cli

import (
	"strings"
	"testing"

	"cyberos.dev/supervisor/config"
)

// TestOpenFilesWarning: serve warns when one sandbox at the ceilings could
// hold more open files than fs.file-max allows the whole host, and not
// when the host's limit is above that (systemd's maximum) or unknown.
func TestOpenFilesWarning(t *testing.T) {
	cfg := config.Default()
	const mapCount = 65530
	// 4096 MiB / 512 B per pinned file: about 8.4 million.
	if n := sandboxOpenFiles(cfg, mapCount); n != 4096<<20/512 {
		t.Errorf("sandboxOpenFiles = %d, want %d (bounded by memory)", n, 4096<<20/512)
	}
	w := openFilesWarning(cfg, 2466239, mapCount)
	for _, s := range []string{"limits.max_memory_mb", "4096 MiB", "8388608", "fs.file-max is 2466239"} {
		if !strings.Contains(w, s) {
			t.Errorf("warning %q does not say %q", w, s)
		}
	}
	if w := openFilesWarning(cfg, 9223372036854775807, mapCount); w != "" {
		t.Errorf("fs.file-max at its maximum: warning %q", w)
	}
	if w := openFilesWarning(cfg, 0, mapCount); w != "" {
		t.Errorf("fs.file-max unknown: warning %q", w)
	}
	// Few processes bound it before memory does.
	cfg.Limits.MaxPids = 8
	if n := sandboxOpenFiles(cfg, mapCount); n != 8*(1024+mapCount) {
		t.Errorf("sandboxOpenFiles with 8 pids = %d, want %d", n, 8*(1024+mapCount))
	}
}
