package sqliteerr

import (
	"errors"
	"fmt"
	"testing"
)

type coded int

func (c coded) Error() string { return fmt.Sprintf("sqlite code %d", int(c)) }
func (c coded) Code() int     { return int(c) }

func TestIsBusy(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("plain"), false},
		{coded(5), true},                            // SQLITE_BUSY
		{coded(6), true},                            // SQLITE_LOCKED
		{coded(5 | 2<<8), true},                     // SQLITE_BUSY_SNAPSHOT
		{coded(1), false},                           // SQLITE_ERROR
		{fmt.Errorf("begin: %w", coded(5)), true},   // wrapped
		{fmt.Errorf("begin: %w", coded(19)), false}, // SQLITE_CONSTRAINT
	} {
		if got := IsBusy(tc.err); got != tc.want {
			t.Errorf("IsBusy(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
