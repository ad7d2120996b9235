package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
)

// RowFilter selects shipped rows; zero fields select everything.
type RowFilter struct {
	Host         string
	Tenant       string
	InvocationID string
	Kind         audit.Kind
	Since        time.Time // rows whose ts is at or after it
}

// Hosts lists the host ids that shipped rows, sorted.
func Hosts(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT DISTINCT host_id FROM audit_rows ORDER BY host_id`)
	if err != nil {
		return nil, fmt.Errorf("fleet: hosts: %w", err)
	}
	hosts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("fleet: hosts: %w", err)
	}
	return hosts, nil
}

// EachRow calls fn for every shipped row f selects, by host then seq,
// streaming (never all rows in memory). An error from fn stops the walk.
func EachRow(ctx context.Context, pool *pgxpool.Pool, f RowFilter, fn func(host string, r audit.Row) error) error {
	var where []string
	var args []any
	add := func(col, v string) {
		if v != "" {
			args = append(args, v)
			where = append(where, fmt.Sprintf("%s = $%d", col, len(args)))
		}
	}
	add("host_id", f.Host)
	add("tenant_id", f.Tenant)
	add("invocation_id", f.InvocationID)
	add("kind", string(f.Kind))
	if !f.Since.IsZero() { // ts is fixed-width UTC: text order is time order
		args = append(args, f.Since.UTC().Format(audit.TimeFormat))
		where = append(where, fmt.Sprintf("ts >= $%d", len(args)))
	}
	q := `SELECT host_id, seq, row_id, kind, ts, prev_hash, row_hash, payload FROM audit_rows`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY host_id, seq`
	rows, err := pool.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("fleet: read rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var host, kind, payload string
		var r audit.Row
		if err := rows.Scan(&host, &r.Seq, &r.RowID, &kind, &r.TS, &r.PrevHash, &r.RowHash, &payload); err != nil {
			return fmt.Errorf("fleet: read rows: %w", err)
		}
		r.Kind, r.Payload = audit.Kind(kind), json.RawMessage(payload)
		if err := fn(host, r); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("fleet: read rows: %w", err)
	}
	return nil
}

// HostReport is one host's chain as PostgreSQL holds it.
type HostReport struct {
	Host   string            `json:"host_id"`
	Report auditstore.Report `json:"report"`
}

// Verify checks every host's shipped chain (only host's, when set) as
// `audit verify` checks a journal: each row's hash, the chain from seq 1,
// pairing, and every checkpoint's signature (with pubkey, when set, that
// key's). heads (with host only) are that host's heads recorded off the
// host (its syslog anchor lines): a shipped row at a head's seq must have
// the head's row_hash, else the chain was rewritten before it was
// shipped; a head beyond the shipped rows is noted as not shipped yet. A
// host with no rows is not in the result.
func Verify(ctx context.Context, pool *pgxpool.Pool, host, pubkey string, heads []audit.Checkpoint) ([]HostReport, error) {
	if len(heads) > 0 && host == "" {
		return nil, fmt.Errorf("fleet: heads name one host's chain: give the host")
	}
	var out []HostReport
	var v *auditstore.Verifier
	cur := ""
	var last int64
	headHash := make([]string, len(heads))
	flush := func() {
		if v == nil {
			return
		}
		rep := v.Report()
		for i, h := range heads {
			switch {
			case last < h.Seq:
				rep.Notes = append(rep.Notes, fmt.Sprintf("the head recorded for seq %d is not shipped yet (PostgreSQL holds up to seq %d)", h.Seq, last))
			case headHash[i] != h.RowHash:
				rep.Problems = append(rep.Problems, auditstore.Problem{Seq: h.Seq, Field: "row_hash",
					Reason: fmt.Sprintf("the shipped row_hash is not the one the host recorded (%.12s…): the chain was rewritten", h.RowHash)})
				rep.OK = false
			}
		}
		out = append(out, HostReport{Host: cur, Report: rep})
	}
	err := EachRow(ctx, pool, RowFilter{Host: host}, func(h string, r audit.Row) error {
		if v == nil || h != cur {
			flush()
			v, cur = auditstore.NewVerifier(), h
			v.PinKey(pubkey)
		}
		v.Add(r)
		last = r.Seq
		for i, hd := range heads {
			if r.Seq == hd.Seq {
				headHash[i] = r.RowHash
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	flush()
	if host != "" && len(out) == 0 && len(heads) > 0 {
		out = append(out, HostReport{Host: host, Report: auditstore.Report{OK: false, Problems: []auditstore.Problem{{
			Reason: fmt.Sprintf("no shipped rows, but heads up to seq %d were recorded", heads[len(heads)-1].Seq)}}}})
	}
	return out, nil
}

// Rows reads the rows every host shipped as one source of an
// invocation's rows (daemon.RowSource): replay finds an invocation that
// ran on any host. Only InvocationID and Kind filter; AfterSeq and Limit
// name one host's chain and are refused.
type Rows struct{ Pool *pgxpool.Pool }

// Each calls fn for every shipped row f selects, by host then seq.
func (r Rows) Each(ctx context.Context, f auditstore.Filter, fn func(audit.Row) error) error {
	if f.AfterSeq != 0 || f.Limit != 0 {
		return fmt.Errorf("fleet: rows across hosts have no one seq order (AfterSeq, Limit)")
	}
	return EachRow(ctx, r.Pool, RowFilter{InvocationID: f.InvocationID, Kind: f.Kind}, func(_ string, row audit.Row) error { return fn(row) })
}
