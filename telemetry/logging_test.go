package telemetry

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestReplaceAttrDurations: a duration reads "1.5s" in the JSON and the
// text handler alike, in a group too; other values are untouched.
func TestReplaceAttrDurations(t *testing.T) {
	var js, txt bytes.Buffer
	opts := &slog.HandlerOptions{ReplaceAttr: ReplaceAttr}
	for _, l := range []*slog.Logger{slog.New(slog.NewJSONHandler(&js, opts)), slog.New(slog.NewTextHandler(&txt, opts))} {
		l.Info("invocation ended", "duration", 1500*time.Millisecond, "exit_code", 7, slog.Group("g", "wait", 250*time.Millisecond))
	}
	var rec map[string]any
	if err := json.Unmarshal(js.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["duration"] != "1.5s" || rec["exit_code"] != float64(7) || rec["g"].(map[string]any)["wait"] != "250ms" {
		t.Errorf("JSON: %s", js.String())
	}
	if !strings.Contains(txt.String(), "duration=1.5s") || !strings.Contains(txt.String(), "g.wait=250ms") {
		t.Errorf("text: %s", txt.String())
	}
}
