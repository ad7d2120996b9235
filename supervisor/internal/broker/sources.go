package broker

import (
	"context"

	"cyberos.dev/audit"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/tools"
)

// lookup finds name in the sources, in order.
func (d *dispatcher) lookup(ctx context.Context, name policy.Tool) (tools.Tool, bool, error) {
	for _, src := range d.sources {
		if t, ok, err := src.Lookup(ctx, name); ok || err != nil {
			return t, ok, err
		}
	}
	return nil, false, nil
}

// mcpFields are the audit members of a call of name: its server and
// definition hash when the tool says them, else the server of a found
// mcp__ name, else none.
func mcpFields(name policy.Tool, t tools.Tool, found bool) audit.MCP {
	if x, ok := t.(tools.AuditExtra); ok && t != nil {
		server, hash := x.AuditFields()
		return audit.MCP{Server: server, DefinitionHash: hash}
	}
	if server, _, ok := name.SplitMCP(); ok && found {
		return audit.MCP{Server: server}
	}
	return audit.MCP{}
}

// failedTool stands for a tool that was found but cannot be called now
// (its server does not start): the call is audited and fails with err.
type failedTool struct {
	name policy.Tool
	err  error
}

func (f failedTool) Name() policy.Tool                              { return f.name }
func (f failedTool) Description() string                            { return "" }
func (f failedTool) Call(context.Context, *tools.Call) (any, error) { return nil, f.err }
