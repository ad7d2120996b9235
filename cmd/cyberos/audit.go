package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

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
			store, err := openStoreReadOnly(stateDir)
			if err != nil {
				return err
			}
			defer store.Close()
			rows, err := store.Rows(context.Background(), audit.Filter{InvocationID: invocation, Kind: audit.Kind(kind)})
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
			"contiguous seq, and pairing; lists started invocations without a completed row as in flight.",
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
			} else {
				store, err := openStoreReadOnly(stateDir)
				if err != nil {
					return err
				}
				defer store.Close()
				if rows, err = store.Rows(context.Background(), audit.Filter{}); err != nil {
					return &exitError{exitOutcome, err}
				}
			}
			rep := audit.Verify(rows)
			printReport(cmd.OutOrStdout(), rep)
			if !rep.OK {
				return &exitError{exitOutcome, errors.New("audit chain does not verify")}
			}
			return nil
		},
	}
	verify.Flags().StringVar(&file, "file", "", "verify this export (JSON lines, - for stdin) instead of the store")
	cmd.AddCommand(export, verify)
	return cmd
}

func openStoreReadOnly(stateDir string) (*audit.Store, error) {
	store, err := audit.Open(stateDir)
	if err != nil {
		return nil, &exitError{exitRefused, err}
	}
	return store, nil
}

func openInput(name string) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	return os.Open(name)
}

func printReport(w io.Writer, rep audit.Report) {
	for _, p := range rep.Problems {
		fmt.Fprintf(w, "BAD  row seq %d (row_id %s): %s\n", p.Seq, p.RowID, p.Reason)
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
