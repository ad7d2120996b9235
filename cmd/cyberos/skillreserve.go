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

// runConfig is the daemon config `skill run` takes, loaded once for the
// files it reserves, its limits' ceilings, its fleet's witness and its MCP
// servers: --config's, else the default one when it exists and is valid,
// else the built-in defaults (Path "").
type runConfig struct {
	daemon.Config
	Path string
}

// loadRunConfig loads the config at configPath, else the default one. A
// --config that cannot be read or is invalid is an error; a default config
// that is invalid gives the built-in defaults, and warn says why.
func loadRunConfig(configPath string, warn func(string, ...any)) (runConfig, error) {
	if configPath != "" {
		cfg, err := daemon.LoadConfig(configPath)
		if err != nil {
			return runConfig{}, fmt.Errorf("--config: %w", err)
		}
		return runConfig{cfg, configPath}, nil
	}
	if _, err := os.Stat(defaultConfigPath); err == nil {
		c, err := daemon.LoadConfig(defaultConfigPath)
		if err == nil {
			return runConfig{c, defaultConfigPath}, nil
		}
		warn("the default daemon config is invalid: only its directory and the built-in defaults' paths are reserved, with the built-in ceilings", "config", defaultConfigPath, "err", err)
	} else if !errors.Is(err, fs.ErrNotExist) {
		warn("the default daemon config cannot be read: only its directory and the built-in defaults' paths are reserved, with the built-in ceilings", "config", defaultConfigPath, "err", err)
	}
	return runConfig{Config: daemon.DefaultConfig()}, nil
}

// reserved is what `skill run` reserves of the daemon's files, as `serve`
// does for its own: the default config's directory, and the config with
// every path it names: skills_dir, state_dir, socket_dir, the profiles,
// the admin socket, the signing key and its public half, the fleet's DSN
// file, the MCP servers' secret files. Without a config file the built-in
// defaults name them.
func (c runConfig) reserved() []string {
	out := []string{daemon.DefaultConfigDir, c.StateDir, c.SocketDir, c.SeccompProfilesDir}
	return append(out, c.ReservedPaths(c.Path)...)
}

// daemonReserved is loadRunConfig's reserved paths.
func daemonReserved(configPath string, warn func(string, ...any)) ([]string, error) {
	c, err := loadRunConfig(configPath, warn)
	if err != nil {
		return nil, err
	}
	return c.reserved(), nil
}
