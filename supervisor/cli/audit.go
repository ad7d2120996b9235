package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/fleet"
)

// newAuditCmd is `cyberos audit`: export, verify and repair a state dir's
// audit store (or, with --dsn, a fleet's shipped rows).
func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Export and verify the audit chain"}
	stateDir := cmd.PersistentFlags().String("state-dir", "/var/lib/cyberos", "where the audit store lives")
	cmd.AddCommand(newAuditExportCmd(stateDir), newAuditVerifyCmd(stateDir), newAuditRepairCmd(stateDir))
	return cmd
}

// newAuditExportCmd is `cyberos audit export`.
func newAuditExportCmd(stateDir *string) *cobra.Command {
	var invocation, kind, host, tenant, since string
	var dsn *dsnFlag
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Print audit rows as JSON lines (all of them, or filtered)",
		Long: "Prints this host's rows (--state-dir), or with --dsn the rows every host of a fleet shipped to " +
			"PostgreSQL, each line then with its host_id, by host and seq.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dsn.set() {
				f := fleet.RowFilter{Host: host, Tenant: tenant, InvocationID: invocation, Kind: audit.Kind(kind)}
				if since != "" {
					t, err := parseSince(since)
					if err != nil {
						return &exitError{exitUsage, err}
					}
					f.Since = t
				}
				return exportFleet(cmd, dsn, f)
			}
			if host != "" || tenant != "" || since != "" {
				return &exitError{exitUsage, errors.New("--host, --tenant and --since select a fleet's rows: they need --dsn")}
			}
			return exportStateDir(cmd, *stateDir, auditstore.Filter{InvocationID: invocation, Kind: audit.Kind(kind)})
		},
	}
	cmd.Flags().StringVar(&invocation, "invocation", "", "only this invocation's rows")
	cmd.Flags().StringVar(&kind, "kind", "", "only rows of this kind (e.g. skill.invoked_completed)")
	dsn = addDSNFlags(cmd.Flags(), "dsn", "read the rows a fleet shipped to this PostgreSQL (as its auditor role)")
	cmd.Flags().StringVar(&host, "host", "", "with --dsn: only this host's rows")
	cmd.Flags().StringVar(&tenant, "tenant", "", "with --dsn: only this tenant's rows")
	cmd.Flags().StringVar(&since, "since", "", "with --dsn: only rows from this time on (RFC 3339, or a UTC date YYYY-MM-DD)")
	return cmd
}

// exportStateDir prints the rows of the store in stateDir that f selects
// as JSON lines.
func exportStateDir(cmd *cobra.Command, stateDir string, f auditstore.Filter) error {
	r, err := auditstore.OpenReader(stateDir)
	if err != nil {
		return &exitError{exitRefused, err}
	}
	defer r.Close()
	var rows []audit.Row
	err = r.Each(context.Background(), f, func(row audit.Row) error {
		rows = append(rows, row)
		return nil
	})
	if err != nil {
		return &exitError{exitOutcome, err}
	}
	return audit.WriteJSONL(cmd.OutOrStdout(), rows)
}

// auditVerifyFlags are `audit verify`'s flags.
type auditVerifyFlags struct {
	file, pubkeyFile, host string
	anchors                []string
	dsn                    *dsnFlag
}

// newAuditVerifyCmd is `cyberos audit verify`.
func newAuditVerifyCmd(stateDir *string) *cobra.Command {
	var f auditVerifyFlags
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the hash chain, its signed checkpoints, and that every completed row has its started row",
		Long: "Checks the store (or --file, an unfiltered `audit export`): every row's hash, the chain, " +
			"contiguous seq, and pairing; lists started invocations without a completed row as in flight. " +
			"The store's journal (audit.jsonl) is checked line by line and every row compared with the index " +
			"(audit.db); a bad row is named by seq, row_id, file, line and field. Every audit.checkpoint row " +
			"must sign a head of this chain (with --pubkey, with that key), the chain must reach audit.anchor " +
			"and every --anchor. Nothing in the state dir is written, so it works on a read-only or full disk.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := f.options()
			if err != nil {
				return err
			}
			if f.dsn.set() {
				return verifyFleet(cmd, f.dsn, f.host, opts.PublicKey, opts.Heads, *stateDir)
			}
			var rep auditstore.Report
			if f.file != "" {
				if rep, err = verifyExport(f.file, opts); err != nil {
					return err
				}
			} else if rep, err = auditstore.VerifyDirWith(context.Background(), *stateDir, opts); err != nil {
				return &exitError{exitRefused, err}
			}
			printReport(cmd.OutOrStdout(), rep, opts.PublicKey != "")
			if !rep.OK {
				return &exitError{exitOutcome, errors.New("audit chain does not verify")}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.pubkeyFile, "pubkey", "",
		"the public key every checkpoint must be signed with (KEY.pub, written beside the daemon's audit.signing_key)")
	cmd.Flags().StringArrayVar(&f.anchors, "anchor", nil,
		"SEQ:ROW_HASH of a head recorded outside the state dir (the daemon's syslog lines say anchor=SEQ:ROW_HASH); the chain must reach it")
	cmd.Flags().StringVar(&f.file, "file", "", "verify this export (JSON lines, - for stdin) instead of the store")
	f.dsn = addDSNFlags(cmd.Flags(), "dsn", "verify every host's chain a fleet shipped to this PostgreSQL instead (as its auditor role), and compare this host's journal "+
		"(--state-dir) with the rows shipped under its host id (--host; default $CYBEROS_HOST_ID, else the hostname) both ways")
	cmd.Flags().StringVar(&f.host, "host", "", "with --dsn: only this host's chain (and --anchor: that host's recorded heads)")
	return cmd
}

// options checks that the flags go together and reads what they bring:
// the pinned public key and the recorded heads.
func (f *auditVerifyFlags) options() (auditstore.VerifyOptions, error) {
	var opts auditstore.VerifyOptions
	switch {
	case f.dsn.set() && f.file != "":
		return opts, &exitError{exitUsage, errors.New("--dsn verifies the fleet's rows in PostgreSQL, --file an export: one of them")}
	case f.dsn.set() && len(f.anchors) > 0 && f.host == "":
		return opts, &exitError{exitUsage, errors.New("--anchor with --dsn needs --host: an anchor is one host's head")}
	case !f.dsn.set() && f.host != "":
		return opts, &exitError{exitUsage, errors.New("--host selects a fleet's host: it needs --dsn")}
	case f.dsn.set() && f.pubkeyFile != "" && f.host == "":
		return opts, &exitError{exitUsage, errors.New("--pubkey with --dsn needs --host: each host signs with its own key")}
	}
	if f.pubkeyFile != "" {
		k, err := auditstore.ReadPublicKey(f.pubkeyFile)
		if err != nil {
			return opts, &exitError{exitUsage, fmt.Errorf("--pubkey: %w", err)}
		}
		opts.PublicKey = k
	}
	for _, a := range f.anchors {
		h, err := parseAnchor(a)
		if err != nil {
			return opts, &exitError{exitUsage, err}
		}
		opts.Heads = append(opts.Heads, h)
	}
	return opts, nil
}

// verifyExport verifies the rows of an export (file, - for stdin): an
// unfiltered one is a whole chain.
func verifyExport(file string, opts auditstore.VerifyOptions) (auditstore.Report, error) {
	if len(opts.Heads) > 0 {
		return auditstore.Report{}, &exitError{exitUsage, errors.New("--anchor checks a state dir, not --file")}
	}
	f, err := openInput(file)
	if err != nil {
		return auditstore.Report{}, &exitError{exitUsage, err}
	}
	defer f.Close()
	rows, err := audit.ReadJSONL(f)
	if err != nil {
		return auditstore.Report{}, &exitError{exitOutcome, fmt.Errorf("%s: %w", file, err)}
	}
	v := auditstore.NewVerifier()
	v.PinKey(opts.PublicKey)
	for _, r := range rows {
		v.Add(r)
	}
	return v.Report(), nil
}

// newAuditRepairCmd is `cyberos audit repair`.
func newAuditRepairCmd(stateDir *string) *cobra.Command {
	var acceptLoss bool
	var signingKey, host string
	var fromDSN *dsnFlag
	cmd := &cobra.Command{
		Use:   "repair",
		Short: "Rebuild the audit store row by row from whichever file's copy of each row verifies",
		Long: "Checks the store; when it does not verify, each row is taken from the copy that verifies (its hash, " +
			"its link to the row before, a checkpoint's signature), the journal's line (audit.jsonl) or the index's " +
			"row (audit.db), so a row damaged, missing or out of place in one file is restored from the other. The " +
			"files replaced are kept in STATE_DIR/audit-damaged-<time>/. Rows that verify in neither file are listed " +
			"and nothing is changed. With --from-dsn (or --from-dsn-file), a journal cut short is completed from the rows " +
			"this host shipped to the fleet's PostgreSQL, each checked to continue the chain. Run it with the daemon stopped.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fromDSN.set() {
				if acceptLoss || signingKey != "" {
					return &exitError{exitUsage, errors.New("--from-dsn restores rows from PostgreSQL; --accept-loss and --signing-key are for a repair without it")}
				}
				return repairFromDSN(cmd, *stateDir, fromDSN, host)
			}
			if host != "" {
				return &exitError{exitUsage, errors.New("--host names the host whose rows --from-dsn restores: it needs --from-dsn")}
			}
			return repairStateDir(cmd, *stateDir, acceptLoss, signingKey)
		},
	}
	cmd.Flags().BoolVar(&acceptLoss, "accept-loss", false,
		"when rows past the anchor (audit.anchor) are gone for good, accept the loss: reset the anchor to the chain's head")
	cmd.Flags().StringVar(&signingKey, "signing-key", "", "sign the anchor --accept-loss resets with this key (the daemon's audit.signing_key)")
	fromDSN = addDSNFlags(cmd.Flags(), "from-dsn",
		"restore a cut tail of the journal from the rows this host shipped to the fleet's PostgreSQL (as this host's role, or the auditor's)")
	cmd.Flags().StringVar(&host, "host", "", "with --from-dsn: the host id the rows were shipped under (default: $CYBEROS_HOST_ID, else the hostname)")
	return cmd
}

// repairStateDir repairs the store in stateDir from its own two files,
// signing a reset anchor with signingKey ("": unsigned).
func repairStateDir(cmd *cobra.Command, stateDir string, acceptLoss bool, signingKey string) error {
	var signer *audit.Signer
	if signingKey != "" {
		var err error
		if signer, err = auditstore.LoadSigningKey(signingKey, false); err != nil {
			return &exitError{exitUsage, fmt.Errorf("--signing-key: %w", err)}
		}
	}
	res, err := auditstore.RepairSigned(context.Background(), stateDir, acceptLoss, signer)
	for _, m := range res.Moved {
		fmt.Fprintf(cmd.OutOrStdout(), "kept the replaced file as %s\n", m)
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
}

func openInput(name string) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	return os.Open(name)
}

// parseAnchor reads --anchor: SEQ:ROW_HASH, optionally prefixed anchor=.
func parseAnchor(s string) (audit.Checkpoint, error) {
	seq, hash, ok := strings.Cut(strings.TrimPrefix(s, "anchor="), ":")
	n, err := strconv.ParseInt(seq, 10, 64)
	if !ok || err != nil || n < 1 || len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
		return audit.Checkpoint{}, fmt.Errorf("--anchor: %q is not SEQ:ROW_HASH (a positive seq, 64 lowercase hex digits)", s)
	}
	return audit.Checkpoint{Seq: n, RowHash: hash}, nil
}

// parseSince reads --since: an RFC 3339 time or a UTC date.
func parseSince(v string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-12-01T09:00:00Z) or a date (2026-12-01)", v)
}

// exportFleet prints the shipped rows f selects as JSON lines, each with
// its host_id.
func exportFleet(cmd *cobra.Command, dsn *dsnFlag, f fleet.RowFilter) error {
	pool, err := dsn.pool(cmd.ErrOrStderr())
	if err != nil {
		return &exitError{exitUsage, err}
	}
	defer pool.Close()
	enc := json.NewEncoder(cmd.OutOrStdout())
	err = fleet.EachRow(context.Background(), pool, f, func(host string, r audit.Row) error {
		return enc.Encode(struct {
			Host string `json:"host_id"`
			audit.Row
		}{host, r})
	})
	if err != nil {
		return &exitError{exitRefused, err}
	}
	return nil
}

// verifyFleet verifies each host's shipped chain and prints a report per
// host; it fails when any host's chain does not verify.
func verifyFleet(cmd *cobra.Command, dsn *dsnFlag, host, pubkey string, heads []audit.Checkpoint, stateDir string) error {
	pool, err := dsn.pool(cmd.ErrOrStderr())
	if err != nil {
		return &exitError{exitUsage, err}
	}
	defer pool.Close()
	reps, err := fleet.Verify(context.Background(), pool, host, pubkey, heads)
	if err != nil {
		return &exitError{exitRefused, err}
	}
	w := cmd.OutOrStdout()
	if len(reps) == 0 {
		fmt.Fprintln(w, "no rows: no host has shipped any (or none under --host)")
	}
	var bad []string
	for _, r := range reps {
		fmt.Fprintf(w, "== host %s\n", r.Host)
		printReport(w, r.Report, pubkey != "")
		if !r.Report.OK {
			bad = append(bad, r.Host)
		}
	}
	// PostgreSQL as this host's witness: its journal against the rows
	// shipped under its host id, in both directions.
	local, ok, err := witnessStateDir(cmd, stateDir)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	if ok {
		id, err := witnessHost(host)
		if err != nil {
			return &exitError{exitUsage, fmt.Errorf("--host: %w", err)}
		}
		differ, err := verifyWitness(w, pool, local, id)
		if err != nil {
			return &exitError{exitRefused, err}
		}
		if differ {
			bad = append(bad, "the journal in "+local+" against host "+id+"'s rows")
		}
	} else {
		fmt.Fprintf(w, "NOTE no journal in %s: no local chain compared with PostgreSQL (--state-dir names one)\n", stateDir)
	}
	if len(bad) > 0 {
		return &exitError{exitOutcome, fmt.Errorf("the chain of %s does not verify", strings.Join(bad, ", "))}
	}
	return nil
}

func printReport(w io.Writer, rep auditstore.Report, pinned bool) {
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
	if rep.Checkpoints > 0 {
		how := "pinned with --pubkey"
		if !pinned {
			how = "not pinned: pass --pubkey KEY.pub to require it"
		}
		fmt.Fprintf(w, "SIGNED %d checkpoints, the last over seq %d, by key %s (%s)\n", rep.Checkpoints, rep.LastCheckpoint, strings.Join(rep.SigningKeys, ", "), how)
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
