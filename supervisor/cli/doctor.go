package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"

	"cyberos.dev/client"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
)

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	var socket string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Say what this kernel and build can enforce",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			findings := append(sandbox.Doctor(), egressFinding(), daemonPlacement(socket))
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
	cmd.Flags().StringVar(&socket, "socket", defaultAdminSocket(), "a running daemon's admin socket, asked where it puts the sandboxes' cgroups (default $"+socketEnv+")")
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

// daemonPlacement asks the daemon on socket, if one answers, where it
// makes its sandboxes' cgroups: the placement doctor finds for itself is
// its own process's, which a daemon under the systemd unit does not share.
func daemonPlacement(socket string) sandbox.Finding {
	f := sandbox.Finding{Control: "daemon cgroups", OK: true}
	c := client.New(socket)
	c.HTTP.Timeout = 2 * time.Second
	st, err := c.Status(context.Background())
	switch {
	case err != nil:
		f.Detail = "no daemon answers on " + socket + ": the cgroup placement above is this process's own"
	case st.SandboxCgroups == "":
		f.Detail = "the daemon on " + socket + " does not say (an older version)"
	default:
		f.Detail = "the daemon on " + socket + " makes sandboxes " + st.SandboxCgroups
	}
	return f
}
