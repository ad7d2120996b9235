//go:build ignore

// The notes-go example skill (build: make build). Args: {"text": "..."}.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"cyberos.dev/skillclient"
)

func main() {
	var args struct {
		Text string `json:"text"`
	}
	if err := json.NewDecoder(os.Stdin).Decode(&args); err != nil {
		fmt.Fprintln(os.Stderr, "args:", err)
		os.Exit(2)
	}
	ctx := context.Background()
	c, err := skillclient.Dial(skillclient.DefaultPath())
	if err != nil {
		fmt.Fprintln(os.Stderr, "broker:", err)
		os.Exit(1)
	}
	defer c.Close()

	tools, _ := c.List(ctx)
	var emitted, found, uname json.RawMessage
	must(c.Call(ctx, "MemoryEmit", map[string]string{"path": "notes/go-note", "body": args.Text}, &emitted))
	must(c.Call(ctx, "MemorySearch", map[string]any{"query": args.Text}, &found))
	must(c.Call(ctx, "Bash", map[string]string{"command": "uname -s"}, &uname))
	// Not granted by the Bash(uname:*) rule: refused by the broker.
	var rpcErr *skillclient.RPCError
	refused := ""
	if err := c.Call(ctx, "Bash", map[string]string{"command": "id"}, nil); errors.As(err, &rpcErr) {
		refused = rpcErr.Reason()
	}
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"tools": tools, "emitted": emitted, "search": found, "uname": uname, "bash_id_refused": refused,
	})
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
