package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"cyberos.dev/audit/auditstore"
	"cyberos.dev/fleet"
	"cyberos.dev/supervisor/config"
	"cyberos.dev/supervisor/internal/daemon"
	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"
)

// preflight makes every check `serve` makes before it changes anything on
// the host, so `serve --check` and `serve` refuse the same configs: the
// sandbox prerequisites, every path the config names (kind, and that serve
// can create what is missing), the admin socket, the signing key, the
// default seccomp profile, the cgroup placement (for this process), the
// metrics address and the OpenTelemetry variables. The error joins one line
// per problem, each naming its config key (placementKey names where
// sb.CgroupPlacement came from: the key or serve's flag). Warnings are what
// serve logs and runs without: skills that are not usable, an admin socket
// or metrics address a running daemon holds.
func preflight(cfg config.Config, configPath string, sb sandbox.Options, placementKey string, earlier ...string) (warnings []string, err error) {
	problems := earlier // "key: what is wrong"; earlier: the config file's own
	bad := func(key, format string, a ...any) { problems = append(problems, key+": "+fmt.Sprintf(format, a...)) }
	sandboxErr := sandbox.Preflight(sb)

	if why := mustBeDir(cfg.SkillsDir); why != "" {
		bad("skills_dir", "%s %s", cfg.SkillsDir, why)
	} else if skills, problems, err := daemon.InstalledSkills(cfg.SkillsDir); err != nil {
		bad("skills_dir", "%v", err)
	} else {
		for _, p := range problems {
			warnings = append(warnings, fmt.Sprintf("skill %s is not usable: %v", p.ID, p.Err))
		}
		reserved := cfg.ReservedPaths(configPath)
		for _, p := range skills {
			warnings = append(warnings, reservedWarnings(p.Name, p, reserved)...)
		}
	}
	if why := mustBeDir(cfg.SeccompProfilesDir); why != "" {
		bad("seccomp_profiles_dir", "%s %s", cfg.SeccompProfilesDir, why)
	} else if err := checkProfile(cfg.SeccompProfilesDir, cfg.Defaults.SeccompProfile); err != nil {
		bad("defaults.seccomp_profile", "%v", err)
	}

	// serve creates state_dir, but not its parent: a mistyped path must
	// not silently start a new audit chain.
	if why := mustBeDirOrCreatable(cfg.StateDir, false); why != "" {
		bad("state_dir", "%s %s", cfg.StateDir, why)
	}
	if why := mustBeDirOrCreatable(cfg.SocketDir, true); why != "" {
		bad("socket_dir", "%s %s", cfg.SocketDir, why)
	}
	if why := mustBeDirOrCreatable(filepath.Dir(cfg.AdminSocket), true); why != "" {
		bad("admin_socket", "its directory %s %s", filepath.Dir(cfg.AdminSocket), why)
	} else if fi, err := os.Lstat(cfg.AdminSocket); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			bad("admin_socket", "%s exists and is not a socket", cfg.AdminSocket)
		} else if c, err := net.Dial("unix", cfg.AdminSocket); err == nil {
			c.Close()
			warnings = append(warnings, fmt.Sprintf("admin_socket: %s is in use by a running daemon: serve will refuse to start until it stops", cfg.AdminSocket))
		}
	}

	if err := cfg.CheckSigningKeyPath(configPath); err != nil {
		problems = append(problems, strings.TrimPrefix(err.Error(), config.ErrConfig.Error()+": "))
	} else if key := cfg.SigningKeyPath(configPath); fileExists(key) {
		if _, err := auditstore.LoadSigningKey(key, false); err != nil {
			bad("audit.signing_key", "%v", err)
		}
	} else if why := mustBeDir(filepath.Dir(key)); why != "" {
		bad("audit.signing_key", "%s does not exist and its directory (where serve makes it) %s %s", key, filepath.Dir(key), why)
	}
	if w := openFilesWarning(cfg, readSysctl("fs.file-max"), readSysctl("vm.max_map_count")); w != "" {
		warnings = append(warnings, w)
	}
	if err := checkPlacement(sb); err != nil {
		bad(placementKey, "%v", err)
	}
	if cfg.MetricsListen != "" {
		if l, err := net.Listen("tcp", cfg.MetricsListen); errors.Is(err, syscall.EADDRINUSE) {
			warnings = append(warnings, fmt.Sprintf("metrics_listen: %s is in use (by a running daemon?): serve will refuse to start until it is free", cfg.MetricsListen))
		} else if err != nil {
			bad("metrics_listen", "%s cannot be listened on: %v", cfg.MetricsListen, err)
		} else {
			l.Close()
		}
	}
	if cfg.OTLPEndpoint != "" || telemetry.OTLPFromEnv() {
		if err := telemetry.CheckOTLPEnv(); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if cfg.Fleet.Enabled() {
		if dsn, err := cfg.Fleet.DSN(); err != nil {
			problems = append(problems, strings.TrimPrefix(err.Error(), config.ErrConfig.Error()+": "))
		} else if _, err := fleet.ParseDSN(dsn); err != nil {
			bad("fleet.postgres_dsn", "%v", err)
		}
		if _, err := cfg.Fleet.ResolvedHostID(); err != nil {
			problems = append(problems, strings.TrimPrefix(err.Error(), config.ErrConfig.Error()+": "))
		}
	}
	problems = append(problems, cfg.MCPPreflight(func(name string) error { return checkProfile(cfg.SeccompProfilesDir, name) })...)
	switch {
	case sandboxErr != nil && len(problems) > 0:
		return warnings, fmt.Errorf("%w; and %w", sandboxErr, configError(problems))
	case sandboxErr != nil:
		return warnings, sandboxErr
	case len(problems) > 0:
		return warnings, configError(problems)
	}
	return warnings, nil
}

// configError is one ErrConfig naming every problem, one per line when
// there are several.
func configError(problems []string) error {
	if len(problems) == 1 {
		return fmt.Errorf("%w: %s", config.ErrConfig, problems[0])
	}
	for i, p := range problems { // a problem quoting YAML source spans lines
		problems[i] = strings.ReplaceAll(p, "\n", "\n    ")
	}
	return fmt.Errorf("%w, %d problems:\n  %s", config.ErrConfig, len(problems), strings.Join(problems, "\n  "))
}

// mustBeDir says what is wrong with path as a directory ("" when nothing).
func mustBeDir(path string) string {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR): // a file on the way
		return "does not exist"
	case err != nil:
		return fmt.Sprintf("cannot be read: %v", err)
	case !fi.IsDir():
		return "is not a directory"
	}
	return ""
}

// mustBeDirOrCreatable says what is wrong with path as a directory that
// serve creates when it is missing: its parent must be a directory, or,
// with parents, the nearest existing ancestor must be.
func mustBeDirOrCreatable(path string, parents bool) string {
	why := mustBeDir(path)
	if why != "does not exist" {
		return why
	}
	dir := filepath.Dir(path)
	for parents && dir != filepath.Dir(dir) && mustBeDir(dir) == "does not exist" {
		dir = filepath.Dir(dir)
	}
	if w := mustBeDir(dir); w != "" {
		return fmt.Sprintf("does not exist, and %s %s", dir, w)
	}
	return ""
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
