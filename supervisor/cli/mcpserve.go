package cli

import (
	"errors"
	"log/slog"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"cyberos.dev/supervisor/internal/daemon"
	"cyberos.dev/supervisor/internal/mcpserve"
	"cyberos.dev/telemetry"
)

// newMCPServeCmd is `cyberos mcp serve`: the daemon's installed skills as
// MCP tools, prompts and resources over stdio, each call an invocation
// through the admin socket.
func newMCPServeCmd() *cobra.Command {
	var socket, tenant string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the daemon's skills as MCP tools over stdio (the process an MCP client spawns)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			s := mcpserve.New(cmd.Context(), mcpserve.NewSocketBackend(socket), mcpserve.Options{
				Tenant: tenant, Log: log, Version: telemetry.Build().Version})
			go s.Watch(cmd.Context(), daemon.MCPRefreshInterval)
			err := s.MCP().Run(cmd.Context(), mcpserve.IDTransport{Transport: &mcp.StdioTransport{}})
			if errors.Is(err, mcp.ErrConnectionClosed) {
				return nil // the client went away: the normal end
			}
			return err
		},
	}
	fl := serve.Flags()
	fl.StringVar(&socket, "socket", defaultAdminSocket(), "the daemon's admin socket (default $"+socketEnv+", else /run/cyberos/supervisor.sock)")
	fl.StringVar(&tenant, "tenant", daemon.DefaultTenant, "tenant id of every call (UUID)")
	return serve
}
