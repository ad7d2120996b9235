//go:build !linux

package tools

import "net/netip"

// KernelRoute has no portable route lookup outside Linux; the host-address
// check still applies there.
func KernelRoute(netip.Addr) (RouteKind, error) { return RouteOut, nil }
