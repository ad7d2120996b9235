package daemon

import (
	"reflect"
	"strings"

	"cyberos.dev/supervisor/config"
)

// reloadable are the config keys SIGHUP applies to a running daemon: the
// defaults each new invocation gets. The skills need no key: skills_dir is
// read at each invocation. Every other key shapes what is already running
// (sockets, paths, the audit store, the pools) and needs a restart.
var reloadable = map[string]bool{"defaults": true}

// currentDefaults are the defaults a new invocation gets: the config's, or
// the last reload's.
func (d *Daemon) currentDefaults() config.Defaults {
	if p := d.reloadedDefaults.Load(); p != nil {
		return *p
	}
	return d.cfg.Defaults
}

// Reload applies what of next can change while the daemon runs and
// reports the top-level keys that differ from what the daemon runs with:
// applied (now in effect for new invocations) and restart (ignored until
// the daemon restarts).
func (d *Daemon) Reload(next config.Config) (applied, restart []string) {
	running := d.cfg
	running.Defaults = d.currentDefaults()
	cur, nv := reflect.ValueOf(running), reflect.ValueOf(next)
	for i := 0; i < cur.NumField(); i++ {
		key, _, _ := strings.Cut(cur.Type().Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" || reflect.DeepEqual(cur.Field(i).Interface(), nv.Field(i).Interface()) {
			continue
		}
		if reloadable[key] {
			applied = append(applied, key)
		} else {
			restart = append(restart, key)
		}
	}
	for _, k := range applied {
		if k == "defaults" {
			def := next.Defaults
			d.reloadedDefaults.Store(&def)
		}
	}
	return applied, restart
}
