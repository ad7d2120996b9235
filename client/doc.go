// Package client is a typed client of the cyberos daemon's admin API: HTTP
// over the daemon's Unix socket (admin_socket, by default
// /run/cyberos/supervisor.sock), as the cyberos CLI and `cyberos mcp serve`
// use it.
//
// Every call takes a context. A call the daemon refused returns an *Error
// holding the HTTP status and the API's code (not_found, bad_request,
// too_many_invocations…); a socket that could not be reached returns a
// *DialError saying why (no socket, nobody listening, no permission) and
// how to start the daemon. Streams (Tail, Events, Logs) are read as they
// come and must be closed. MCPTransport reaches the daemon's MCP server
// (/mcp) over the same socket.
//
//	c := client.New(client.DefaultSocket())
//	env, err := c.Invoke(ctx, client.InvokeRequest{SkillID: "hello"})
package client
