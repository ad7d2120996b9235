package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/fleet"
	"cyberos.dev/supervisor/config"
	"cyberos.dev/telemetry"
)

// witnessTimeout bounds the comparison with the fleet's PostgreSQL at start.
const witnessTimeout = 10 * time.Second

// dsnPlaceholder stands for the DSN file in the commands an error
// suggests when the daemon's config gives the DSN inline: the DSN may
// carry a password, which has no place in a log.
const dsnPlaceholder = "DSN_FILE"

// witnessAtStart compares the local chain's head with the head the fleet's
// PostgreSQL holds for this host (fleet.CheckHead) before the daemon writes
// a row. A journal shorter than what was shipped, or another chain, is
// refused: serving on it would reuse seqs already shipped. It runs after
// checkFleet, as the host's role: row-level security shows that role only
// its host's rows, which is all the comparison reads, and checkFleet has
// made sure cyberos_hosts binds the role to this host id (else it would
// see none and find nothing to compare). A PostgreSQL that cannot be
// reached does not stop the daemon (hosts serve while it is away, their
// rows waiting in the journal): that is logged at WARN, and
// cyberos_audit_witness_unchecked reads 1 until the shipper, which
// compares the same way at its first connection, has done so.
func witnessAtStart(pool *pgxpool.Pool, f config.Fleet, host, stateDir string, store *auditstore.Store, metrics *telemetry.Metrics, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), witnessTimeout)
	defer cancel()
	t0 := time.Now()
	err := fleet.CheckHead(ctx, pool, host, store)
	switch {
	case err == nil:
		if metrics != nil {
			metrics.AuditWitnessUnchecked.Set(0)
		}
		log.Info("audit witness: the journal holds the chain the fleet's PostgreSQL holds for this host", "host_id", host, "took", time.Since(t0).Round(time.Microsecond))
		return nil
	case errors.Is(err, fleet.ErrDiverged):
		return &exitError{exitRefused, fmt.Errorf("audit chain diverged from the rows the fleet's PostgreSQL holds for this host: %w; refusing to start: %s",
			err, witnessHint(err, stateDir, host, f.PostgresDSNFile))}
	default:
		if metrics != nil {
			metrics.AuditWitnessUnchecked.Set(1)
		}
		log.Warn("audit witness unchecked: the fleet's PostgreSQL could not be reached at start, so the journal was not compared with the rows shipped for this host; going on, and the daemon's shipper compares them at its first connection (cyberos_audit_witness_unchecked 1 until then)",
			"host_id", host, "err", err)
		return nil
	}
}

// witnessHint says what an operator does about a chain the witness
// refused. The commands name the daemon's DSN file (the host's role reads
// the host's rows; the auditor's would do too), never a DSN, which may
// carry a password.
func witnessHint(err error, stateDir, host, dsnFile string) string {
	if dsnFile == "" {
		dsnFile = dsnPlaceholder
	}
	verify := fmt.Sprintf("`cyberos audit verify --state-dir %s --dsn-file %s --host %s`", stateDir, dsnFile, host)
	repair := fmt.Sprintf("`cyberos audit repair --state-dir %s --from-dsn-file %s --host %s`", stateDir, dsnFile, host)
	if errors.Is(err, fleet.ErrMissingLocally) {
		return fmt.Sprintf("%s lists the rows; %s restores them from PostgreSQL (with the daemon stopped)", verify, repair)
	}
	return fmt.Sprintf("%s lists the rows that differ; keep this state dir as evidence, then either move it aside and restore the shipped chain with %s, or start it under another fleet.host_id", verify, repair)
}

// witnessHost is the host id `audit verify --dsn` and `audit repair
// --from-dsn` take: --host, else what the daemon would use without
// fleet.host_id ($CYBEROS_HOST_ID, the hostname).
func witnessHost(flag string) (string, error) {
	f := config.Fleet{HostID: flag}
	return f.ResolvedHostID()
}

// verifyWitness compares the journal in stateDir with the rows PostgreSQL
// holds for host and prints what differs; bad reports damage (rows missing
// locally or differing), not rows waiting to be shipped.
func verifyWitness(w io.Writer, pool *pgxpool.Pool, stateDir, host string) (bad bool, err error) {
	r, err := auditstore.OpenReader(stateDir)
	if err != nil {
		return false, err
	}
	defer r.Close()
	ctx := context.Background()
	rep, err := fleet.Compare(ctx, pool, host, func(fn func(audit.Row) error) error { return r.EachJournalRow(ctx, fn) })
	if err != nil {
		return false, err
	}
	printWitness(w, rep, stateDir)
	return !rep.OK, nil
}

func printWitness(w io.Writer, rep fleet.WitnessReport, stateDir string) {
	fmt.Fprintf(w, "== the journal in %s against PostgreSQL's rows of host %s\n", stateDir, rep.Host)
	for _, m := range rep.MissingLocally {
		fmt.Fprintf(w, "BAD  rows %s: in PostgreSQL, missing locally (a cut tail, or a state dir started afresh); `cyberos audit repair --state-dir %s --from-dsn-file DSN_FILE --host %s` restores a cut tail\n",
			m, stateDir, rep.Host)
	}
	for _, p := range rep.Differ {
		fmt.Fprintf(w, "BAD  row seq %d (row_id %s), field %s: %s\n", p.Seq, p.RowID, p.Field, p.Reason)
	}
	if more := rep.DifferCount - len(rep.Differ); more > 0 {
		fmt.Fprintf(w, "BAD  and %d more rows differ from PostgreSQL's copies\n", more)
	}
	for _, g := range rep.Gaps {
		fmt.Fprintf(w, "BAD  rows %s: in the journal, not in PostgreSQL, which holds later rows\n", g)
	}
	for _, u := range rep.Unshipped {
		fmt.Fprintf(w, "NOTE rows %s: in the journal, not shipped yet (lag, not damage)\n", u)
	}
	if rep.ShippedRows == 0 {
		fmt.Fprintf(w, "NOTE PostgreSQL holds no rows of host %s (is it the daemon's fleet.host_id? pass --host)\n", rep.Host)
	}
	if rep.OK {
		fmt.Fprintf(w, "ok: %d journal rows, %d in PostgreSQL, the same rows where both hold them\n", rep.LocalRows, rep.ShippedRows)
	} else {
		fmt.Fprintf(w, "FAILED: the journal (%d rows, to seq %d) and PostgreSQL (%d rows, to seq %d) disagree\n", rep.LocalRows, rep.LocalLast, rep.ShippedRows, rep.ShippedLast)
	}
}

// witnessStateDir decides whether `audit verify --dsn` compares a local
// journal: the one in --state-dir when given (it must hold one), else the
// default state dir's when there is one there.
func witnessStateDir(cmd *cobra.Command, stateDir string) (dir string, ok bool, err error) {
	_, statErr := os.Stat(filepath.Join(stateDir, auditstore.JournalName))
	switch {
	case statErr == nil:
		return stateDir, true, nil
	case cmd.Flag("state-dir").Changed:
		return "", false, fmt.Errorf("--state-dir %s: no journal to compare with PostgreSQL: %w", stateDir, statErr)
	default:
		return "", false, nil
	}
}

// repairFromDSN restores a cut tail of the journal in stateDir from the
// rows PostgreSQL holds for host (fleet.RestoreFromWitness), then verifies
// the store. It reads as the host's own role (row-level security shows it
// that host's rows, all a restore needs) or the auditor's.
func repairFromDSN(cmd *cobra.Command, stateDir string, dsn *dsnFlag, hostFlag string) error {
	host, err := witnessHost(hostFlag)
	if err != nil {
		return &exitError{exitUsage, fmt.Errorf("--host: %w", err)}
	}
	pool, err := dsn.pool(cmd.ErrOrStderr())
	if err != nil {
		return &exitError{exitUsage, err}
	}
	defer pool.Close()
	ctx := context.Background()
	w := cmd.OutOrStdout()
	res, err := fleet.RestoreFromWitness(ctx, pool, host, stateDir)
	if err != nil {
		if res.Before.Host != "" {
			printWitness(w, res.Before, stateDir)
		}
		return &exitError{exitOutcome, fmt.Errorf("repair from PostgreSQL (host %s): %w", host, err)}
	}
	if res.Restored.To == 0 {
		fmt.Fprintf(w, "nothing to restore: the journal holds every row PostgreSQL holds for host %s (%d rows)\n", host, res.Before.ShippedRows)
	} else {
		fmt.Fprintf(w, "restored rows %s of host %s from PostgreSQL: every line rebuilt from the shipped fields, its hash recomputed and linked to the row before\n", res.Restored, host)
	}
	rep, err := auditstore.VerifyDir(ctx, stateDir)
	if err != nil {
		return &exitError{exitRefused, err}
	}
	printReport(w, rep, false)
	if !rep.OK {
		return &exitError{exitOutcome, fmt.Errorf("after the restore the store does not verify: %s", strings.TrimSpace(rep.Problems[0].Reason))}
	}
	return nil
}

// runWitness is witnessAtStart for `skill run`: when the daemon config has
// a fleet and the run writes to that config's state dir (whose chain the
// fleet's host_id names), the database must be set up for that host's
// role (checkFleet, as the daemon checks it) and the journal must hold
// what was shipped before the skill runs. There are no metrics here: an
// unreachable PostgreSQL is a WARN on stderr, and the daemon's shipper
// compares at its next start.
func runWitness(cfg config.Config, stateDir string, store *auditstore.Store, log *slog.Logger) error {
	if !cfg.Fleet.Enabled() || !sameDir(cfg.StateDir, stateDir) {
		return nil
	}
	pool, host, err := fleetPool(cfg.Fleet)
	if err != nil {
		return &exitError{exitUsage, err}
	}
	defer pool.Close()
	if err := checkFleet(pool, host, log); err != nil {
		return &exitError{exitRefused, err}
	}
	return witnessAtStart(pool, cfg.Fleet, host, stateDir, store, nil, log)
}

// sameDir reports whether a and b name one directory.
func sameDir(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(fa, fb)
}
