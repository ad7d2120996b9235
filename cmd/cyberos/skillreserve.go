package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cyberos/supervisor/supervisor/daemon"
)

// defaultConfigPath is where `make install` puts the daemon's config.
var defaultConfigPath = filepath.Join(daemon.DefaultConfigDir, "supervisor.yaml")

// daemonReserved is what `skill run` reserves of the daemon's files, as
// `serve` does for its own: the default config's directory, and the config
// (configPath, given with --config, else the default one when it exists)
// with every path it names: skills_dir, state_dir, socket_dir, the
// profiles, the admin socket, the signing key and its public half, the
// fleet's DSN file. Without a config file the built-in defaults name them.
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
	out := []string{daemon.DefaultConfigDir, cfg.StateDir, cfg.SocketDir, cfg.SeccompProfilesDir}
	return append(out, cfg.ReservedPaths(configPath)...), nil
}
