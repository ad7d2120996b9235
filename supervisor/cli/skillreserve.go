package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor/config"
)

// defaultConfigPath is where `make install` puts the daemon's config.
var defaultConfigPath = filepath.Join(config.DefaultConfigDir, "supervisor.yaml")

// runConfig is the daemon config `skill run` takes, loaded once for the
// files it reserves, its limits' ceilings, its fleet's witness and its MCP
// servers: --config's, else the default one when it exists and is valid,
// else the built-in defaults (Path "").
type runConfig struct {
	config.Config
	Path string
}

// loadRunConfig loads the config at configPath, else the default one. A
// --config that cannot be read or is invalid is an error; a default config
// that is invalid gives the built-in defaults, and warn says why.
func loadRunConfig(configPath string, warn func(string, ...any)) (runConfig, error) {
	if configPath != "" {
		cfg, err := config.Load(configPath)
		if err != nil {
			return runConfig{}, fmt.Errorf("--config: %w", err)
		}
		return runConfig{cfg, configPath}, nil
	}
	if _, err := os.Stat(defaultConfigPath); err == nil {
		c, err := config.Load(defaultConfigPath)
		if err == nil {
			return runConfig{c, defaultConfigPath}, nil
		}
		warn("the default daemon config is invalid: only its directory and the built-in defaults' paths are reserved, with the built-in ceilings", "config", defaultConfigPath, "err", err)
	} else if !errors.Is(err, fs.ErrNotExist) {
		warn("the default daemon config cannot be read: only its directory and the built-in defaults' paths are reserved, with the built-in ceilings", "config", defaultConfigPath, "err", err)
	}
	return runConfig{Config: config.Default()}, nil
}

// reserved is what `skill run` reserves of the daemon's files, as `serve`
// does for its own (Config.ReservedPaths): the dedicated config directory,
// and the config with every path it names. Without a config file the
// built-in defaults name them.
func (c runConfig) reserved() []string { return c.ReservedPaths(c.Path) }

// daemonReserved is loadRunConfig's reserved paths.
func daemonReserved(configPath string, warn func(string, ...any)) ([]string, error) {
	c, err := loadRunConfig(configPath, warn)
	if err != nil {
		return nil, err
	}
	return c.reserved(), nil
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
