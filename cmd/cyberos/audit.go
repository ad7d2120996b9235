package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cyberos/supervisor/audit"
)

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Export and verify the audit chain"}
	var stateDir string
	cmd.PersistentFlags().StringVar(&stateDir, "state-dir", "/var/lib/cyberos", "where the audit store lives")

	var invocation, kind string
	export := &cobra.Command{
		Use:   "export",
		Short: "Print audit rows as JSON lines (all of them, or filtered)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := audit.OpenReader(stateDir)
			if err != nil {
				return &exitError{exitRefused, err}
			}
			defer r.Close()
			var rows []audit.Row
			err = r.Each(context.Background(), audit.Filter{InvocationID: invocation, Kind: audit.Kind(kind)}, func(row audit.Row) error {
				rows = append(rows, row)
				return nil
			})
			if err != nil {
				return &exitError{exitOutcome, err}
			}
			return audit.WriteJSONL(cmd.OutOrStdout(), rows)
		},
	}
	export.Flags().StringVar(&invocation, "invocation", "", "only this invocation's rows")
	export.Flags().StringVar(&kind, "kind", "", "only rows of this kind (e.g. skill.invoked_completed)")

	var file string
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Check the hash chain and that every completed row has its started row",
		Long: "Checks the store (or --file, an unfiltered `audit export`): every row's hash, the chain, " +
			"contiguous seq, and pairing; lists started invocations without a completed row as in flight. " +
			"The store's journal (audit.jsonl) is checked line by line and every row compared with the index " +
			"(audit.db); a bad row is named by seq, row_id, file, line and field. Nothing in the state dir is " +
			"written, so it works on a read-only or full disk.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var rows []audit.Row
			if file != "" {
				f, err := openInput(file)
				if err != nil {
					return &exitError{exitUsage, err}
				}
				defer f.Close()
				if rows, err = audit.ReadJSONL(f); err != nil {
					return &exitError{exitOutcome, fmt.Errorf("%s: %w", file, err)}
				}
			}
			var rep audit.Report
			if file != "" {
				rep = audit.Verify(rows)
			} else {
				var err error
				if rep, err = audit.VerifyDir(context.Background(), stateDir); err != nil {
					return &exitError{exitRefused, err}
				}
			}
			printReport(cmd.OutOrStdout(), rep)
			if !rep.OK {
				return &exitError{exitOutcome, errors.New("audit chain does not verify")}
			}
			return nil
		},
	}
	verify.Flags().StringVar(&file, "file", "", "verify this export (JSON lines, - for stdin) instead of the store")

	var acceptLoss bool
	repair := &cobra.Command{
		Use:   "repair",
		Short: "Rebuild a damaged or missing audit file from the other one, once that one verifies",
		Long: "Checks the store; if the journal (audit.jsonl) verifies, a damaged index (audit.db) is moved " +
			"aside as audit.db.damaged-<time> and rebuilt from it; if the journal is missing or cut short and " +
			"the index verifies, the journal is rewritten from the index. Run it with the daemon stopped.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := audit.Repair(context.Background(), stateDir, acceptLoss)
			for _, m := range res.Moved {
				fmt.Fprintf(cmd.OutOrStdout(), "kept the damaged file as %s\n", m)
			}
			if err != nil {
				return &exitError{exitOutcome, err}
			}
			switch res.Action {
			case "none":
				fmt.Fprintf(cmd.OutOrStdout(), "nothing to repair: %d rows, chain intact\n", res.Rows)
			default:
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %d rows, chain intact\n", res.Action, res.Rows)
			}
			return nil
		},
	}
	repair.Flags().BoolVar(&acceptLoss, "accept-loss", false,
		"when rows past the anchor (audit.anchor) are gone for good, accept the loss: reset the anchor to the chain's head")
	cmd.AddCommand(export, verify, repair)
	return cmd
}

func openInput(name string) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	return os.Open(name)
}

func printReport(w io.Writer, rep audit.Report) {
	for _, p := range rep.Problems {
		where := ""
		if p.File != "" {
			where = " in " + p.File
			if p.Line > 0 {
				where += fmt.Sprintf(" line %d", p.Line)
			}
		}
		if p.Field != "" {
			where += ", field " + p.Field
		}
		if p.Seq == 0 && p.RowID == "" {
			fmt.Fprintf(w, "BAD  %s: %s\n", strings.TrimPrefix(where, " in "), p.Reason)
			continue
		}
		id := ""
		if p.RowID != "" {
			id = " (row_id " + p.RowID + ")"
		}
		fmt.Fprintf(w, "BAD  row seq %d%s%s: %s\n", p.Seq, id, where, p.Reason)
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(w, "NOTE %s\n", n)
	}
	for _, id := range rep.InFlight {
		fmt.Fprintf(w, "OPEN invocation %s: started, no completed row (in flight, or lost until the next start reconciles it)\n", id)
	}
	if rep.OK {
		fmt.Fprintf(w, "ok: %d rows, chain intact, every completed row has its started row\n", rep.Rows)
	} else {
		fmt.Fprintf(w, "FAILED: %d rows checked, %d problems\n", rep.Rows, len(rep.Problems))
	}
}
