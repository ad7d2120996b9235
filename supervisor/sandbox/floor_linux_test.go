package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"

	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/spawn"
)

// floorConfig is the floor of any sandbox DESIGN.md allows: a container
// made by libcontainer with the namespaces it names (mount, pid, net, ipc,
// uts) and what the library itself needs, nothing else. The runner's
// rootfs skeleton read-only with /usr bound, /proc, and /dev with runc's
// default devices (libcontainer's init reopens a /dev/null stdio in the
// container); a cgroup with their rules and no limits (libcontainer
// refuses a cgroup without resources). No user namespace, seccomp filter,
// capability drop, masked path, rlimit or cyberos-init.
func (w *world) floorConfig(id string) *configs.Config {
	const bindRO = unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	res := &occgroups.Resources{}
	for _, d := range specconv.AllowedDevices {
		res.Devices = append(res.Devices, &d.Rule)
	}
	return &configs.Config{
		Rootfs:       w.runner.rootfs(),
		Readonlyfs:   true,
		Namespaces:   configs.Namespaces{{Type: configs.NEWNS}, {Type: configs.NEWPID}, {Type: configs.NEWNET}, {Type: configs.NEWIPC}, {Type: configs.NEWUTS}},
		NoNewKeyring: true,
		Devices:      specconv.AllowedDevices,
		Mounts: []*configs.Mount{
			{Source: "proc", Destination: "/proc", Device: "proc", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
			{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755,size=64k"},
			{Source: "/usr", Destination: "/usr", Device: "bind", Flags: bindRO},
		},
		Cgroups: &occgroups.Cgroup{Path: w.runner.cgroupParent + "/" + id, Resources: res},
	}
}

// floorRun makes one floor container (floorConfig) through the runner's
// own creation helper, runs args as its init with stdout and stderr to out,
// which must exit 0, and destroys it. Safe from several goroutines.
func (w *world) floorRun(id string, args []string, out *os.File) error {
	helper, err := w.runner.spawner()
	if err != nil {
		return err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer null.Close()
	c, proc, err := helper.Create(w.runner.stateRoot(), id, w.floorConfig(id), &spawn.Proc{
		Args: args, Env: []string{"PATH=/usr/bin"}, Cwd: "/", Stdin: null, Stdout: out, Stderr: out,
	})
	if c == nil {
		return fmt.Errorf("floor container %s: %w", id, err)
	}
	if err == nil {
		var st unix.WaitStatus
		if st, err = proc.Wait(); err == nil && st.ExitStatus() != 0 {
			err = fmt.Errorf("init's wait status %v", st)
		}
	}
	if derr := c.Destroy(); err == nil {
		err = derr
	}
	if err != nil {
		return fmt.Errorf("floor container %s: %w", id, err)
	}
	return nil
}

// floorStart is one floorRun of /usr/bin/true, timed: what a sandbox costs
// on this machine before anything cyberos adds to it.
func (w *world) floorStart(id string) (time.Duration, error) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer null.Close()
	t0 := time.Now()
	err = w.floorRun(id, []string{"/usr/bin/true"}, null)
	return time.Since(t0), err
}

// floorRate starts n floor containers, conc at a time, and returns them
// per second and the machine's busy CPU time per start.
func (w *world) floorRate(tb testing.TB, n, conc int) (perSec float64, cpu time.Duration) {
	tb.Helper()
	ids := make(chan string, n)
	for i := range n {
		ids <- fmt.Sprintf("floor-%d-c%d-%d", os.Getpid(), conc, i)
	}
	close(ids)
	cpu0, t0 := testutil.BusyCPU(tb), time.Now()
	errs := make(chan error, conc)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for id := range ids {
				if _, err := w.floorStart(id); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	el, cpu := time.Since(t0), testutil.BusyCPU(tb)-cpu0
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	return float64(n) / el.Seconds(), cpu / time.Duration(n)
}

// TestLibcontainerFloorRuns: the container BenchmarkColdStart times as
// libcontainer's floor really starts its init in new pid, mount and
// network namespaces, and leaves no cgroup or state behind.
func TestLibcontainerFloorRuns(t *testing.T) {
	w := newWorld(t)
	w.runOnce(t, fmt.Sprintf("floor-skel-%d", os.Getpid())) // the rootfs skeleton
	id := fmt.Sprintf("floor-%d", os.Getpid())
	r, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	err = w.floorRun(id, []string{"/bin/sh", "-c", "echo $$; readlink /proc/self/ns/mnt /proc/self/ns/net"}, wr)
	wr.Close()
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	var mnt, netns string
	if _, err := fmt.Fscan(r, &pid, &mnt, &netns); err != nil {
		t.Fatal(err)
	}
	if pid != 1 {
		t.Errorf("init's pid in its namespace is %d, want 1", pid)
	}
	if host := mountNS(t, "/proc/self/ns/mnt"); mnt == host {
		t.Errorf("init ran in the host's mount namespace %s", host)
	}
	if host := mountNS(t, "/proc/self/ns/net"); netns == host {
		t.Errorf("init ran in the host's network namespace %s", host)
	}
	if left, _ := filepath.Glob("/sys/fs/cgroup/*" + w.runner.cgroupParent + "/" + id); len(left) > 0 {
		t.Errorf("cgroups left: %v", left)
	}
	if _, err := os.Stat(filepath.Join(w.runner.stateRoot(), id)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("state left: %v", err)
	}
}
