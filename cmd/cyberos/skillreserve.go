package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/cyberos/supervisor/policy"
	"github.com/cyberos/supervisor/supervisor/daemon"
)

// defaultConfigPath is where `make install` puts the daemon's config.
var defaultConfigPath = filepath.Join(daemon.DefaultConfigDir, "supervisor.yaml")

// daemonReserved is what `skill run` reserves of the daemon's files, as
// `serve` does for its own (Config.ReservedPaths): the default config's
// directory, and the config (configPath, given with --config, else the
// default one when it exists) with every path it names. Without a config
// file the built-in defaults name them.
// A --config that cannot be read or is invalid is an error; a default
// config that is invalid still has its directory and the built-in
// defaults' paths reserved, and warn says why its own were not.
func daemonReserved(configPath string, warn func(string, ...any)) ([]string, error) {
	cfg := daemon.DefaultConfig()
	if configPath != "" {
		var err error
		if cfg, err = daemon.LoadConfig(configPath); err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
	} else if _, err := os.Stat(defaultConfigPath); err == nil {
		if c, err := daemon.LoadConfig(defaultConfigPath); err == nil {
			cfg, configPath = c, defaultConfigPath
		} else {
			warn("the default daemon config is invalid: only its directory and the built-in defaults' paths are reserved", "config", defaultConfigPath, "err", err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		warn("the default daemon config cannot be read: only its directory and the built-in defaults' paths are reserved", "config", defaultConfigPath, "err", err)
	}
	return cfg.ReservedPaths(configPath), nil
}

// reservedWarnings says, for each of the skill's x-allowed-files globs that
// reaches a reserved path, which paths it reaches: the file tools refuse
// them whatever the glob says.
func reservedWarnings(skill string, p *policy.Policy, reserved []string) []string {
	over := p.ReservedOverlaps(reserved)
	var out []string
	for _, g := range p.AllowedFiles {
		if paths, ok := over[g]; ok {
			out = append(out, fmt.Sprintf("skill %s: x-allowed-files %q overlaps %s, reserved to the supervisor: the file tools refuse it whatever the glob says", skill, g, strings.Join(paths, ", ")))
			delete(over, g)
		}
	}
	return out
}
