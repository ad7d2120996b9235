package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/seccomp/profiletool"
	"cyberos.dev/supervisor/sandbox"
)

// Exit statuses of `cyberos seccomp …` (README "Seccomp profiles"):
// lint 0 = every file loads and compiles (warnings allowed unless
// --strict), 1 = an error (or a warning with --strict); diff 0 = same,
// 1 = different; import 1 = the input cannot be converted; 2 = bad usage or
// an unreadable/invalid profile where one was needed to answer.
func newSeccompCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "seccomp", Short: "Check, compare, explain, import and record seccomp profiles"}
	cmd.AddCommand(newSeccompLintCmd(), newSeccompDiffCmd(), newSeccompExplainCmd(), newSeccompImportCmd(), newSeccompRecordCmd())
	return cmd
}

func newSeccompLintCmd() *cobra.Command {
	var strict, asJSON bool
	cmd := &cobra.Command{
		Use:   "lint FILE...",
		Short: "Check profiles as the sandbox loads them, compile them with libseccomp, warn about dangerous allowances",
		Long: `Check each profile as the sandbox would load it: strict decode (unknown or
duplicate keys are errors), syscall names resolved by libseccomp for this
architecture, a default action that denies, no rule libcontainer would drop
or OR; then compile it with libseccomp for the native architecture, and
warn about dangerous allowances (mount, setns, bpf, ptrace, clone or unshare
with namespace flags, ioctl without argument filters, unrestricted
personality, …).

Exit status: 0 when every file is usable (warnings are printed), 1 when a
file has an error, or a warning with --strict.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			out := cmd.OutOrStdout()
			var reports []profiletool.LintReport
			bad := 0
			for _, f := range files {
				r := profiletool.LintProfile(f)
				reports = append(reports, r)
				if r.Error != "" || (strict && len(r.Warnings) > 0) {
					bad++
				}
			}
			if asJSON {
				if err := json.NewEncoder(out).Encode(reports); err != nil {
					return err
				}
			} else {
				for _, r := range reports {
					printLint(out, r)
				}
			}
			if bad > 0 {
				return &exitError{exitOutcome, fmt.Errorf("%d of %d profiles failed", bad, len(files))}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&strict, "strict", false, "fail on warnings too")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON array of reports")
	return cmd
}

func printLint(w io.Writer, r profiletool.LintReport) {
	if r.Error != "" {
		fmt.Fprintf(w, "%s: ERROR: %s\n", r.File, r.Error)
		return
	}
	for _, wn := range r.Warnings {
		where := wn.Rule
		if where != "" {
			where = " (" + where + ")"
		}
		fmt.Fprintf(w, "%s: warning: %s%s\n", r.File, wn.Message, where)
	}
	if len(r.NotNative) > 0 {
		fmt.Fprintf(w, "%s: note: %d names are not syscalls of this architecture and decide nothing here: %s\n", r.File, len(r.NotNative), strings.Join(r.NotNative, ", "))
	}
	fmt.Fprintf(w, "%s: ok: %d syscalls allowed, %d BPF instructions (native architecture), %d warnings\n",
		r.File, r.Allowed, r.BPFInstructions, len(r.Warnings))
}

func newSeccompDiffCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "diff A B",
		Short: "Compare two profiles by what they decide: syscalls added, removed, treated differently",
		Long: `Compare two profiles by decision, not by text: for each syscall, the rules
that differ from the default action in A and in B. "+" a rule for it exists
only in B, "-" only in A, "~" both, different (conditions shown). Changes of
the default action, architectures and flags are listed first.

Exit status: 0 same decisions, 1 different, 2 a profile cannot be loaded.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, a []string) error {
			d, err := profiletool.DiffProfiles(a[0], a[1])
			if err != nil {
				return &exitError{exitUsage, err}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := json.NewEncoder(out).Encode(d); err != nil {
					return err
				}
			} else {
				for _, s := range d.Settings {
					fmt.Fprintf(out, "! %s\n", s)
				}
				for _, e := range d.Syscalls {
					switch e.Change {
					case "added":
						fmt.Fprintf(out, "+ %s: %s\n", e.Syscall, strings.Join(e.New, "; "))
					case "removed":
						fmt.Fprintf(out, "- %s: %s\n", e.Syscall, strings.Join(e.Old, "; "))
					default:
						fmt.Fprintf(out, "~ %s: %s → %s\n", e.Syscall, strings.Join(e.Old, "; "), strings.Join(e.New, "; "))
					}
				}
				if len(d.Ignored) > 0 {
					fmt.Fprintf(out, "(%d names that are not syscalls of this architecture ignored: %s)\n", len(d.Ignored), strings.Join(d.Ignored, ", "))
				}
				if d.Empty() {
					fmt.Fprintln(out, "same decisions")
				}
			}
			if !d.Empty() {
				return &exitError{exitOutcome, nil}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the difference as JSON")
	return cmd
}

func newSeccompExplainCmd() *cobra.Command {
	var asJSON, allRules bool
	cmd := &cobra.Command{
		Use:   "explain FILE SYSCALL [ARG...]",
		Short: "Say which rule of a profile decides a syscall, and how",
		Long: `Say which rule decides SYSCALL: an unconditional rule, conditional rules
(with their conditions; the default action when none matches), the default
action, or runc's ENOSYS answer for syscalls newer than any the profile
names. Masked tests of one argument that leave out a few values (the
default profile's ioctl rules) print as one line saying which; --rules
lists each rule. With ARGs (numbers, 0x… hex allowed, or names such as
TIOCSTI or CLONE_NEWUSER|SIGCHLD; at most 6), also run the compiled filter
on exactly that call and print its verdict. A name is refused at an
argument that does not take it: TIOCSTI is ioctl's argument 1, so
"ioctl 0 TIOCSTI".`,
		Args: cobra.RangeArgs(2, 8),
		RunE: func(cmd *cobra.Command, a []string) error {
			var args []uint64
			for i, s := range a[2:] {
				v, err := profiletool.ArgValue(a[1], i, s)
				if err != nil {
					return &exitError{exitUsage, err}
				}
				args = append(args, v)
			}
			ex, err := profiletool.ExplainProfile(a[0], a[1], args)
			if err != nil {
				return &exitError{exitUsage, err}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(ex)
			}
			printExplanation(out, ex, allRules)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the explanation as JSON (rules and summary both)")
	cmd.Flags().BoolVar(&allRules, "rules", false, "list every rule, also where one summary line says what they decide")
	return cmd
}

// printExplanation writes ex for an operator. Rules that ex.Summary sums up
// print as that one line, unless allRules.
func printExplanation(w io.Writer, ex profiletool.Explanation, allRules bool) {
	num := fmt.Sprintf("number %d", ex.Number)
	if ex.Number < 0 {
		num = "not a system call of this architecture"
	}
	fmt.Fprintf(w, "%s (%s) in %s\n", ex.Syscall, num, ex.File)
	summarize := ex.Summary != "" && !allRules
	var summed []string // the rules the summary stands for, which are those in effect
	for _, r := range ex.Rules {
		if summarize && r.Ignored == "" {
			summed = append(summed, r.Rule)
		}
	}
	for _, r := range ex.Rules {
		if summarize && r.Ignored == "" {
			if r.Rule == summed[0] {
				fmt.Fprintf(w, "  %s to %s (%d rules; --rules lists them): %s\n", summed[0], summed[len(summed)-1], len(summed), ex.Summary)
			}
			continue
		}
		line := fmt.Sprintf("  %s: %s", r.Rule, r.Action)
		if len(r.Conditions) > 0 {
			line += " when " + strings.Join(r.Conditions, " && ")
		} else {
			line += ", unconditionally"
		}
		if r.Ignored != "" {
			line += " [no effect: " + r.Ignored + "]"
		}
		fmt.Fprintln(w, line)
	}
	switch ex.Decision {
	case "unconditional":
		fmt.Fprintln(w, "decided by the unconditional rule above, whatever the arguments")
	case "conditional":
		if summarize {
			fmt.Fprintf(w, "decided by those rules: the values they except get the default action %s\n", ex.Default)
			break
		}
		if ex.Summary != "" {
			fmt.Fprintf(w, "in short: %s; those: default action %s\n", ex.Summary, ex.Default)
		}
		fmt.Fprintf(w, "decided by the conditional rules above (any one whose conditions all hold applies); when none matches: default action %s\n", ex.Default)
	case "enosys":
		fmt.Fprintf(w, "no rule names it and it is newer than every syscall the profile names: ERRNO(ENOSYS) (runc's stub, so libc falls back); default action %s not reached\n", ex.Default)
	default:
		fmt.Fprintf(w, "no rule names it: default action %s\n", ex.Default)
	}
	if ex.Verdict != "" {
		var hex []string
		for _, a := range ex.Args {
			hex = append(hex, fmt.Sprintf("%#x", a))
		}
		fmt.Fprintf(w, "%s(%s) → %s\n", ex.Syscall, strings.Join(hex, ", "), ex.Verdict)
	}
}

func newSeccompImportCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "import DOCKER.json",
		Short: "Convert a Docker-format profile into ours (native architecture, no capabilities)",
		Long: `Convert a Docker-format profile (archMap, includes, excludes) with moby's
own converter (github.com/moby/profiles/seccomp), resolved for a process
with no capabilities (our sandbox has none, so CAP_SYS_ADMIN-gated rules such
as mount are left out), this kernel's version, and the native architecture
only. Syscall names this libseccomp does not know are dropped and listed.
The result is checked like any profile; it goes to stdout, or to -o FILE.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			data, err := os.ReadFile(a[0])
			if err != nil {
				return &exitError{exitUsage, err}
			}
			res, err := profiletool.ImportDockerProfile(data)
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "cyberos: %s: %v\n", a[0], err)
				return &exitError{exitOutcome, nil}
			}
			for _, n := range res.Notes {
				fmt.Fprintln(cmd.ErrOrStderr(), "note:", n)
			}
			if output == "" {
				_, err := cmd.OutOrStdout().Write(res.Profile)
				return err
			}
			if err := os.WriteFile(output, res.Profile, 0o644); err != nil {
				return &exitError{exitUsage, err}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the profile to FILE instead of stdout")
	return cmd
}

func newSeccompRecordCmd() *cobra.Command {
	var f runFlags
	var output string
	cmd := &cobra.Command{
		Use:   "record DIR",
		Short: "Run the skill in DIR once, see every syscall it makes, and write the minimal profile it needs",
		Long: `Run the skill in DIR once, exactly as ` + "`skill run`" + ` would (sandbox, broker, audit),
but under the recording form of its own profile (x-seccomp-profile, default
"default"): every call the profile allows is reported to the supervisor
through a seccomp user-notification listener and then let through; every
refusal stays. Then write the minimal profile: the base profile's allow
rules cut down to what was used (conditional rules kept whole), its refusal
rules and default action kept. Calls of runc's init after the filter is
installed and of cyberos-init (the sandbox's pid 1) are included.

The envelope goes to stderr; the profile to stdout or -o FILE. Give the same
--args a real run uses: calls on paths not taken are not recorded.
Exit status: 0 profile written and the skill succeeded; 1 the skill did not
succeed (the profile is still written, but may be incomplete); 2, 3 as for
` + "`skill run`" + `.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			return recordSkill(cmd, a[0], f, output)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&output, "output", "o", "", "write the profile to FILE instead of stdout")
	fl.StringVar(&f.args, "args", "", "the skill's args, one JSON value (default {})")
	fl.StringVar(&f.argsFile, "args-file", "", "read the args from this file")
	fl.StringVar(&f.tenant, "tenant", "00000000-0000-0000-0000-000000000000", "tenant id (UUID)")
	fl.DurationVar(&f.deadline, "deadline", 0, "shorten the deadline below effort_minutes (e.g. 4s)")
	fl.StringVar(&f.stateDir, "state-dir", "/var/lib/cyberos", "audit, memory stores and logs")
	fl.StringVar(&f.profilesDir, "seccomp-profiles", "", "directory of seccomp profiles (default: /etc/cyberos/seccomp-profiles, else the repository's seccomp-profiles/)")
	fl.StringVar(&f.runDir, "run-dir", "/run/cyberos", "runtime state: containers, rootfs skeleton, locks")
	fl.StringVar(&f.socketDir, "socket-dir", "", "private directory of broker sockets (default <run-dir>/sockets)")
	fl.StringVar(&f.logLevel, "log-level", "warn", "debug, info, warn or error")
	fl.BoolVar(&f.allowLoopbackHTTP, "allow-loopback-http", false, "let Http tools reach 127.0.0.0/8 and ::1 (tests only)")
	_ = fl.MarkHidden("run-dir")
	_ = fl.MarkHidden("allow-loopback-http")
	return cmd
}

func recordSkill(cmd *cobra.Command, dir string, f runFlags, output string) error {
	pol, err := policy.LoadDir(dir)
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("invalid skill %s: %w", dir, err)}
	}
	profiles, err := resolveProfilesDir(f.profilesDir)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	f.profilesDir = profiles
	base := filepath.Join(profiles, pol.SeccompProfile+".json")
	f.recorder = sandbox.NewSyscallRecorder()
	stderr := cmd.ErrOrStderr()
	runErr := runSkill(stderr, dir, f)
	var ee *exitError
	if runErr != nil && (!errors.As(runErr, &ee) || ee.code != exitOutcome) {
		return runErr
	}
	if err := f.recorder.Err(); err != nil {
		return &exitError{exitRefused, fmt.Errorf("recording failed, no profile written: %w", err)}
	}
	used := f.recorder.Syscalls()
	prof, err := profiletool.RecordProfile(base, used)
	if err != nil {
		return &exitError{exitRefused, err}
	}
	fmt.Fprintf(stderr, "recorded %d distinct syscalls under %s: %s\n", len(used), base, strings.Join(used, " "))
	if output == "" {
		if _, err := cmd.OutOrStdout().Write(prof); err != nil {
			return err
		}
	} else if err := os.WriteFile(output, prof, 0o644); err != nil {
		return &exitError{exitUsage, err}
	} else {
		fmt.Fprintf(stderr, "profile written to %s\n", output)
	}
	if runErr != nil {
		fmt.Fprintln(stderr, "cyberos: the skill did not succeed; the profile may be incomplete")
		return &exitError{exitOutcome, nil}
	}
	return nil
}
