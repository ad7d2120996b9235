package policy

import (
	"net/netip"
	"testing"
)

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// TestCheckAddrSpecialPurpose: every block of the IANA IPv4 and IPv6
// special-purpose registries that is not globally reachable, and multicast,
// is refused at its first and last address; an IPv4 block also in its
// IPv4-mapped and NAT64 forms. The list is written out here, not taken from
// the tables it checks.
func TestCheckAddrSpecialPurpose(t *testing.T) {
	refused := []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.0.0/29", "192.0.0.8/32", "192.0.0.170/31", "192.0.2.0/24",
		"192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
		"224.0.0.0/4", "240.0.0.0/4", "255.255.255.255/32",
		"::/128", "::ffff:0:0/96", "64:ff9b:1::/48", "100::/64", "100:0:0:1::/64",
		"2001::/32", "2001:2::/48", "2001:10::/28", "2001:db8::/32", "2002::/16",
		"3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "ff00::/8",
	}
	e := newEnforcer(t, "allowed_tools: [HttpFetch]", EnforcerOptions{})
	lo := newEnforcer(t, "allowed_tools: [HttpFetch]", EnforcerOptions{AllowLoopback: true})
	refuse := func(what string, ip netip.Addr) {
		t.Helper()
		checkReason(t, what+" "+ip.String(), e.CheckAddr(ToolHttpFetch, "h.example.com", ip), ToolHttpFetch, ReasonDomain)
		checkReason(t, what+" "+ip.String()+" AllowLoopback", lo.CheckAddr(ToolHttpFetch, "h.example.com", ip), ToolHttpFetch, ReasonDomain)
	}
	for _, s := range refused {
		p := netip.MustParsePrefix(s)
		for _, ip := range []netip.Addr{p.Addr(), lastAddr(p)} {
			refuse(s, ip)
			if ip.Is4() {
				b := ip.As4()
				refuse(s+" mapped", netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}))
				refuse(s+" nat64", netip.AddrFrom16([16]byte{0: 0, 1: 0x64, 2: 0xff, 3: 0x9b, 12: b[0], 13: b[1], 14: b[2], 15: b[3]}))
			}
		}
	}
	// Globally reachable: public unicast, including the registries' globally
	// reachable blocks and the addresses just outside refused ones.
	for _, s := range []string{
		"8.8.8.8", "1.1.1.1", "::ffff:8.8.8.8", "64:ff9b::808:808",
		"2606:4700::1111", "2001:4860:4860::8888", "2a00:1450:4001::1",
		"192.31.196.1", "192.52.193.1", "192.175.48.1", // AS112-v4, AMT, AS112 direct delegation
		"2001:1::1", "2001:1::2", "2001:3::1", "2001:4:112::1", "2001:20::1", "2001:3f::1", "2620:4f:8000::1",
		"192.0.1.255", "192.0.3.0", "198.17.255.255", "198.20.0.0", "198.51.99.255", "198.51.101.0",
		"203.0.112.255", "203.0.114.0", "223.255.255.255", "2001:200::1", "2001:db9::1", "3fff:1000::1", "5eff::1", "5f01::1",
	} {
		ip := netip.MustParseAddr(s)
		checkReason(t, s, e.CheckAddr(ToolHttpFetch, "h.example.com", ip), ToolHttpFetch, "")
	}
}
