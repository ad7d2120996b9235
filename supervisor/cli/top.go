package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"cyberos.dev/client"
)

// outputFlag adds -o/--output (table or json) to cmd.
func outputFlag(cmd *cobra.Command, output *string) {
	cmd.Flags().StringVarP(output, "output", "o", "table", "table or json")
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return &exitError{exitUsage, fmt.Errorf("--output: %q: want table or json", o)}
	}
	return nil
}

// newPsCmd is `ps`: the running invocations, like docker ps.
func newPsCmd() *cobra.Command {
	var output string
	var quiet, all bool
	var last int
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List the running invocations (-a: and the last ended ones; -q: ids only)",
		Args:  cobra.NoArgs,
	}
	adminCmd(cmd, func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
		if err := checkOutput(output); err != nil {
			return err
		}
		st, err := c.Status(ctx)
		if err != nil {
			return cliErr(err)
		}
		rows := runningRows(st)
		if all {
			recent, err := c.Recent(ctx, last)
			if err != nil {
				return cliErr(err)
			}
			for _, r := range recent {
				rows = append(rows, psRow{ActiveView: client.ActiveView{InvocationID: r.InvocationID, SkillID: r.SkillID, TenantID: r.TenantID},
					Status: r.Outcome, EndedAt: r.EndedAt, DurationMS: r.DurationMS})
			}
		}
		out := cmd.OutOrStdout()
		switch {
		case quiet:
			for _, r := range rows {
				fmt.Fprintln(out, r.InvocationID)
			}
			return nil
		case output == "json":
			return writeJSON(out, rows)
		}
		return psTable(out, rows)
	})
	cmd.Flags().BoolVarP(&all, "all", "a", false, "the last ended invocations too (newest first)")
	cmd.Flags().IntVarP(&last, "last", "n", 20, "with -a: how many ended invocations (1 to 1000)")
	outputFlag(cmd, &output)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print the invocation ids only")
	return cmd
}

// psRow is one line of ps: a running invocation (status "running") or an
// ended one (status its outcome).
type psRow struct {
	client.ActiveView
	Status     string `json:"status"`
	EndedAt    string `json:"ended_at,omitempty"`
	DurationMS int64  `json:"duration_ms,omitempty"`
}

func psTable(out io.Writer, rows []psRow) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INVOCATION\tSKILL\tTENANT\tSTATUS\tSINCE\tTOOL CALLS\tPROTOCOL ABUSE")
	for _, r := range rows {
		since, calls := r.StartedAt, strconv.FormatInt(r.ToolCalls, 10)
		if r.Status != "running" {
			since, calls = r.EndedAt, "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.InvocationID, r.SkillID, orDash(r.TenantID), r.Status, since, calls, orDash(strings.Join(r.ProtocolAbuse, ",")))
	}
	return tw.Flush()
}

// runningRows are the running invocations of st as ps rows.
func runningRows(st *client.Status) []psRow {
	rows := make([]psRow, 0, len(st.Invocations))
	for _, a := range st.Invocations {
		rows = append(rows, psRow{ActiveView: a, Status: "running"})
	}
	return rows
}

// newStatusCmd is `status`: what `skill broker status` prints, as a
// table by default.
func newStatusCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the daemon's running invocations and today's tool calls and denials",
		Args:  cobra.NoArgs,
	}
	adminCmd(cmd, func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
		if err := checkOutput(output); err != nil {
			return err
		}
		st, err := c.Status(ctx)
		if err != nil {
			return cliErr(err)
		}
		out := cmd.OutOrStdout()
		if output == "json" {
			return writeJSON(out, st)
		}
		fmt.Fprintf(out, "running      %d invocations\n", st.ActiveInvocations)
		fmt.Fprintf(out, "today        %s (UTC): %d tool calls, %d denied, %d protocol abuse\n", st.Day, st.ToolCallsToday, st.DeniedToday, st.ProtocolAbuseToday)
		if st.SandboxCgroups != "" {
			fmt.Fprintf(out, "cgroups      %s\n", st.SandboxCgroups)
		}
		if len(st.Invocations) > 0 {
			fmt.Fprintln(out)
			return psTable(out, runningRows(st))
		}
		return nil
	})
	outputFlag(cmd, &output)
	return cmd
}

// newEventsCmd is `events`: every invocation's start, tool calls and end
// from now on (`skill broker tail --all`), like docker events.
func newEventsCmd() *cobra.Command {
	var skill, output string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow every invocation's start, tool calls and end as they happen (--skill: one skill's)",
		Args:  cobra.NoArgs,
	}
	adminCmd(cmd, func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
		if err := checkOutput(output); err != nil {
			return err
		}
		return tailEvents(ctx, cmd.OutOrStdout(), c, skill, output == "json")
	})
	cmd.Flags().StringVar(&skill, "skill", "", "only this skill's invocations")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table (lines for people) or json (JSON lines)")
	return cmd
}

// newReplayCmd is `replay ID`: `skill broker replay --invocation ID`.
func newReplayCmd() *cobra.Command {
	var pol, output string
	cmd := &cobra.Command{
		Use:   "replay ID [--policy SKILL.md]",
		Short: "Print an invocation's recorded tool calls; with --policy, re-judge each against that policy (exit 1 when any would now be denied)",
		Args:  cobra.ExactArgs(1),
	}
	adminCmd(cmd, func(ctx context.Context, c *client.Client, cmd *cobra.Command, a []string) error {
		if err := checkOutput(output); err != nil {
			return err
		}
		return runReplay(ctx, cmd.OutOrStdout(), c, a[0], pol, output == "json")
	})
	cmd.Flags().StringVar(&pol, "policy", "", "a SKILL.md to re-judge the recorded calls against")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table (lines for people) or json (JSON lines)")
	return cmd
}

// newInspectCmd is `inspect ID`: an invocation's record from the audit,
// as JSON (like docker inspect).
func newInspectCmd() *cobra.Command {
	return adminCmd(&cobra.Command{
		Use:   "inspect ID",
		Short: "Print an invocation's record from the audit (JSON): skill, version, tenant, containment, outcome, error, tool calls",
		Args:  cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, cmd *cobra.Command, a []string) error {
		rec, err := c.Inspect(ctx, a[0])
		if err != nil {
			return cliErr(err)
		}
		return writeJSON(cmd.OutOrStdout(), rec)
	})
}

// newCancelCmd is `cancel ID`: the daemon ends a running invocation
// through the deadline path (SIGTERM, then the cgroup killed); its
// completed row says outcome cancelled.
func newCancelCmd() *cobra.Command {
	return adminCmd(&cobra.Command{
		Use:   "cancel ID",
		Short: "End a running invocation (SIGTERM, then kill); its outcome is cancelled",
		Args:  cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, cmd *cobra.Command, a []string) error {
		if err := c.Cancel(ctx, a[0]); err != nil {
			return cliErr(err)
		}
		_, err := fmt.Fprintln(cmd.OutOrStdout(), a[0])
		return err
	})
}

// newLogsCmd is `logs ID [-f]`: the invocation's stderr, through the
// daemon, so no access to state_dir is needed.
func newLogsCmd() *cobra.Command {
	var follow bool
	cmd := adminCmd(&cobra.Command{
		Use:   "logs ID",
		Short: "Print an invocation's stderr (-f: of a running one, once it ends)",
		Args:  cobra.ExactArgs(1),
	}, func(ctx context.Context, c *client.Client, cmd *cobra.Command, a []string) error {
		logs, err := c.Logs(ctx, a[0], follow)
		if err != nil {
			return cliErr(err)
		}
		defer logs.Close()
		_, err = io.Copy(cmd.OutOrStdout(), logs)
		return err
	})
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "wait for a running invocation to end and print its stderr then")
	return cmd
}
