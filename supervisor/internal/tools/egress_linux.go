package tools

import (
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// KernelRoute asks the kernel (RTM_GETROUTE, as `ip route get` does) how it
// would route ip. Anything but a unicast route (local, broadcast, anycast,
// multicast) is RouteHost: it reaches the host itself or its whole link,
// including addresses no interface lists, such as a local route for a whole
// prefix (AnyIP). A unicast route with no gateway on a link with broadcast
// (Ethernet-like, not a point-to-point tunnel) through a prefix narrower
// than the default route is RouteLink: the host's neighbour on that link. No route at all (unreachable, prohibit, blackhole)
// is RouteOut: the connect fails by itself.
func KernelRoute(ip netip.Addr) (RouteKind, error) {
	rs, err := netlink.RouteGet(net.IP(ip.Unmap().AsSlice()))
	if err != nil {
		var errno unix.Errno
		if errors.As(err, &errno) {
			switch errno {
			case unix.ENETUNREACH, unix.EHOSTUNREACH, unix.EACCES, unix.EPERM, unix.EINVAL, unix.EAFNOSUPPORT:
				return RouteOut, nil
			}
		}
		return RouteOut, err
	}
	if len(rs) == 0 {
		return RouteOut, errors.New("route lookup: no answer")
	}
	kind := RouteOut
	for _, r := range rs {
		if r.Type != unix.RTN_UNICAST {
			return RouteHost, nil
		}
		if r.Gw != nil || r.Via != nil || len(r.MultiPath) > 0 {
			continue
		}
		ifi, err := net.InterfaceByIndex(r.LinkIndex)
		if err != nil {
			return RouteOut, err
		}
		if ifi.Flags&net.FlagBroadcast == 0 || ifi.Flags&net.FlagPointToPoint != 0 {
			continue
		}
		// A default route with no gateway (everything on-link, as with
		// proxy ARP) says nothing about neighbours: only a narrower
		// on-link prefix does.
		fib, err := netlink.RouteGetWithOptions(net.IP(ip.Unmap().AsSlice()), &netlink.RouteGetOptions{FIBMatch: true})
		if err == nil && len(fib) > 0 && isDefault(fib[0].Dst) {
			continue
		}
		kind = RouteLink
	}
	return kind, nil
}

// isDefault reports whether a route's destination is the default route.
func isDefault(d *net.IPNet) bool {
	if d == nil {
		return true
	}
	ones, _ := d.Mask.Size()
	return ones == 0
}
