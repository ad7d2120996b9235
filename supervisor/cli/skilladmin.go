package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"cyberos.dev/client"
)

// newInvokeCmd is `skill invoke`: one invocation through the daemon.
func newInvokeCmd() *cobra.Command {
	var f runFlags
	var version, requestID string
	cmd := &cobra.Command{
		Use:   "invoke SKILL_ID",
		Short: "Invoke an installed skill through the daemon",
		Args:  cobra.ExactArgs(1),
	}
	adminCmd(cmd, func(ctx context.Context, c *client.Client, cmd *cobra.Command, a []string) error {
		args, err := readArgs(f.args, f.argsFile)
		if err != nil {
			return err
		}
		req := client.InvokeRequest{SkillID: a[0], Version: version, TenantID: f.tenant, CallerPersona: f.persona,
			Traceparent: f.traceparent, DeadlineMS: f.deadline.Milliseconds(), RequestID: requestID}
		if len(bytes.TrimSpace(args)) > 0 {
			if !json.Valid(args) {
				return &exitError{exitUsage, errors.New("args: not one valid JSON value")}
			}
			req.Args = args
		}
		env, err := c.Invoke(ctx, req)
		if err != nil {
			return cliErr(err)
		}
		return writeEnvelope(cmd.OutOrStdout(), *env, f.json)
	})
	fl := cmd.Flags()
	fl.StringVar(&version, "version", "", "require this version of the skill")
	fl.StringVar(&f.args, "args", "", "the skill's args, one JSON value (default {})")
	fl.StringVar(&f.argsFile, "args-file", "", "read the args from this file")
	fl.StringVar(&f.tenant, "tenant", client.DefaultTenant, "tenant id (UUID)")
	fl.StringVar(&f.persona, "persona", "", "caller persona")
	fl.StringVar(&f.traceparent, "traceparent", "", "W3C traceparent of the caller")
	fl.DurationVar(&f.deadline, "deadline", 0, "shorten the deadline below effort_minutes (e.g. 4s)")
	fl.BoolVar(&f.json, "json", false, "print the envelope as one JSON object")
	fl.StringVar(&requestID, "request-id", "", "idempotency key: a repeat within idempotency_window gets the first answer instead of a second run")
	return cmd
}

// newListCmd is `skill list`: the daemon's installed skills, their versions
// and what their policies allow.
func newListCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the daemon's installed skills: version, allowed tools, memory scopes, files, domains, time budget",
		Args:  cobra.NoArgs,
	}
	adminCmd(cmd, func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
		list, err := c.Skills(ctx)
		if err != nil {
			return cliErr(err)
		}
		out := cmd.OutOrStdout()
		if asJSON {
			return writeJSON(out, list)
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
	})
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the skills' policies as JSON")
	return cmd
}
