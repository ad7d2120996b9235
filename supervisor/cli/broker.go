package cli

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"cyberos.dev/client"
)

// newBrokerCmd is `skill broker`: the operator's views of the daemon's
// brokers, each a subcommand of its own.
func newBrokerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "broker", Short: "Operator views of the daemon's brokers: status, tail, replay"}
	var socket string
	cmd.PersistentFlags().StringVar(&socket, "socket", defaultAdminSocket(), "the daemon's admin socket (default $"+socketEnv+", else "+client.DefaultSocketPath+")")
	cmd.AddCommand(newBrokerStatusCmd(&socket), newBrokerTailCmd(&socket), newBrokerReplayCmd(&socket))
	return cmd
}

// brokerRun runs run with a client of the broker command's --socket.
func brokerRun(socket *string, run adminRun) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		return run(ctx, client.New(*socket), cmd, args)
	}
}

// newBrokerStatusCmd is `skill broker status`: GET /v1/status as JSON.
func newBrokerStatusCmd(socket *string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print active invocations and today's tool calls and denials (JSON)",
		Args:  cobra.NoArgs,
		RunE: brokerRun(socket, func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			st, err := c.Status(ctx)
			if err != nil {
				return cliErr(err)
			}
			return writeJSON(cmd.OutOrStdout(), st)
		}),
	}
	cmd.Flags().Bool("json", true, "JSON output (the only form; accepted for symmetry)")
	return cmd
}

// newBrokerTailCmd is `skill broker tail`: one invocation's tool calls, or
// every invocation's events.
func newBrokerTailCmd(socket *string) *cobra.Command {
	var id, skill string
	var asJSON, all bool
	cmd := &cobra.Command{
		Use:   "tail (--invocation ID | --skill NAME | --all)",
		Short: "Follow an invocation's tool calls as they are decided, or every invocation of a skill, or of all skills (like docker events)",
		Args:  cobra.NoArgs,
		RunE: brokerRun(socket, func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			given := 0
			for _, g := range []bool{id != "", skill != "", all} {
				if g {
					given++
				}
			}
			if given != 1 {
				return &exitError{exitUsage, errors.New("give one of --invocation ID, --skill NAME or --all")}
			}
			if id == "" {
				return tailEvents(ctx, cmd.OutOrStdout(), c, skill, asJSON)
			}
			s, err := c.Tail(ctx, id)
			if err != nil {
				return cliErr(err)
			}
			return printStream(cmd.OutOrStdout(), s, asJSON, tailCall)
		}),
	}
	cmd.Flags().StringVar(&id, "invocation", "", "the invocation id")
	cmd.Flags().StringVar(&skill, "skill", "", "follow every invocation of this skill from now on")
	cmd.Flags().BoolVar(&all, "all", false, "follow every invocation from now on")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	return cmd
}

// newBrokerReplayCmd is `skill broker replay`: what `replay ID` prints.
func newBrokerReplayCmd(socket *string) *cobra.Command {
	var id, pol string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "replay --invocation ID [--policy SKILL.md]",
		Short: "Print an invocation's recorded tool calls; with --policy, re-judge each against that policy (exit 1 when any would now be denied)",
		Args:  cobra.NoArgs,
		RunE: brokerRun(socket, func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if id == "" {
				return &exitError{exitUsage, errors.New("--invocation is required")}
			}
			return runReplay(ctx, cmd.OutOrStdout(), c, id, pol, asJSON)
		}),
	}
	cmd.Flags().StringVar(&id, "invocation", "", "the invocation id")
	cmd.Flags().StringVar(&pol, "policy", "", "a SKILL.md to re-judge the recorded calls against")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON lines")
	return cmd
}
