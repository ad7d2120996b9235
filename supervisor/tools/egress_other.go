//go:build !linux

package tools

import "net/netip"

// LocalRoute has no portable route lookup outside Linux; the host-address
// check still applies there.
func LocalRoute(netip.Addr) (bool, error) { return false, nil }
