package tools

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"syscall"

	"cyberos.dev/policy"
)

// Egress says which control keeps the Http tools (which run in the
// supervisor, on the host) off the host and its neighbours. The containment
// record carries EgressMode; doctor prints EgressDetail.
const (
	EgressMode   = "address filter"
	EgressDetail = EgressMode + " (host addresses and IANA special-purpose ranges refused at each dial)"
)

// RouteKind is where the kernel would send a connection (KernelRoute).
type RouteKind int

const (
	RouteOut  RouteKind = iota // through a gateway, a point-to-point link, or nowhere
	RouteHost                  // to the host itself (local, broadcast, anycast, multicast)
	RouteLink                  // straight onto a broadcast link: a neighbour of the host
)

// HostAddrs lists the addresses assigned to the host's interfaces (every
// interface, up or down), read anew at each call.
func HostAddrs() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		var ip net.IP
		switch a := a.(type) {
		case *net.IPNet:
			ip = a.IP
		case *net.IPAddr:
			ip = a.IP
		}
		if x, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, x.Unmap())
		}
	}
	return out, nil
}

// egressGuard judges the addresses one Http connection may go to: the
// enforcer's tables (CheckAddr), then the host's own addresses and the
// kernel's routing (the host itself, or a neighbour on one of its links),
// which only the supervisor's side can see. It runs before the first
// connect for every address a name resolved to, and again in the dialer's
// Control hook for the address each socket is about to connect to (so every
// dial, redirects included, is judged on the very address used).
type egressGuard struct {
	env  *Env
	tool policy.Tool
	host string // as the URL named it, for the denial
}

func (g egressGuard) refuse(class string) error {
	return &policy.Denial{Reason: policy.ReasonDomain, Tool: g.tool, Detail: fmt.Sprintf("host %q resolves to a refused address (%s)", g.host, class)}
}

// check judges ips. A loopback address that passed CheckAddr was let through
// by AllowLoopback (the tests' switch) and is not judged again here; every
// other address of the host stays refused.
func (g egressGuard) check(ips ...netip.Addr) error {
	for _, ip := range ips {
		if err := g.env.Enforcer.CheckAddr(g.tool, g.host, ip); err != nil {
			return err
		}
	}
	hostAddrs, route := g.env.HostAddrs, g.env.KernelRoute
	if hostAddrs == nil {
		hostAddrs = HostAddrs
	}
	if route == nil {
		route = KernelRoute
	}
	var own []netip.Addr
	read := false
	for _, ip := range ips {
		ip = ip.Unmap()
		if ip.IsLoopback() {
			continue
		}
		if !read {
			var err error
			if own, err = hostAddrs(); err != nil {
				return g.refuse("the host's addresses cannot be read")
			}
			read = true
		}
		if slices.ContainsFunc(own, func(a netip.Addr) bool { return a.Unmap() == ip }) {
			return g.refuse("host address")
		}
		switch kind, err := route(ip); {
		case err != nil:
			return g.refuse("route lookup failed")
		case kind == RouteHost:
			return g.refuse("routed to the host")
		case kind == RouteLink:
			return g.refuse("on the host's link")
		}
	}
	return nil
}

// control is the dialer's Control hook: address is the IP and port the
// socket is about to connect to.
func (g egressGuard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return g.refuse("unparsable dial address")
	}
	return g.check(ap.Addr())
}

// isDenial reports whether err carries the enforcer's refusal.
func isDenial(err error) (*policy.Denial, bool) {
	var d *policy.Denial
	ok := errors.As(err, &d)
	return d, ok
}

// EgressDialer is the Http tools' dialer for tool under env's enforcer:
// one resolution, every address judged by CheckAddr, the host's own
// addresses and the kernel's route, then a connection to one of those very
// addresses (the Control hook judging it again). An MCP server's egress
// proxy dials through it.
func EgressDialer(env *Env, tool policy.Tool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return httpTool{tool: tool}.dialContext(env)
}
