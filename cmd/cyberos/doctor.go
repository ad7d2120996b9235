package main

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/cyberos/supervisor/supervisor/sandbox"
	"github.com/cyberos/supervisor/supervisor/tools"
)

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Say what this kernel and build can enforce",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			findings := append(sandbox.Doctor(), egressFinding())
			out := cmd.OutOrStdout()
			if asJSON {
				return json.NewEncoder(out).Encode(findings)
			}
			for _, f := range findings {
				mark := "ok  "
				if !f.OK {
					mark = "NO  "
				}
				fmt.Fprintf(out, "%s %-24s %s\n", mark, f.Control, f.Detail)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the findings as JSON")
	return cmd
}

// egressFinding says how the Http tools are kept off the host, and whether
// the host's addresses and routes it needs can be read here (when they
// cannot, every Http connection is refused).
func egressFinding() sandbox.Finding {
	f := sandbox.Finding{Control: "egress", OK: true, Detail: tools.EgressDetail}
	if _, err := tools.HostAddrs(); err != nil {
		f.OK, f.Detail = false, fmt.Sprintf("%s; the host's addresses cannot be read (%v): every Http connection is refused", tools.EgressDetail, err)
	} else if _, err := tools.KernelRoute(netip.MustParseAddr("127.0.0.1")); err != nil {
		f.OK, f.Detail = false, fmt.Sprintf("%s; the route lookup fails (%v): every Http connection is refused", tools.EgressDetail, err)
	}
	return f
}
