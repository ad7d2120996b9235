// Command leaks reports what a skill can learn about, or cost, the host
// through the small leaks of issue 16 item 7, as one JSON object: what
// /proc/config.gz gives, what sync and syncfs answer, the rlimits the
// kernel shows in /proc/self/limits, what a write at RLIMIT_FSIZE gets
// (SIGXFSZ ignored, so the kernel answers EFBIG), and the mount table.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	var e unix.Errno
	if errors.As(err, &e) {
		switch e {
		case unix.EPERM:
			return "EPERM"
		case unix.EFBIG:
			return "EFBIG"
		case unix.ENOENT:
			return "ENOENT"
		case unix.EACCES:
			return "EACCES"
		case unix.ENOSPC:
			return "ENOSPC"
		}
		return e.Error()
	}
	return err.Error()
}

type mount struct {
	Point  string `json:"point"`
	Root   string `json:"root"`
	FSType string `json:"fstype"`
	Source string `json:"source"`
}

func main() {
	runtime.LockOSThread()
	out := map[string]any{}

	// /proc/config.gz: the host kernel's whole build configuration.
	b, err := os.ReadFile("/proc/config.gz")
	out["config_gz_error"] = errName(err)
	out["config_gz_bytes"] = len(b)

	// sync flushes every filesystem of the host; syncfs the one of an fd.
	_, _, e := unix.RawSyscall(unix.SYS_SYNC, 0, 0, 0)
	out["sync"] = errName(errnoOrNil(e))
	f, err := os.CreateTemp("/tmp", "leaks")
	if err != nil {
		out["tmp_error"] = err.Error()
	} else {
		_, _, e = unix.RawSyscall(unix.SYS_SYNCFS, f.Fd(), 0, 0)
		out["syncfs"] = errName(errnoOrNil(e))
		out["fsync"] = errName(f.Sync())
	}

	// The limits as the kernel reports them: name → "soft hard".
	limits := map[string]string{}
	if lf, err := os.Open("/proc/self/limits"); err == nil {
		sc := bufio.NewScanner(lf)
		for sc.Scan() {
			line := sc.Text()
			if len(line) < 26 || strings.HasPrefix(line, "Limit") {
				continue
			}
			fs := strings.Fields(line[25:])
			if len(fs) >= 2 {
				limits[strings.TrimSpace(line[:25])] = fs[0] + " " + fs[1]
			}
		}
		lf.Close()
	}
	out["limits"] = limits

	// A write that would make a file larger than RLIMIT_FSIZE: with SIGXFSZ
	// ignored the kernel answers EFBIG; one byte below the limit is fine.
	// The file is sparse: it costs no tmpfs space.
	signal.Ignore(syscall.SIGXFSZ)
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_FSIZE, &rl) == nil && f != nil {
		out["fsize_soft"] = rl.Cur
		if rl.Cur < 1<<40 {
			_, err := f.WriteAt([]byte{1}, int64(rl.Cur)-1)
			out["write_below_fsize"] = errName(err)
			_, err = f.WriteAt([]byte{1}, int64(rl.Cur))
			out["write_at_fsize"] = errName(err)
			out["raise_fsize"] = errName(unix.Setrlimit(unix.RLIMIT_FSIZE, &unix.Rlimit{Cur: rl.Max + 1, Max: rl.Max + 1}))
		} else {
			out["write_at_fsize"] = "no limit"
		}
	}
	if f != nil {
		f.Close()
		os.Remove(f.Name())
	}

	// The mount table: what each mount says about where it comes from.
	var mounts []mount
	if mf, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(mf)
		for sc.Scan() {
			pre, post, ok := strings.Cut(sc.Text(), " - ")
			a, b := strings.Fields(pre), strings.Fields(post)
			if !ok || len(a) < 5 || len(b) < 2 {
				continue
			}
			mounts = append(mounts, mount{Point: unescape(a[4]), Root: unescape(a[3]), FSType: b[0], Source: unescape(b[1])})
		}
		mf.Close()
	}
	out["mounts"] = mounts
	json.NewEncoder(os.Stdout).Encode(out)
}

func errnoOrNil(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// unescape undoes mountinfo's octal escapes (\040 for a space…).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, ok := octal(s[i+1 : i+4]); ok {
				b.WriteByte(n)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func octal(s string) (byte, bool) {
	if len(s) != 3 {
		return 0, false
	}
	var n int
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, false
		}
		n = n*8 + int(c-'0')
	}
	return byte(n), n < 256
}
