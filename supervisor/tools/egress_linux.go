package tools

import (
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// LocalRoute asks the kernel (RTM_GETROUTE, as `ip route get` does) how it
// would route ip: anything but a unicast route out (local, broadcast,
// anycast, multicast) delivers to the host itself or its whole link, and is
// reported true. That covers addresses no interface lists, such as a local
// route for a whole prefix (AnyIP). No route at all (unreachable, prohibit,
// blackhole) is false: the connect fails by itself.
func LocalRoute(ip netip.Addr) (bool, error) {
	rs, err := netlink.RouteGet(net.IP(ip.Unmap().AsSlice()))
	if err != nil {
		var errno unix.Errno
		if errors.As(err, &errno) {
			switch errno {
			case unix.ENETUNREACH, unix.EHOSTUNREACH, unix.EACCES, unix.EPERM, unix.EINVAL:
				return false, nil
			}
		}
		return false, err
	}
	if len(rs) == 0 {
		return false, errors.New("route lookup: no answer")
	}
	for _, r := range rs {
		if r.Type != unix.RTN_UNICAST {
			return true, nil
		}
	}
	return false, nil
}
