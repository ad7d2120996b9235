package telemetry

import "log/slog"

// ReplaceAttr is the daemon's slog.HandlerOptions.ReplaceAttr: a
// time.Duration reads as Go writes it ("1.5s", "250ms") in both the text
// and the JSON handler (which would otherwise print nanoseconds).
func ReplaceAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
