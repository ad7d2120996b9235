package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"cyberos.dev/client"
	"cyberos.dev/supervisor/internal/mcpclient"
)

// newMCPCmd is `cyberos mcp`: serving the skills to MCP clients (serve),
// and the configured MCP servers' recorded tool definitions (list, approve).
func newMCPCmd() *cobra.Command {
	var stateDir string
	cmd := &cobra.Command{Use: "mcp", Short: "Serve the skills to MCP clients; MCP servers' tools: recorded definition hashes, approval of changed ones"}
	cmd.PersistentFlags().StringVar(&stateDir, "state-dir", "/var/lib/cyberos", "where the daemon keeps mcp-approvals.json")
	cmd.AddCommand(newMCPServeCmd(), newMCPListCmd(&stateDir), newMCPApproveCmd(&stateDir))
	return cmd
}

// newMCPListCmd is `cyberos mcp list`: the running daemon's MCP servers
// (status, restarts, tools and their definition hashes), or, with no daemon
// answering, every MCP tool's approved definition hash and the changed ones
// waiting for approval.
func newMCPListCmd(stateDir *string) *cobra.Command {
	var asJSON bool
	var socket string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "The MCP servers: live from the running daemon (status, restarts, tools and their definition hashes), else every tool recorded",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			live, lerr := client.New(socket).MCPServers(ctx)
			if lerr == nil {
				return printLiveMCP(cmd, live, asJSON)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "no running daemon answered (%v): the definitions recorded in %s follow\n", lerr, *stateDir)
			a, err := mcpclient.OpenApprovals(*stateDir)
			if err != nil {
				return &exitError{exitRefused, err}
			}
			approved, pending, err := a.Snapshot()
			if err != nil {
				return &exitError{exitRefused, err}
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"approved": approved, "pending": pending})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVER\tTOOL\tDEFINITION HASH\tSTATUS")
			for _, server := range sortedKeysOf(approved) {
				for _, tool := range sortedKeysOf(approved[server]) {
					status, hash := "approved", approved[server][tool]
					if p, ok := pending[server][tool]; ok {
						status, hash = "changed: refused until `cyberos mcp approve "+server+"`", p
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", server, tool, hash, status)
				}
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the daemon's server list, or without a daemon {approved, pending}: server → tool → hash")
	socketFlag(cmd, &socket)
	return cmd
}

// newMCPApproveCmd is `cyberos mcp approve SERVER`: accept a server's
// changed tool definitions.
func newMCPApproveCmd(stateDir *string) *cobra.Command {
	return &cobra.Command{
		Use:   "approve SERVER",
		Short: "Accept SERVER's changed tool definitions (the running daemon serves them from the next call)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := mcpclient.OpenApprovals(*stateDir)
			if err != nil {
				return &exitError{exitRefused, err}
			}
			tools, err := a.Approve(args[0])
			if err != nil {
				return &exitError{exitRefused, err}
			}
			if len(tools) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: no changed definition waits for approval\n", args[0])
				return nil
			}
			for _, t := range tools {
				fmt.Fprintf(cmd.OutOrStdout(), "approved mcp__%s__%s\n", args[0], t)
			}
			return nil
		},
	}
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// printLiveMCP prints one line per tool of each server instance (one line
// for an instance without tools).
func printLiveMCP(cmd *cobra.Command, live []client.MCPServer, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"servers": live})
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tINSTANCE\tSTATUS\tRESTARTS\tTOOL\tDEFINITION HASH\tAPPROVAL")
	for _, s := range live {
		inst := s.Instance
		if inst == "" {
			inst = "-"
		}
		if len(s.Tools) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t-\t-\t-\n", s.Server, inst, s.Status, s.Restarts)
		}
		for _, t := range s.Tools {
			approval := "approved"
			if t.Changed {
				approval = "changed: refused until `cyberos mcp approve " + s.Server + "`"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", s.Server, inst, s.Status, s.Restarts, t.Name, t.DefinitionHash, approval)
		}
	}
	return tw.Flush()
}
