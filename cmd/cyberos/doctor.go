package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/cyberos/supervisor/supervisor/sandbox"
)

func newDoctorCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Say what this kernel and build can enforce",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			findings := sandbox.Doctor()
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
