package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// rootfsFor is the root of spec's sandbox: the shared skeleton, or for a
// spec with Binds a copy of it of its own, holding the mount points
// (boundRootfs).
func (r *LinuxRunner) rootfsFor(spec Spec) string {
	if len(spec.Binds) == 0 {
		return r.rootfs()
	}
	return filepath.Join(r.boundRoots(), spec.ID)
}

// prepareRootfs builds, once per run dir, the empty skeleton every sandbox
// uses as its root: symlinks for the merged-/usr layout, a tiny /etc and
// mount points. It is shared read-only; each container mounts over it in
// its own mount namespace, so nothing per-invocation is written here.
func (r *LinuxRunner) prepareRootfs() error {
	r.skelOnce.Do(func() {
		want := skeletonStamp()
		current := func() bool {
			have, err := os.ReadFile(filepath.Join(r.rootfs(), skeletonStampFile))
			return err == nil && string(have) == want
		}
		if current() {
			return // built by an earlier run, still current
		}
		// Many supervisors may start at once on a fresh run dir: one builds,
		// the others wait for it and find it current.
		lock, err := os.OpenFile(filepath.Join(r.cfg.RunDir, "skeleton.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			r.skelErr = err
			return
		}
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			r.skelErr = err
			return
		}
		if current() {
			return
		}
		r.skelErr = buildSkeleton(r.rootfs(), want)
	})
	return r.skelErr
}

// skeletonStampFile records what a skeleton was built from; a skeleton whose
// stamp differs (new layout version, host ld.so.cache changed) is rebuilt.
const skeletonStampFile = ".cyberos-skeleton"

func skeletonStamp() string {
	stamp := "v2" // v2: modes set whatever the umask
	if fi, err := os.Stat("/etc/ld.so.cache"); err == nil {
		stamp += fmt.Sprintf(" ld.so.cache %d %d", fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp
}

func buildSkeleton(dir, stamp string) error {
	tmp := dir + ".tmp." + fmt.Sprint(os.Getpid())
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "etc"), 0o755); err != nil {
		return err
	}
	for _, d := range []string{"usr", "skill", "tmp", "proc", "dev", "run/cyberos/bin"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return err
		}
	}
	for _, top := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		host := "/" + top
		fi, err := os.Lstat(host)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(host)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(tmp, top)); err != nil {
				return err
			}
		} else if fi.IsDir() {
			if err := os.MkdirAll(filepath.Join(tmp, top), 0o755); err != nil {
				return err
			}
		}
	}
	files := map[string]string{
		"etc/passwd":        fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nskill:x:%d:%d:skill:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", SkillUID, SkillUID),
		"etc/group":         fmt.Sprintf("root:x:0:\nskill:x:%d:\nnogroup:x:65534:\n", SkillUID),
		"etc/hostname":      Hostname + "\n",
		"etc/hosts":         "127.0.0.1\tlocalhost " + Hostname + "\n::1\tlocalhost\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
		"etc/resolv.conf":   "",
		skeletonStampFile:   stamp,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	if cache, err := os.ReadFile("/etc/ld.so.cache"); err == nil {
		if err := os.WriteFile(filepath.Join(tmp, "etc/ld.so.cache"), cache, 0o644); err != nil {
			return err
		}
	}
	for _, f := range []string{"run/cyberos/broker.sock", "run/cyberos/bin/cyberos-tool", "run/cyberos/bin/cyberos-init"} {
		if err := os.WriteFile(filepath.Join(tmp, f), nil, 0o644); err != nil {
			return err
		}
	}
	// The modes the sandbox's root (a host uid of its own) needs, whatever
	// the umask the supervisor runs with (the unit's is 0077).
	err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return os.Chmod(p, 0o755)
		case d.Type().IsRegular():
			return os.Chmod(p, 0o644)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Replace any older skeleton atomically enough: a running container has
	// its rootfs mounted in its own namespace, so removing the old one from
	// under it does not disturb it.
	old := dir + ".old." + fmt.Sprint(os.Getpid())
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// boundRootfs makes the root of a sandbox with binds (an MCP server's): a
// copy of the shared skeleton with the binds' mount points, made as root
// on the host since the container's own root (a mapped uid) may not write
// it. The points are empty directories (or files) named as the bound
// paths; in the shared skeleton they would show every later sandbox which
// host paths some server was given. cleanup removes the copy.
func (r *LinuxRunner) boundRootfs(spec Spec) error {
	root := r.rootfsFor(spec)
	for _, b := range spec.Binds {
		if !filepath.IsAbs(b.Path) || filepath.Clean(b.Path) != b.Path || b.Path == "/" {
			return fmt.Errorf("bind %q: must be an absolute, clean path other than /", b.Path)
		}
	}
	// The sandbox's root (a host uid of its own) must traverse it.
	if err := os.MkdirAll(r.boundRoots(), 0o711); err != nil {
		return err
	}
	if err := os.Chmod(r.boundRoots(), 0o711); err != nil {
		return err
	}
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	if err := copySkeleton(r.rootfs(), root); err != nil {
		return fmt.Errorf("copy of the skeleton: %w", err)
	}
	for _, b := range spec.Binds {
		fi, err := os.Stat(b.Path)
		if err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		point := filepath.Join(root, b.Path)
		if fi.IsDir() {
			err = os.MkdirAll(point, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(point), 0o755); err == nil {
			var f *os.File
			if f, err = os.OpenFile(point, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
				f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("bind %s: mount point: %w", b.Path, err)
		}
		// MkdirAll honours the umask; the mapped root must traverse.
		for d := filepath.Dir(point); len(d) > len(root); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				return err
			}
		}
		if fi.IsDir() {
			if err := os.Chmod(point, 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

// copySkeleton copies the skeleton src (directories, symlinks and small
// regular files, as buildSkeleton makes them) to dst with its modes.
func copySkeleton(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, 0o755); err != nil {
				return err
			}
			return os.Chmod(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, b, 0o644); err != nil {
				return err
			}
			return os.Chmod(to, 0o644)
		}
		return fmt.Errorf("%s: unexpected file type %v", p, d.Type())
	})
}

// mounts are the sandbox's mounts over its read-only root: proc, a small
// /dev, /dev/shm and /tmp tmpfs, the host's /usr and library directories,
// the skill, cyberos-init and cyberos-tool read-only, the broker socket,
// and spec's Binds.
func (r *LinuxRunner) mounts(spec Spec) []*configs.Mount {
	tmpMB := spec.TmpSizeMB
	if tmpMB <= 0 {
		tmpMB = 64
	}
	const bindRO = unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	mounts := []*configs.Mount{
		{Source: "proc", Destination: "/proc", Device: "proc", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755,size=64k"},
		{Source: "shm", Destination: "/dev/shm", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, Data: "mode=1777,size=16m"},
		{Source: "tmpfs", Destination: "/tmp", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: fmt.Sprintf("mode=1777,size=%dm", tmpMB)},
		{Source: "/usr", Destination: "/usr", Device: "bind", Flags: bindRO},
		{Source: spec.SkillDir, Destination: SkillMount, Device: "bind", Flags: bindRO},
		{Source: r.initCopy, Destination: InitBinPath, Device: "bind", Flags: bindRO},
	}
	for _, top := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if fi, err := os.Lstat("/" + top); err == nil && fi.IsDir() {
			mounts = append(mounts, &configs.Mount{Source: "/" + top, Destination: "/" + top, Device: "bind", Flags: bindRO})
		}
	}
	if spec.BrokerSocket != "" {
		// Read-only: connecting still works, but the skill (which owns the
		// socket inode) cannot chmod or chown it (TestHostileSupervisorState).
		mounts = append(mounts, &configs.Mount{Source: spec.BrokerSocket, Destination: BrokerSockPath, Device: "bind", Flags: unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC})
	}
	mounts = append(mounts, &configs.Mount{Source: r.toolCopy, Destination: ToolBinPath, Device: "bind", Flags: bindRO})
	for _, b := range spec.Binds {
		flags := bindRO
		if b.Writable {
			flags = unix.MS_BIND | unix.MS_REC | unix.MS_NOSUID | unix.MS_NODEV
		}
		mounts = append(mounts, &configs.Mount{Source: b.Path, Destination: b.Path, Device: "bind", Flags: flags})
	}
	return mounts
}
