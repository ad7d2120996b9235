package daemon

import (
	"slices"
	"testing"

	"cyberos.dev/supervisor/config"
)

// TestReloadAppliesDefaultsOnly: a changed defaults is applied to new
// invocations; other changed keys are named as needing a restart and not
// applied; reloading the same config again names nothing new.
func TestReloadAppliesDefaultsOnly(t *testing.T) {
	d := &Daemon{cfg: config.Default()}
	next := config.Default()
	next.Defaults.EffortMinutes = 1
	next.MaxConcurrent = 3
	next.SkillsDir = "/srv/other"
	applied, restart := d.Reload(next)
	if !slices.Equal(applied, []string{"defaults"}) || !slices.Equal(restart, []string{"skills_dir", "max_concurrent"}) {
		t.Errorf("applied %v, restart %v", applied, restart)
	}
	if d.currentDefaults().EffortMinutes != 1 || d.cfg.MaxConcurrent != config.Default().MaxConcurrent || d.cfg.SkillsDir != config.Default().SkillsDir {
		t.Errorf("after reload: defaults %+v, cfg max_concurrent %d skills_dir %s", d.currentDefaults(), d.cfg.MaxConcurrent, d.cfg.SkillsDir)
	}
	applied, restart = d.Reload(next)
	if len(applied) != 0 || !slices.Equal(restart, []string{"skills_dir", "max_concurrent"}) {
		t.Errorf("second reload: applied %v, restart %v", applied, restart)
	}
}
