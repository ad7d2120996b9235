// Command inside reports what a skill can see of its sandbox, as one JSON
// object on stdout. It reads its fds with raw syscalls first, so the Go
// runtime's own files (epoll) are not counted.
package main

import (
	"bufio"
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"syscall"
)

func openFDs() []int {
	dirfd, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	defer syscall.Close(dirfd)
	buf := make([]byte, 8192)
	var fds []int
	for {
		n, err := syscall.ReadDirent(dirfd, buf)
		if err != nil || n == 0 {
			break
		}
		var names []string
		_, _, names = syscall.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			fd, err := strconv.Atoi(name)
			if err == nil && fd != dirfd {
				fds = append(fds, fd)
			}
		}
	}
	return fds
}

func status() map[string]string {
	out := map[string]string{}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func writable(dir string) bool {
	f, err := os.CreateTemp(dir, ".probe")
	if err != nil {
		return false
	}
	f.Close()
	os.Remove(f.Name())
	return true
}

func main() {
	fds := openFDs()
	var pids []int
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			if n, err := strconv.Atoi(e.Name()); err == nil {
				pids = append(pids, n)
			}
		}
	}
	var ifaces []string
	if b, err := os.ReadFile("/proc/net/dev"); err == nil {
		for _, line := range strings.Split(string(b), "\n")[2:] {
			if name, _, ok := strings.Cut(line, ":"); ok {
				ifaces = append(ifaces, strings.TrimSpace(name))
			}
		}
	}
	host, _ := os.Hostname()
	initComm, _ := os.ReadFile("/proc/1/comm")
	st := status()
	uidMap, _ := os.ReadFile("/proc/self/uid_map")
	kcoreBytes := readSome("/proc/kcore")
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"env":            os.Environ(),
		"fds":            fds,
		"pid":            os.Getpid(),
		"ppid":           os.Getppid(),
		"init_comm":      strings.TrimSpace(string(initComm)),
		"pids":           pids,
		"ifaces":         ifaces,
		"hostname":       host,
		"uid":            os.Getuid(),
		"uid_map":        strings.Join(strings.Fields(string(uidMap)), " "),
		"cap_eff":        st["CapEff"],
		"cap_prm":        st["CapPrm"],
		"cap_inh":        st["CapInh"],
		"cap_bnd":        st["CapBnd"],
		"cap_amb":        st["CapAmb"],
		"no_new_privs":   st["NoNewPrivs"],
		"seccomp":        st["Seccomp"],
		"root_writable":  writable("/"),
		"usr_writable":   writable("/usr"),
		"skill_writable": writable("/skill"),
		"tmp_writable":   writable("/tmp"),
		"kcore_readable": kcoreBytes > 0,
		"kcore_state":    fileState("/proc/kcore"),
	})
}

// readSome reads up to 4 KiB of path and says how many bytes came: 0 when
// it cannot be opened or reads empty (runc masks a file with /dev/null).
// /proc/kcore claims a size of terabytes, so never os.ReadFile it.
func readSome(path string) int {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	n, _ := f.Read(make([]byte, 4096))
	return n
}

// fileState is "absent", "masked" (a character device: the /dev/null runc
// binds over masked files) or "present".
func fileState(path string) string {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return "absent"
	case fi.Mode()&os.ModeCharDevice != 0:
		return "masked"
	}
	return "present"
}
