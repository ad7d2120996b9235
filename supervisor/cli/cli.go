// Package cli is the cyberos command: the skill supervisor's CLI and its
// daemon (`cyberos serve`). cmd/cyberos is its main; the sandboxes it runs
// are made by cyberos-spawn, the creation helper beside it.
package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"cyberos.dev/supervisor/sandbox"
	"cyberos.dev/telemetry"
)

func init() {
	// On macOS the sandbox re-executes this binary as the rlimit shim; that
	// must happen before anything else runs.
	sandbox.Reexec()
}

// exitError carries an exit status out of a command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Exit statuses of the command-line contract.
const (
	exitOK      = 0
	exitOutcome = 1 // the skill ran and did not succeed
	exitUsage   = 2 // bad usage or invalid skill
	exitRefused = 3 // refused before dispatch
)

// Main runs the cyberos command with os.Args and exits with its status.
func Main() {
	root := newRootCmd()
	err := root.Execute()
	if err == nil {
		return
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "cyberos:", ee.err)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "cyberos:", err)
	os.Exit(exitUsage)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "cyberos",
		Short:         "Run AI-agent skills in a kernel sandbox, with every tool call brokered",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionText(),
	}
	root.SetVersionTemplate("{{.Version}}")
	skill := &cobra.Command{Use: "skill", Short: "Run and check skills"}
	skill.AddCommand(newRunCmd(), newValidateCmd(), newInvokeCmd(), newBrokerCmd(), newListCmd())
	root.AddCommand(newServeCmd(), newPsCmd(), newInspectCmd(), newLogsCmd(), newCancelCmd(), newStatusCmd(), newEventsCmd(), newReplayCmd())
	root.AddCommand(skill, newMCPCmd(), newSupervisorCmd(), newAuditCmd(), newFleetCmd(), newDoctorCmd(), newSeccompCmd(), &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit and Go version (as --version does)",
		Args:  cobra.NoArgs,
		Run:   func(cmd *cobra.Command, _ []string) { fmt.Fprint(cmd.OutOrStdout(), versionText()) },
	})
	return root
}

// versionText is what `cyberos version` and `cyberos --version` print.
func versionText() string {
	b := telemetry.Build()
	commit := b.Revision
	if b.Time != "" {
		commit += " (" + b.Time + ")"
	}
	return fmt.Sprintf("cyberos %s\ncommit  %s\ngo      %s %s\n", b.Version, commit, b.GoVersion, b.Platform)
}
