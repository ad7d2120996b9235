package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"cyberos.dev/supervisor/internal/mcpclient"
)

// newMCPCmd is `cyberos mcp`: serving the skills to MCP clients (serve),
// and the configured MCP servers' recorded tool definitions (list, approve).
func newMCPCmd() *cobra.Command {
	var stateDir, socket string
	var asJSON bool
	cmd := &cobra.Command{Use: "mcp", Short: "Serve the skills to MCP clients; MCP servers' tools: recorded definition hashes, approval of changed ones"}
	cmd.AddCommand(newMCPServeCmd())
	cmd.PersistentFlags().StringVar(&stateDir, "state-dir", "/var/lib/cyberos", "where the daemon keeps mcp-approvals.json")
	list := &cobra.Command{
		Use:   "list",
		Short: "The MCP servers: live from the running daemon (status, restarts, tools and their definition hashes), else every tool recorded",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			live, lerr := liveMCPServers(socket)
			if lerr == nil {
				return printLiveMCP(cmd, live, asJSON)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "no running daemon answered (%v): the definitions recorded in %s follow\n", lerr, stateDir)
			a, err := mcpclient.OpenApprovals(stateDir)
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
	list.Flags().BoolVar(&asJSON, "json", false, "print the daemon's server list, or without a daemon {approved, pending}: server → tool → hash")
	list.Flags().StringVar(&socket, "socket", defaultAdminSocket(), "the daemon's admin socket ($"+socketEnv+")")
	approve := &cobra.Command{
		Use:   "approve SERVER",
		Short: "Accept SERVER's changed tool definitions (the running daemon serves them from the next call)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := mcpclient.OpenApprovals(stateDir)
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
	cmd.AddCommand(list, approve)
	return cmd
}

func sortedKeysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// liveMCPServers asks the daemon at socket for its MCP servers' status.
func liveMCPServers(socket string) ([]mcpclient.InstanceStatus, error) {
	resp, err := newAdminClient(socket).do(http.MethodGet, "/v1/mcp/servers", nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []mcpclient.InstanceStatus
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("daemon answer: %w", err)
	}
	return out, nil
}

// printLiveMCP prints one line per tool of each server instance (one line
// for an instance without tools).
func printLiveMCP(cmd *cobra.Command, live []mcpclient.InstanceStatus, asJSON bool) error {
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
