package cli

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"cyberos.dev/supervisor/config"
)

// pinnedFileBytes is about what the memory cgroup is charged for one open
// file kept by a mapping after its descriptor is closed (the file and the
// mapping); docs/kernel-counters.md has the measurement.
const pinnedFileBytes = 512

// sandboxOpenFiles is about how many open files one sandbox at the config's
// ceilings can hold: each process its RLIMIT_NOFILE descriptors and up to
// maxMapCount more kept by mappings, all within its memory cgroup.
func sandboxOpenFiles(cfg config.Config, maxMapCount int64) int64 {
	byMemory := cfg.Limits.MaxMemoryMB << 20 / pinnedFileBytes
	byProcs := cfg.Limits.MaxPids * (cfg.Defaults.NoFile + maxMapCount)
	return min(byMemory, byProcs)
}

// openFilesWarning says when one sandbox at the ceilings could take every
// open file of the host (fs.file-max counts them for the whole host, and
// only processes with CAP_SYS_ADMIN may pass it); "" when it cannot.
func openFilesWarning(cfg config.Config, fileMax, maxMapCount int64) string {
	n := sandboxOpenFiles(cfg, maxMapCount)
	if fileMax <= 0 || n < fileMax {
		return ""
	}
	return fmt.Sprintf("limits.max_memory_mb: one sandbox at %d MiB and limits.max_pids %d can hold about %d open files, and fs.file-max is %d for the whole host: a skill could leave other programs none (ENFILE); raise fs.file-max (systemd sets it to its maximum) or lower the limits",
		cfg.Limits.MaxMemoryMB, cfg.Limits.MaxPids, n, fileMax)
}

// readSysctl reads one integer sysctl from /proc/sys; 0 when unreadable.
func readSysctl(name string) int64 {
	b, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(name, ".", "/"))
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0
	}
	return n
}
