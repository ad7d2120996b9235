package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cyberos.dev/policy"
	"cyberos.dev/supervisor"
	"cyberos.dev/supervisor/daemon"
	"cyberos.dev/supervisor/internal/broker"
)

// socketEnv names the admin socket when --socket is not given, as
// DOCKER_HOST does for docker.
const socketEnv = "CYBEROS_SOCKET"

// defaultAdminSocket is $CYBEROS_SOCKET, else the daemon's default.
func defaultAdminSocket() string {
	if s := os.Getenv(socketEnv); s != "" {
		return s
	}
	return "/run/cyberos/supervisor.sock"
}

// adminClient speaks HTTP to the daemon's admin socket.
type adminClient struct {
	socket string
	http   *http.Client
}

func newAdminClient(socket string) *adminClient {
	return &adminClient{socket: socket, http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

// do sends a request; a non-2xx answer becomes an exitError (the API's
// error text, exit 2 for 400/404, 3 for refusals).
func (c *adminClient) do(method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://cyberos"+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &exitError{exitRefused, dialError(c.socket, err)}
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	var ae daemon.APIError
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(b, &ae) != nil || ae.Error == "" {
		ae.Error = strings.TrimSpace(string(b))
	}
	code := exitRefused
	if resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusNotFound {
		code = exitUsage
	}
	return nil, &exitError{code, fmt.Errorf("%s (HTTP %d)", ae.Error, resp.StatusCode)}
}

func newInvokeCmd() *cobra.Command {
	var f runFlags
	var version, socket, requestID string
	cmd := &cobra.Command{
		Use:   "invoke SKILL_ID",
		Short: "Invoke an installed skill through the daemon",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, a []string) error {
			args, err := readArgs(f.args, f.argsFile)
			if err != nil {
				return err
			}
			req := daemon.InvokeRequest{SkillID: a[0], Version: version, TenantID: f.tenant, CallerPersona: f.persona,
				Traceparent: f.traceparent, DeadlineMS: f.deadline.Milliseconds(), RequestID: requestID}
			if len(bytes.TrimSpace(args)) > 0 {
				if !json.Valid(args) {
					return &exitError{exitUsage, errors.New("args: not one valid JSON value")}
				}
				req.Args = args
			}
			resp, err := newAdminClient(socket).do(http.MethodPost, "/v1/invocations", req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var env supervisor.Envelope
			if err := json.NewDecoder(resp.Body).Decode(&env); err != nil {
				return &exitError{exitRefused, fmt.Errorf("daemon answer: %w", err)}
			}
			return writeEnvelope(cmd.OutOrStdout(), env, f.json)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&version, "version", "", "require this version of the skill")
	fl.StringVar(&f.args, "args", "", "the skill's args, one JSON value (default {})")
	fl.StringVar(&f.argsFile, "args-file", "", "read the args from this file")
	fl.StringVar(&f.tenant, "tenant", daemon.DefaultTenant, "tenant id (UUID)")
	fl.StringVar(&f.persona, "persona", "", "caller persona")
	fl.StringVar(&f.traceparent, "traceparent", "", "W3C traceparent of the caller")
	fl.DurationVar(&f.deadline, "deadline", 0, "shorten the deadline below effort_minutes (e.g. 4s)")
	fl.BoolVar(&f.json, "json", false, "print the envelope as one JSON object")
	fl.StringVar(&socket, "socket", defaultAdminSocket(), "the daemon's admin socket (default $"+socketEnv+", else /run/cyberos/supervisor.sock)")
	fl.StringVar(&requestID, "request-id", "", "idempotency key: a repeat within idempotency_window gets the first answer instead of a second run")
	return cmd
}

func newBrokerCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "broker", Short: "Operator views of the daemon's brokers: status, tail, replay"}
	var socket string
	cmd.PersistentFlags().StringVar(&socket, "socket", defaultAdminSocket(), "the daemon's admin socket (default $"+socketEnv+", else /run/cyberos/supervisor.sock)")

	status := &cobra.Command{
		Use:   "status",
		Short: "Print active invocations and today's tool calls and denials (JSON)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := newAdminClient(socket).do(http.MethodGet, "/v1/status", nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var st daemon.Status
			if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
				return &exitError{exitRefused, err}
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		},
	}
	status.Flags().Bool("json", true, "JSON output (the only form; accepted for symmetry)")

	var tailID, tailSkill string
	var tailJSON, tailAll bool
	tail := &cobra.Command{
		Use:   "tail (--invocation ID | --skill NAME | --all)",
		Short: "Follow an invocation's tool calls as they are decided, or every invocation of a skill, or of all skills (like docker events)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			given := 0
			for _, g := range []bool{tailID != "", tailSkill != "", tailAll} {
				if g {
					given++
				}
			}
			if given != 1 {
				return &exitError{exitUsage, errors.New("give one of --invocation ID, --skill NAME or --all")}
			}
			c := newAdminClient(socket)
			if tailID == "" {
				return tailEvents(cmd.OutOrStdout(), c, tailSkill, tailJSON)
			}
			resp, err := c.do(http.MethodGet, "/v1/invocations/"+tailID+"/tail", nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			out := cmd.OutOrStdout()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				if tailJSON {
					fmt.Fprintln(out, sc.Text())
					continue
				}
				var ev broker.Decided
				if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Tool == "" {
					fmt.Fprintln(out, sc.Text()) // warnings and errors as they are
					continue
				}
				fmt.Fprintln(out, humanCall(ev))
			}
			return sc.Err()
		},
	}
	tail.Flags().StringVar(&tailID, "invocation", "", "the invocation id")
	tail.Flags().StringVar(&tailSkill, "skill", "", "follow every invocation of this skill from now on")
	tail.Flags().BoolVar(&tailAll, "all", false, "follow every invocation from now on")
	tail.Flags().BoolVar(&tailJSON, "json", false, "print JSON lines")

	var repID, repPolicy string
	var repJSON bool
	replay := &cobra.Command{
		Use:   "replay --invocation ID [--policy SKILL.md]",
		Short: "Print an invocation's recorded tool calls; with --policy, re-judge each against that policy (exit 1 when any would now be denied)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repID == "" {
				return &exitError{exitUsage, errors.New("--invocation is required")}
			}
			return runReplay(cmd.OutOrStdout(), socket, repID, repPolicy, repJSON)
		},
	}
	replay.Flags().StringVar(&repID, "invocation", "", "the invocation id")
	replay.Flags().StringVar(&repPolicy, "policy", "", "a SKILL.md to re-judge the recorded calls against")
	replay.Flags().BoolVar(&repJSON, "json", false, "print JSON lines")
	cmd.AddCommand(status, tail, replay)
	return cmd
}

// humanCall is one call as a line for people.
func humanCall(c broker.Decided) string {
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

// tailEvents follows GET /v1/events (one skill's, or all with skill ""):
// each invocation's start, its tool calls and its end, as they happen.
func tailEvents(out io.Writer, c *adminClient, skill string, asJSON bool) error {
	path := "/v1/events"
	if skill != "" {
		path += "?skill=" + url.QueryEscape(skill)
	}
	resp, err := c.do(http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if asJSON {
			fmt.Fprintln(out, sc.Text())
			continue
		}
		var ev daemon.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Type == "" {
			fmt.Fprintln(out, sc.Text()) // warnings and errors as they are
			continue
		}
		switch ev.Type {
		case daemon.EventWatching:
			fmt.Fprintf(out, "watching %s\n", map[bool]string{true: "every skill", false: "skill " + ev.SkillID}[ev.SkillID == ""])
		case daemon.EventToolCall:
			fmt.Fprintf(out, "%s  %s\n", ev.SkillID, humanCall(*ev.Call))
		case daemon.EventInvocationStarted:
			tenant := "no tenant"
			if ev.TenantID != "" {
				tenant = "tenant " + ev.TenantID
			}
			fmt.Fprintf(out, "%s  %s  started   %s (%s)\n", ev.SkillID, ev.TS, ev.InvocationID, tenant)
		case daemon.EventInvocationEnded:
			fmt.Fprintf(out, "%s  %s  ended     %s %s\n", ev.SkillID, ev.TS, ev.InvocationID, ev.Outcome)
		}
	}
	return sc.Err()
}

// newListCmd is `skill list`: the daemon's installed skills, their versions
// and what their policies allow.
func newListCmd() *cobra.Command {
	var socket string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the daemon's installed skills: version, allowed tools, memory scopes, files, domains, time budget",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			resp, err := newAdminClient(socket).do(http.MethodGet, "/v1/skills", nil)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var list daemon.SkillList
			if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
				return &exitError{exitRefused, err}
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(list)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SKILL\tVERSION\tKIND\tTOOLS\tMEMORY\tFILES\tDOMAINS\tEFFORT")
			for _, p := range list.Skills {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%dm\n", p.Name, orDash(p.Version), orDash(p.Kind), orDash(toolRules(p.AllowedTools)),
					orDash(strings.Join(p.AllowedMemoryScopes, ",")), orDash(strings.Join(p.AllowedFiles, ",")), orDash(strings.Join(p.AllowedDomains, ",")), p.EffortMinutes)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			for _, u := range list.Unusable {
				fmt.Fprintf(out, "not usable: %s: %s\n", u.SkillID, u.Error)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&socket, "socket", defaultAdminSocket(), "the daemon's admin socket (default $"+socketEnv+", else /run/cyberos/supervisor.sock)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the skills' policies as JSON")
	return cmd
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

// runReplay prints invocation id's recorded tool calls, re-judged against
// the SKILL.md at repPolicy when given (exit 1 when any would now be
// denied): `replay ID` and `skill broker replay --invocation ID`.
func runReplay(out io.Writer, socket, repID, repPolicy string, repJSON bool) error {
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
	resp, err := newAdminClient(socket).do(http.MethodGet, "/v1/invocations/"+repID+"/replay", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var calls []broker.Decided
	if err := json.NewDecoder(resp.Body).Decode(&calls); err != nil {
		return &exitError{exitRefused, err}
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
	judged := daemon.Rejudge(calls, pol)
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
		fmt.Fprintf(out, "%s%s  now: %s", mark, humanCall(j.Decided), j.Verdict)
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
