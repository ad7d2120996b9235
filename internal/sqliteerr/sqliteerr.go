// Package sqliteerr classifies SQLite errors the audit and memory stores
// both retry on.
package sqliteerr

import "errors"

// IsBusy reports whether err carries SQLite's SQLITE_BUSY (5) or
// SQLITE_LOCKED (6), extended codes included.
func IsBusy(err error) bool {
	var coder interface{ Code() int }
	if errors.As(err, &coder) {
		c := coder.Code() & 0xff
		return c == 5 || c == 6
	}
	return false
}
