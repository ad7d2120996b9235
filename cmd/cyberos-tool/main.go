// Command cyberos-tool is the small static client shell skills use inside
// the sandbox (mounted at /run/cyberos/bin/cyberos-tool):
//
//	cyberos-tool call TOOL 'JSON-ARGS'   the result JSON on stdout
//	cyberos-tool call TOOL -             the args JSON read from stdin
//	cyberos-tool list                    {"tools":[{"name","description"}]}
//	cyberos-tool status                  the broker.status object
//
// A JSON-RPC error is printed as its error object on stderr, exit 1; any
// other failure (no broker) is a message on stderr, exit 1; bad usage exits
// 2. The socket is $CYBEROS_BROKER_SOCKET, else /run/cyberos/broker.sock
// (skillclient.EnvSocket and SandboxSocket).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"cyberos.dev/skillclient"
)

const usage = `usage: cyberos-tool call TOOL 'JSON-ARGS' | call TOOL - | list | status`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var method string
	var params any
	switch {
	case args[0] == "call" && len(args) == 3:
		raw := []byte(args[2])
		if args[2] == "-" {
			var err error
			if raw, err = io.ReadAll(io.LimitReader(stdin, skillclient.MaxRequest+1)); err != nil {
				fmt.Fprintln(stderr, "cyberos-tool: reading args:", err)
				return 2
			}
		}
		if !json.Valid(raw) {
			fmt.Fprintln(stderr, "cyberos-tool: JSON-ARGS is not valid JSON")
			return 2
		}
		method = "tool.call"
		params = struct {
			Tool string          `json:"tool"`
			Args json.RawMessage `json:"args"`
		}{args[1], raw}
	case args[0] == "list" && len(args) == 1:
		method = "tool.list"
	case args[0] == "status" && len(args) == 1:
		method = "broker.status"
	case args[0] == "-h" || args[0] == "--help" || args[0] == "help":
		fmt.Fprintln(stdout, usage)
		return 0
	default:
		fmt.Fprintln(stderr, usage)
		return 2
	}

	c, err := skillclient.Dial("")
	if err != nil {
		fmt.Fprintln(stderr, "cyberos-tool:", err)
		return 1
	}
	defer c.Close()
	var result json.RawMessage
	err = c.Invoke(context.Background(), method, params, &result)
	var rpcErr *skillclient.RPCError
	switch {
	case errors.As(err, &rpcErr):
		out, _ := json.Marshal(rpcErr)
		fmt.Fprintf(stderr, "%s\n", out)
		return 1
	case errors.Is(err, skillclient.ErrRequestTooLarge):
		fmt.Fprintf(stderr, "cyberos-tool: request over %d MiB\n", skillclient.MaxRequest>>20)
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "cyberos-tool:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", result)
	return 0
}
