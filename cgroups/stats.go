package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"cyberos.dev/internal/fdread"
)

// v1Unlimited is the smallest value a v1 memory.limit_in_bytes shows for
// "no limit": the kernel prints PAGE_COUNTER_MAX pages, i.e. MaxInt64
// rounded down to the page size (9223372036854771712 with 4 KiB pages);
// this mask covers pages up to 64 KiB.
const v1Unlimited = (1<<63 - 1) &^ (64<<10 - 1)

// statFile is where one Stats field comes from: a single-value file when
// key is empty, else the "key value" line of a flat-keyed file. A limit
// reads "max" (v2) or the v1 unlimited value as 0.
type statFile struct {
	dst   *uint64
	dir   string
	file  string
	key   string
	limit bool
}

// Stats reads the accounting of cgroup path:
//
//	field             v1 (Legacy, Hybrid)                       v2 (Unified)
//	MemoryPeakBytes   memory/<path>/memory.max_usage_in_bytes   <path>/memory.peak
//	MemoryLimitBytes  memory/<path>/memory.limit_in_bytes       <path>/memory.max
//	OOMKills          memory/<path>/memory.oom_control oom_kill <path>/memory.events oom_kill
//	PidsPeak          pids/<path>/pids.peak                     <path>/pids.peak
//	PidsLimit         pids/<path>/pids.max                      <path>/pids.max
//	PidsLimitHits     pids/<path>/pids.events max               <path>/pids.events max
//
// OOM kills come from oom_kill, never from failcnt or memory.events "max"/
// "oom": those count reclaim at the limit and OOM situations, not kills.
// A limit of 0 means none. Every file is optional (older kernels lack
// memory.peak, pids.peak, oom_kill): a missing file or key reads as 0. A
// cgroup missing from every hierarchy read is an error wrapping
// ErrNotExist; an unparsable file is an error.
func (h Hierarchy) Stats(path string) (Stats, error) {
	if err := h.checkMode(); err != nil {
		return Stats{}, err
	}
	p := cleanPath(path)
	memDir, pidsDir := h.dirs(p)
	peak, limit, oom := "memory.max_usage_in_bytes", "memory.limit_in_bytes", h.oomFile()
	if h.Mode == Unified {
		peak, limit = "memory.peak", "memory.max"
	}
	var st Stats
	files := []statFile{
		{&st.MemoryPeakBytes, memDir, peak, "", false},
		{&st.MemoryLimitBytes, memDir, limit, "", true},
		{&st.OOMKills, memDir, oom, "oom_kill", false},
		{&st.PidsPeak, pidsDir, "pids.peak", "", false},
		{&st.PidsLimit, pidsDir, "pids.max", "", true},
		{&st.PidsLimitHits, pidsDir, "pids.events", "max", false},
	}
	if !dirExists(memDir) && !dirExists(pidsDir) {
		return Stats{}, fmt.Errorf("cgroups: stats of %s (%v): %w", p, h.Mode, ErrNotExist)
	}
	for _, f := range files {
		v, err := readStatFile(filepath.Join(f.dir, f.file), f.key)
		if err != nil {
			return Stats{}, fmt.Errorf("cgroups: stats of %s: %w", p, err)
		}
		if f.limit && v >= v1Unlimited {
			v = 0
		}
		*f.dst = v
	}
	return st, nil
}

// OOMKills reads Stats' OOMKills alone, one file: what an invocation's
// outcome needs before its completed row, the rest of Stats after it. A
// missing memory cgroup is an error wrapping ErrNotExist.
func (h Hierarchy) OOMKills(path string) (uint64, error) {
	if err := h.checkMode(); err != nil {
		return 0, err
	}
	memDir, _ := h.dirs(cleanPath(path))
	name := filepath.Join(memDir, h.oomFile())
	b, err := readSmall(name)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !dirExists(memDir):
		return 0, fmt.Errorf("cgroups: oom kills of %s (%v): %w", path, h.Mode, ErrNotExist)
	case errors.Is(err, fs.ErrNotExist):
		return 0, nil // a kernel without the file, as Stats reads it
	case err != nil:
		return 0, err
	}
	return parseStat(name, b, "oom_kill")
}

// oomFile is the memory controller's file holding the oom_kill count.
func (h Hierarchy) oomFile() string {
	if h.Mode == Unified {
		return "memory.events"
	}
	return "memory.oom_control"
}

// dirs are cgroup p's memory and pids directories: v2 keeps every
// controller's files in one, v1 has one hierarchy per controller.
func (h Hierarchy) dirs(p string) (mem, pids string) {
	if h.Mode == Unified {
		d := filepath.Join(h.root(), p)
		return d, d
	}
	return filepath.Join(h.root(), "memory", p), filepath.Join(h.root(), "pids", p)
}

func dirExists(d string) bool {
	fi, err := os.Stat(d)
	return err == nil && fi.IsDir()
}

// readStatFile reads a single-value file (key == "") or the value of key
// in a flat-keyed file. A missing file or key is 0; "max" is 0.
func readStatFile(name, key string) (uint64, error) {
	b, err := readSmall(name)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return parseStat(name, b, key)
}

// parseStat is readStatFile's parse of file name's content b.
func parseStat(name string, b []byte, key string) (uint64, error) {
	if key == "" {
		return parseValue(name, string(bytes.TrimSpace(b)))
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(s.Text()), " ")
		if ok && k == key {
			return parseValue(name, strings.TrimSpace(v))
		}
	}
	return 0, s.Err()
}

// readSmall reads all of a small file with open, read and close alone:
// os.ReadFile also has the runtime's poller watch a file that can be polled,
// as cgroup files can, five more system calls for each of the six files an
// invocation's stats read (BenchmarkStats).
func readSmall(name string) ([]byte, error) {
	var fd int
	var err error
	for {
		if fd, err = unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC, 0); !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	// A cgroup file's size says nothing of its content; none comes near
	// the limit.
	b, err := fdread.All(fd, -1, 1<<30)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return b, nil
}

func parseValue(name, s string) (uint64, error) {
	if s == "max" {
		return 0, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", name, err)
	}
	return v, nil
}
