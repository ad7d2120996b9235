package config

import (
	"fmt"
	"time"
)

// Window is idempotency_window: a Go duration ("24h", "30m").
type Window time.Duration

// UnmarshalText reads a Go duration.
func (w *Window) UnmarshalText(b []byte) error {
	d, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("must be a duration like 24h: %w", err)
	}
	*w = Window(d)
	return nil
}
