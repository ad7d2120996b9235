package tools

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cyberos.dev/policy"
)

// egressSource is an injected view of the host: its interface addresses,
// the prefixes the kernel routes to the host and those on its links,
// changeable while a test runs.
type egressSource struct {
	mu       sync.Mutex
	addrs    []netip.Addr
	local    []netip.Prefix
	link     []netip.Prefix
	addrErr  error
	addrRead atomic.Int32
}

func (s *egressSource) hostAddrs() ([]netip.Addr, error) {
	s.addrRead.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.addrs), s.addrErr
}

func (s *egressSource) kernelRoute(ip netip.Addr) (RouteKind, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.local {
		if p.Contains(ip) {
			return RouteHost, nil
		}
	}
	for _, p := range s.link {
		if p.Contains(ip) {
			return RouteLink, nil
		}
	}
	return RouteOut, nil
}

func (s *egressSource) add(a string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs = append(s.addrs, netip.MustParseAddr(a))
}

func egressEnv(t *testing.T, allowLoopback bool, names map[string][]netip.Addr, extra ...string) (*Env, *egressSource) {
	env, _ := htEnv(t, allowLoopback, names, extra...)
	src := &egressSource{}
	env.HostAddrs, env.KernelRoute = src.hostAddrs, src.kernelRoute
	return env, src
}

// hostAddrGlobal is a globally reachable address (AS112-v4) the tests make
// "the host's"; the tables alone would let it through.
const hostAddrGlobal = "192.31.196.9"

// An address counts as the host's from the moment an interface has it: the
// addresses are read at each check, never cached.
func TestEgressNewHostAddressCounts(t *testing.T) {
	env, src := egressEnv(t, false, nil)
	g := egressGuard{env: env, tool: policy.ToolHttpFetch, host: "h.example.com"}
	ip := netip.MustParseAddr(hostAddrGlobal)
	if err := g.check(ip); err != nil {
		t.Fatalf("before the address is the host's: %v", err)
	}
	src.add(hostAddrGlobal)
	d := mtDenial(t, g.check(ip), policy.ReasonDomain, policy.ToolHttpFetch)
	if !strings.Contains(d.Detail, "(host address)") {
		t.Fatalf("denial detail = %q", d.Detail)
	}
	// Its IPv4-mapped form is the same address; so is a mapped form in the
	// host's list.
	mtDenial(t, g.check(netip.MustParseAddr("::ffff:"+hostAddrGlobal)), policy.ReasonDomain, policy.ToolHttpFetch)
	src.add("::ffff:192.31.196.10")
	mtDenial(t, g.check(netip.MustParseAddr("192.31.196.10")), policy.ReasonDomain, policy.ToolHttpFetch)
	// An IPv6 address of the host too.
	src.add("2a00:1450:4001::9")
	mtDenial(t, g.check(netip.MustParseAddr("2a00:1450:4001::9")), policy.ReasonDomain, policy.ToolHttpFetch)
	// A prefix the kernel routes to the host, with no interface address.
	src.local = []netip.Prefix{netip.MustParsePrefix("192.52.193.0/24")}
	d = mtDenial(t, g.check(netip.MustParseAddr("192.52.193.77")), policy.ReasonDomain, policy.ToolHttpFetch)
	if !strings.Contains(d.Detail, "(routed to the host)") {
		t.Fatalf("denial detail = %q", d.Detail)
	}
	// A neighbour on one of the host's broadcast links (a public LAN).
	src.link = []netip.Prefix{netip.MustParsePrefix("192.175.48.0/24"), netip.MustParsePrefix("2a00:1450:4001::/64")}
	for _, s := range []string{"192.175.48.42", "::ffff:192.175.48.42", "2a00:1450:4001::42"} {
		d = mtDenial(t, g.check(netip.MustParseAddr(s)), policy.ReasonDomain, policy.ToolHttpFetch)
		if !strings.Contains(d.Detail, "(on the host's link)") {
			t.Fatalf("%s: denial detail = %q", s, d.Detail)
		}
	}
	// Public addresses that are neither pass.
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"} {
		if err := g.check(netip.MustParseAddr(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	// The host's addresses cannot be read: refused (fail closed).
	src.addrErr = errors.New("netlink: no buffer space")
	mtDenial(t, g.check(netip.MustParseAddr("8.8.8.8")), policy.ReasonDomain, policy.ToolHttpFetch)
}

// AllowLoopback lets loopback through, not the host's other addresses.
func TestEgressAllowLoopbackKeepsHostAddressesRefused(t *testing.T) {
	srv := htBackend(t, false)
	env, src := egressEnv(t, true, map[string][]netip.Addr{"host.example.com": htAddrs(hostAddrGlobal)}, "host.example.com")
	src.add("127.0.0.1")
	src.add(hostAddrGlobal)
	src.local = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	if res, err := htFetch(t, env, map[string]any{"url": "http://api.example.com:" + srv.port + "/x"}); err != nil || res.Status != 200 {
		t.Fatalf("loopback with AllowLoopback: %+v, %v", res, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, u := range []string{
		"http://host.example.com/",
		"http://api.example.com:" + srv.port + "/redirect?to=" + url.QueryEscape("http://host.example.com/"),
	} {
		_, err := NewHttpFetch().Call(ctx, htCall(env, map[string]any{"url": u}))
		d := mtDenial(t, err, policy.ReasonDomain, policy.ToolHttpFetch)
		if !strings.Contains(d.Detail, "(host address)") {
			t.Errorf("%s: denial detail = %q", u, d.Detail)
		}
	}
}

// The dialer's Control hook judges the address each socket connects to, with
// the host's addresses read again: an address that becomes the host's after
// the name's addresses were checked is still refused, before any connect.
func TestEgressControlHookRechecks(t *testing.T) {
	env, src := egressEnv(t, false, map[string][]netip.Addr{"late.example.com": htAddrs(hostAddrGlobal)}, "late.example.com")
	var reads atomic.Int32
	env.HostAddrs = func() ([]netip.Addr, error) {
		if reads.Add(1) == 1 {
			return nil, nil // the first read, before dialling: not the host's yet
		}
		return src.hostAddrs()
	}
	src.add(hostAddrGlobal)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := NewHttpFetch().Call(ctx, htCall(env, map[string]any{"url": "http://late.example.com/"}))
	d := mtDenial(t, err, policy.ReasonDomain, policy.ToolHttpFetch)
	if !strings.Contains(d.Detail, "(host address)") {
		t.Fatalf("denial detail = %q", d.Detail)
	}
	if n := reads.Load(); n != 2 {
		t.Fatalf("host addresses read %d times, want 2 (before dialling, in the Control hook)", n)
	}
}

// Names resolving into the IANA special-purpose blocks the old tables missed
// are refused by the dialer's address check, before any connection.
func TestHttpFetchSpecialPurposeAddresses(t *testing.T) {
	cases := map[string][]netip.Addr{
		"doc1.example.com":      htAddrs("192.0.2.2"),
		"doc2.example.com":      htAddrs("198.51.100.7"),
		"doc3.example.com":      htAddrs("203.0.113.1"),
		"relay.example.com":     htAddrs("192.88.99.1"),
		"reserved.example.com":  htAddrs("240.0.0.1"),
		"bcast.example.com":     htAddrs("255.255.255.255"),
		"mcast.example.com":     htAddrs("224.0.0.251"),
		"thisnet.example.com":   htAddrs("0.1.2.3"),
		"doc6.example.com":      htAddrs("2001:db8::1"),
		"doc6b.example.com":     htAddrs("3fff::1"),
		"srv6.example.com":      htAddrs("5f00::1"),
		"bench6.example.com":    htAddrs("2001:2::1"),
		"mappeddoc.example.com": htAddrs("::ffff:198.51.100.7"),
		"nat64doc.example.com":  htAddrs("64:ff9b::c633:6407"),
	}
	var extra []string
	for name := range cases {
		extra = append(extra, name)
	}
	env, _ := egressEnv(t, true, cases, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for name := range cases {
		_, err := NewHttpFetch().Call(ctx, htCall(env, map[string]any{"url": "http://" + name + "/"}))
		var d *policy.Denial
		if !errors.As(err, &d) || d.Reason != policy.ReasonDomain || !strings.Contains(d.Detail, "refused address") {
			t.Errorf("%s: error = %v, want domain_violation from the address check", name, err)
		}
	}
}

// The system sources: lo's 127.0.0.1 is among the host's addresses and the
// kernel routes it to the host; so is every address of this host, and
// another address of a broadcast interface's subnet is on its link.
func TestEgressSystemSources(t *testing.T) {
	addrs, err := HostAddrs()
	if err != nil {
		t.Fatalf("HostAddrs: %v", err)
	}
	if !slices.Contains(addrs, netip.MustParseAddr("127.0.0.1")) {
		t.Errorf("HostAddrs = %v, want 127.0.0.1 among them", addrs)
	}
	if kind, err := KernelRoute(netip.MustParseAddr("127.0.0.1")); err != nil || kind != RouteHost {
		t.Errorf("KernelRoute(127.0.0.1) = %v, %v; want RouteHost", kind, err)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifi := range ifs {
		as, _ := ifi.Addrs()
		for _, a := range as {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			p, ok := netip.AddrFromSlice(n.IP)
			if p = p.Unmap(); !ok || p.IsLoopback() || p.IsLinkLocalUnicast() {
				continue
			}
			if kind, err := KernelRoute(p); err != nil || kind != RouteHost {
				t.Errorf("KernelRoute(%s), an address of %s, = %v, %v; want RouteHost", p, ifi.Name, kind, err)
			}
			ones, bits := n.Mask.Size()
			other := netip.PrefixFrom(p, ones).Masked().Addr().Next()
			if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagBroadcast == 0 || ifi.Flags&net.FlagPointToPoint != 0 || bits-ones < 2 || other == p {
				continue
			}
			t.Logf("%s on %s: its subnet's %s is on the link", p, ifi.Name, other)
			if kind, err := KernelRoute(other); err != nil || kind != RouteLink {
				t.Errorf("KernelRoute(%s), on %s's subnet, = %v, %v; want RouteLink", other, ifi.Name, kind, err)
			}
		}
	}
}

// BenchmarkEgressCheck is the per-dial cost of the host check with the
// system sources, for one public address: the enforcer's tables, the
// interface addresses (net.InterfaceAddrs) and the route lookup
// (RTM_GETROUTE). A connection pays it twice (before dialling, in Control).
func BenchmarkEgressCheck(b *testing.B) {
	p, err := policy.Parse([]byte("---\nname: b\ndescription: b\nallowed_tools: [HttpFetch]\nx-allowed-domains: [\"example.com\"]\n---\n"))
	if err != nil {
		b.Fatal(err)
	}
	env := &Env{Policy: p, Enforcer: policy.NewEnforcer(p, policy.EnforcerOptions{})}
	g := egressGuard{env: env, tool: policy.ToolHttpFetch, host: "example.com"}
	ip := netip.MustParseAddr("93.184.216.34")
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if err := g.check(ip); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("HostAddrs", func(b *testing.B) {
		for b.Loop() {
			if _, err := HostAddrs(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("KernelRoute", func(b *testing.B) {
		for b.Loop() {
			if _, err := KernelRoute(ip); err != nil {
				b.Fatal(err)
			}
		}
	})
}
