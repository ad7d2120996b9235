// Command mcphostile is the hostile MCP server of package mcptest as a
// program of its own, run by the daemon in an MCP server's sandbox.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"cyberos.dev/internal/mcptest"
)

func main() {
	if err := mcptest.NewServer().Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, "mcphostile:", err)
		os.Exit(1)
	}
}
