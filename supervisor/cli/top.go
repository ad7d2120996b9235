package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"cyberos.dev/supervisor/daemon"
)

// startHint is how an operator starts the daemon the CLI could not reach.
const startHint = "start it with `systemctl start cyberos` or `cyberos serve --config FILE`, or name another socket with --socket or $" + socketEnv

// dialError says why the admin socket could not be reached: no socket (no
// daemon ever started there, or the path is wrong), a socket nobody
// listens on (the daemon stopped or crashed), or no permission; each with
// how to go on.
func dialError(socket string, err error) error {
	switch {
	case errors.Is(err, syscall.ENOENT):
		return fmt.Errorf("no daemon: the admin socket %s does not exist; %s", socket, startHint)
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("no daemon: the admin socket %s refuses connections (the daemon stopped or crashed?); %s", socket, startHint)
	case errors.Is(err, syscall.EACCES):
		return fmt.Errorf("the admin socket %s: permission denied: run as root or as a member of the config's admin_group", socket)
	}
	return fmt.Errorf("admin socket %s: %w", socket, err)
}

// socketFlag adds --socket to cmd.
func socketFlag(cmd *cobra.Command, socket *string) {
	cmd.Flags().StringVar(socket, "socket", defaultAdminSocket(), "the daemon's admin socket (default $"+socketEnv+", else /run/cyberos/supervisor.sock)")
}

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

// fetchStatus is GET /v1/status.
func fetchStatus(socket string) (daemon.Status, error) {
	var st daemon.Status
	resp, err := newAdminClient(socket).do(http.MethodGet, "/v1/status", nil)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, &exitError{exitRefused, fmt.Errorf("daemon answer: %w", err)}
	}
	return st, nil
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newPsCmd is `ps`: the running invocations, like docker ps.
func newPsCmd() *cobra.Command {
	var socket, output string
	var quiet, all bool
	var last int
	cmd := &cobra.Command{
		Use:   "ps",
		Short: "List the running invocations (-a: and the last ended ones; -q: ids only)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			st, err := fetchStatus(socket)
			if err != nil {
				return err
			}
			rows := make([]psRow, 0, len(st.Invocations))
			for _, a := range st.Invocations {
				rows = append(rows, psRow{ActiveView: a, Status: "running"})
			}
			if all {
				recent, err := fetchRecent(socket, last)
				if err != nil {
					return err
				}
				for _, r := range recent {
					rows = append(rows, psRow{ActiveView: daemon.ActiveView{InvocationID: r.InvocationID, SkillID: r.SkillID, TenantID: r.TenantID},
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
		},
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "the last ended invocations too (newest first)")
	cmd.Flags().IntVarP(&last, "last", "n", 20, "with -a: how many ended invocations (1 to 1000)")
	socketFlag(cmd, &socket)
	outputFlag(cmd, &output)
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print the invocation ids only")
	return cmd
}

// psRow is one line of ps: a running invocation (status "running") or an
// ended one (status its outcome).
type psRow struct {
	daemon.ActiveView
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

// newStatusCmd is `status`: what `skill broker status` prints, as a
// table by default.
func newStatusCmd() *cobra.Command {
	var socket, output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the daemon's running invocations and today's tool calls and denials",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			st, err := fetchStatus(socket)
			if err != nil {
				return err
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
				rows := make([]psRow, 0, len(st.Invocations))
				for _, a := range st.Invocations {
					rows = append(rows, psRow{ActiveView: a, Status: "running"})
				}
				return psTable(out, rows)
			}
			return nil
		},
	}
	socketFlag(cmd, &socket)
	outputFlag(cmd, &output)
	return cmd
}

// newEventsCmd is `events`: every invocation's start, tool calls and end
// from now on (`skill broker tail --all`), like docker events.
func newEventsCmd() *cobra.Command {
	var socket, skill, output string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "Follow every invocation's start, tool calls and end as they happen (--skill: one skill's)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return tailEvents(cmd.OutOrStdout(), newAdminClient(socket), skill, output == "json")
		},
	}
	socketFlag(cmd, &socket)
	cmd.Flags().StringVar(&skill, "skill", "", "only this skill's invocations")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table (lines for people) or json (JSON lines)")
	return cmd
}

// newReplayCmd is `replay ID`: `skill broker replay --invocation ID`.
func newReplayCmd() *cobra.Command {
	var socket, pol, output string
	cmd := &cobra.Command{
		Use:   "replay ID [--policy SKILL.md]",
		Short: "Print an invocation's recorded tool calls; with --policy, re-judge each against that policy (exit 1 when any would now be denied)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			return runReplay(cmd.OutOrStdout(), socket, a[0], pol, output == "json")
		},
	}
	socketFlag(cmd, &socket)
	cmd.Flags().StringVar(&pol, "policy", "", "a SKILL.md to re-judge the recorded calls against")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table (lines for people) or json (JSON lines)")
	return cmd
}

// newInspectCmd is `inspect ID`: an invocation's record from the audit,
// as JSON (like docker inspect).
func newInspectCmd() *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:   "inspect ID",
		Short: "Print an invocation's record from the audit (JSON): skill, version, tenant, containment, outcome, error, tool calls",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			resp, err := newAdminClient(socket).do(http.MethodGet, "/v1/invocations/"+url.PathEscape(a[0]), nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var rec map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&rec); err != nil {
				return &exitError{exitRefused, fmt.Errorf("daemon answer: %w", err)}
			}
			return writeJSON(cmd.OutOrStdout(), rec)
		},
	}
	socketFlag(cmd, &socket)
	return cmd
}

// newCancelCmd is `cancel ID`: the daemon ends a running invocation
// through the deadline path (SIGTERM, then the cgroup killed); its
// completed row says outcome cancelled.
func newCancelCmd() *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "End a running invocation (SIGTERM, then kill); its outcome is cancelled",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			resp, err := newAdminClient(socket).do(http.MethodPost, "/v1/invocations/"+url.PathEscape(a[0])+"/cancel", nil)
			if err != nil {
				return err
			}
			resp.Body.Close()
			_, err = fmt.Fprintln(cmd.OutOrStdout(), a[0])
			return err
		},
	}
	socketFlag(cmd, &socket)
	return cmd
}

// newLogsCmd is `logs ID [-f]`: the invocation's stderr, through the
// daemon, so no access to state_dir is needed.
func newLogsCmd() *cobra.Command {
	var socket string
	var follow bool
	cmd := &cobra.Command{
		Use:   "logs ID",
		Short: "Print an invocation's stderr (-f: of a running one, once it ends)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			path := "/v1/invocations/" + url.PathEscape(a[0]) + "/logs"
			if follow {
				path += "?follow=1"
			}
			resp, err := newAdminClient(socket).do(http.MethodGet, path, nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, err = io.Copy(cmd.OutOrStdout(), resp.Body)
			return err
		},
	}
	socketFlag(cmd, &socket)
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "wait for a running invocation to end and print its stderr then")
	return cmd
}

// fetchRecent is GET /v1/invocations: the last limit ended invocations.
func fetchRecent(socket string, limit int) ([]daemon.Recent, error) {
	resp, err := newAdminClient(socket).do(http.MethodGet, "/v1/invocations?limit="+strconv.Itoa(limit), nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []daemon.Recent
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, &exitError{exitRefused, fmt.Errorf("daemon answer: %w", err)}
	}
	return out, nil
}
