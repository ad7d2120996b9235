//go:build !linux

package auditstore

import "os"

// datasync makes f's written data durable (on macOS, File.Sync is
// F_FULLFSYNC).
func datasync(f *os.File) error { return f.Sync() }
