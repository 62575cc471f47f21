// This file holds `kplane down`: it stops the `kplane up` running in a data
// directory.

package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/localcluster"
)

func newDownCommand() *cobra.Command {
	var (
		dataDir string
		grace   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Stop the kplane up running in --data-dir",
		Long: `Stop the kplane up running in --data-dir (found through the state file
<data-dir>/` + localcluster.StateFile + ` it writes): SIGTERM to kplane up, which stops its
processes in order as on Ctrl-C, then SIGKILL to whatever still runs after
--grace-period. The data (store, certificates, logs) stays.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			killed, err := localcluster.Down(cmd.Context(), dataDir, grace)
			if err != nil {
				return err
			}
			if len(killed) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "kplane stopped; killed after %s: %s\n", grace, strings.Join(killed, ", "))
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout(), "kplane stopped")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".kplane", "the data directory of the kplane up to stop")
	f.DurationVar(&grace, "grace-period", 40*time.Second, "how long to wait for a clean stop before SIGKILL")
	return cmd
}
