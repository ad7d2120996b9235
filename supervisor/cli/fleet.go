package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"cyberos.dev/fleet"
)

func newFleetCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "fleet", Short: "Set up a fleet's shared PostgreSQL"}
	var dsn *dsnFlag
	migrate := &cobra.Command{
		Use:   "migrate",
		Short: "Bring a fleet's PostgreSQL to this build's schema, as the tables' owner",
		Long: "Applies the migrations this build has and the database has not, each in its own transaction, " +
			"as the role of --dsn-file, which owns the tables (and, the first time, may create the group roles " +
			"cyberos_runtime and cyberos_auditor: CREATEROLE, or an administrator makes them first). The daemons " +
			"never migrate: they run as roles that own nothing and refuse a database at another version. " +
			"docs/fleet.md has the roles and grants.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pool, err := dsn.pool(cmd.ErrOrStderr())
			if err != nil {
				return &exitError{exitUsage, err}
			}
			defer pool.Close()
			if err := fleet.Migrate(context.Background(), pool); err != nil {
				return &exitError{exitRefused, err}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema at version %d\n", fleet.SchemaVersion())
			return nil
		},
	}
	dsn = addDSNFlags(migrate.Flags(), "dsn", "the fleet's database, as the role that owns its tables")
	cmd.AddCommand(migrate)
	return cmd
}
