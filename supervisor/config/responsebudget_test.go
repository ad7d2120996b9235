package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"cyberos.dev/supervisor/internal/broker"
)

// TestResponseBudgetConfig: response_budget_mb defaults to the broker's
// budget, is taken in MiB, and refuses a budget no large Read fits in.
func TestResponseBudgetConfig(t *testing.T) {
	load := func(yaml string) (Config, error) {
		p := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(p, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		return Load(p)
	}
	c, err := load("version: 1\n")
	if err != nil || c.ResponseBudget() != broker.DefaultDaemonBudget {
		t.Fatalf("default: %v, %d", err, c.ResponseBudget())
	}
	if c, err = load("version: 1\nresponse_budget_mb: 512\n"); err != nil || c.ResponseBudget() != 512<<20 {
		t.Fatalf("512 MiB: %v, %d", err, c.ResponseBudget())
	}
	for _, v := range []string{"16", "-1", "2000000"} {
		_, err := load("version: 1\nresponse_budget_mb: " + v + "\n")
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "response_budget_mb") {
			t.Errorf("response_budget_mb %s: %v, want ErrConfig naming it", v, err)
		}
	}
}
