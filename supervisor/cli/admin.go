package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"cyberos.dev/client"
	"cyberos.dev/policy"
	"cyberos.dev/supervisor/internal/broker"
	"cyberos.dev/supervisor/internal/daemon"
)

// socketEnv names the admin socket when --socket is not given.
const socketEnv = client.SocketEnv

// defaultAdminSocket is $CYBEROS_SOCKET, else the daemon's default.
func defaultAdminSocket() string { return client.DefaultSocket() }

// socketFlag adds --socket to cmd.
func socketFlag(cmd *cobra.Command, socket *string) {
	cmd.Flags().StringVar(socket, "socket", defaultAdminSocket(), "the daemon's admin socket (default $"+socketEnv+", else "+client.DefaultSocketPath+")")
}

// adminRun is the body of a command that talks to the daemon: the
// command's context, a client of --socket, the command and its args.
type adminRun func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error

// adminCmd gives cmd a --socket flag and runs run with a client of it.
func adminCmd(cmd *cobra.Command, run adminRun) *cobra.Command {
	var socket string
	socketFlag(cmd, &socket)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		return run(ctx, client.New(socket), cmd, args)
	}
	return cmd
}

// cliErr gives an error of the daemon client the CLI's exit status: 2 for
// a request the daemon found bad (400) or about nothing it knows (404), 3
// for every other refusal, an unreachable daemon or an answer that could
// not be read.
func cliErr(err error) error {
	var ae *client.Error
	if errors.As(err, &ae) {
		code := exitRefused
		if ae.Status == http.StatusBadRequest || ae.Status == http.StatusNotFound {
			code = exitUsage
		}
		return &exitError{code, fmt.Errorf("%s (HTTP %d)", ae.Message, ae.Status)}
	}
	return &exitError{exitRefused, err}
}

func writeJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// humanCall is one call as a line for people.
func humanCall(c client.ToolCall) string {
	ts := c.TS
	if t, err := time.Parse(time.RFC3339Nano, c.TS); err == nil {
		ts = t.UTC().Format("15:04:05.000")
	}
	h := c.ArgsHash
	if len(h) > 12 {
		h = h[:12]
	}
	s := fmt.Sprintf("%s  %-12s %-8s %5d ms  args %s", ts, c.Tool, c.Outcome, c.DurationMS, h)
	if c.Reason != "" {
		s += "  reason " + c.Reason
	}
	if len(c.PolicyHash) > 12 {
		s += "  policy " + c.PolicyHash[:12]
	}
	return s
}

// printStream prints a stream's lines: as they are with asJSON, else each
// decoded into T and printed by human, and a line that is not a T
// (warnings and errors) as it is.
func printStream[T any](out io.Writer, s *client.Stream, asJSON bool, human func(T) (string, bool)) error {
	defer s.Close()
	for s.Next() {
		if asJSON {
			fmt.Fprintln(out, string(s.Line()))
			continue
		}
		var v T
		line, ok := "", false
		if s.Decode(&v) == nil {
			line, ok = human(v)
		}
		if !ok {
			fmt.Fprintln(out, string(s.Line()))
			continue
		}
		if line != "" {
			fmt.Fprintln(out, line)
		}
	}
	return s.Err()
}

// tailCall is a tail stream's line for people; ok is false for a line
// that is not a call.
func tailCall(c client.ToolCall) (string, bool) { return humanCall(c), c.Tool != "" }

// eventLine is an events stream's line for people ("" for an unknown
// type); ok is false for a line that is not an event.
func eventLine(ev client.Event) (string, bool) {
	switch ev.Type {
	case "":
		return "", false
	case client.EventWatching:
		if ev.SkillID == "" {
			return "watching every skill", true
		}
		return "watching skill " + ev.SkillID, true
	case client.EventToolCall:
		if ev.Call == nil {
			return "", true
		}
		return ev.SkillID + "  " + humanCall(*ev.Call), true
	case client.EventInvocationStarted:
		tenant := "no tenant"
		if ev.TenantID != "" {
			tenant = "tenant " + ev.TenantID
		}
		return fmt.Sprintf("%s  %s  started   %s (%s)", ev.SkillID, ev.TS, ev.InvocationID, tenant), true
	case client.EventInvocationEnded:
		return fmt.Sprintf("%s  %s  ended     %s %s", ev.SkillID, ev.TS, ev.InvocationID, ev.Outcome), true
	}
	return "", true
}

// tailEvents follows GET /v1/events (one skill's, or all with skill ""):
// each invocation's start, its tool calls and its end, as they happen.
func tailEvents(ctx context.Context, out io.Writer, c *client.Client, skill string, asJSON bool) error {
	s, err := c.Events(ctx, skill)
	if err != nil {
		return cliErr(err)
	}
	return printStream(out, s, asJSON, eventLine)
}

// runReplay prints invocation id's recorded tool calls, re-judged against
// the SKILL.md at repPolicy when given (exit 1 when any would now be
// denied): `replay ID` and `skill broker replay --invocation ID`.
func runReplay(ctx context.Context, out io.Writer, c *client.Client, repID, repPolicy string, repJSON bool) error {
	var pol *policy.Policy
	if repPolicy != "" {
		b, err := os.ReadFile(repPolicy)
		if err != nil {
			return &exitError{exitUsage, fmt.Errorf("--policy: %w", err)}
		}
		if pol, err = policy.Parse(b); err != nil {
			return &exitError{exitUsage, fmt.Errorf("--policy %s: %w", repPolicy, err)}
		}
	}
	calls, err := c.Replay(ctx, repID)
	if err != nil {
		return cliErr(err)
	}
	enc := json.NewEncoder(out)
	if pol == nil {
		for _, c := range calls {
			if repJSON {
				_ = enc.Encode(c)
			} else {
				fmt.Fprintln(out, humanCall(c))
			}
		}
		return nil
	}
	decided := make([]broker.Decided, len(calls))
	for i, c := range calls {
		decided[i] = broker.Decided(c)
	}
	judged := daemon.Rejudge(decided, pol)
	denied := 0
	for _, j := range judged {
		if j.Verdict == daemon.VerdictDenied {
			denied++
		}
		if repJSON {
			_ = enc.Encode(j)
			continue
		}
		mark := "  "
		if j.Verdict == daemon.VerdictDenied {
			mark = "✗ "
		}
		fmt.Fprintf(out, "%s%s  now: %s", mark, humanCall(client.ToolCall(j.Decided)), j.Verdict)
		if j.Why != "" {
			fmt.Fprintf(out, " (%s)", j.Why)
		}
		fmt.Fprintln(out)
	}
	if !repJSON {
		fmt.Fprintf(out, "%d of %d calls would now be denied by %s (%s %s)\n", denied, len(judged), repPolicy, pol.Name, pol.Version)
	}
	if denied > 0 { // a policy change a CI job can gate on
		return &exitError{exitOutcome, nil}
	}
	return nil
}

// toolRules writes allowed_tools back as a frontmatter would: Read,
// Bash(git:*).
func toolRules(rules []policy.ToolRule) string {
	var out []string
	for _, r := range rules {
		s := string(r.Tool)
		if r.Pattern != "" {
			p := r.Pattern
			if r.Prefix {
				p += ":*"
			}
			s += "(" + p + ")"
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
