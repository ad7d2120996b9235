//go:build !linux

package statedir

import "os"

// Datasync makes f's written data durable (on macOS, File.Sync is
// F_FULLFSYNC).
func Datasync(f *os.File) error { return f.Sync() }
