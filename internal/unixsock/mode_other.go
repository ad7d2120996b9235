//go:build !linux

package unixsock

import "os"

// setModeBeforeBind does nothing here: only Linux takes a socket file's mode
// from the socket, so Listen's chmod after the bind sets it.
func setModeBeforeBind(uintptr, os.FileMode) error { return nil }
