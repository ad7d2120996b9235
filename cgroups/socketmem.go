package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// ErrNoSocketLimit: this cgroup v1 kernel has no memory.kmem.tcp files, so
// a cgroup's socket buffers stay outside its memory limit.
var ErrNoSocketLimit = errors.New("cgroups: no memory.kmem.tcp.limit_in_bytes (cgroup v1): socket buffers are not charged to the memory limit")

// LimitSocketMemory makes the TCP buffers of cgroup path count against
// its memory: cgroup v2 charges them to memory.max already; v1 charges them
// only once memory.kmem.tcp.limit_in_bytes is set, and only for sockets
// made after that, so it is set (to bytes, the memory limit) before the
// skill runs. Without it a sandbox's TCP buffers count in the host's
// net.ipv4.tcp_mem alone, beyond its memory limit.
func (h Hierarchy) LimitSocketMemory(path string, bytes int64) error {
	if err := h.checkMode(); err != nil {
		return err
	}
	if h.Mode == Unified {
		return nil
	}
	mem, _ := h.dirs(cleanPath(path))
	err := writeExisting(filepath.Join(mem, "memory.kmem.tcp.limit_in_bytes"), strconv.FormatInt(bytes, 10))
	switch {
	case errors.Is(err, fs.ErrNotExist) && dirExists(mem):
		return ErrNoSocketLimit
	case err != nil:
		return fmt.Errorf("cgroups: limit socket memory of %s: %w", path, err)
	}
	return nil
}

// LimitSocketMemory limits the socket buffers of cgroup path on this host;
// see Hierarchy.LimitSocketMemory.
func LimitSocketMemory(path string, bytes int64) error {
	return System().LimitSocketMemory(path, bytes)
}

// writeExisting writes s to the existing file name (a cgroup file is never
// created).
func writeExisting(name, s string) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
