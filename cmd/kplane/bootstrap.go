// This file holds `kplane bootstrap`: what a new cluster needs once the API
// service answers (kplane up does the same itself).

package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/localcluster"
	"github.com/kplane/kplane/services/client"
)

func newBootstrapCommand() *cobra.Command {
	var (
		api     client.Credentials
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create the system namespaces (default, kube-system, kube-node-lease, kube-public) once the API service answers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			conn, err := api.Dial()
			if err != nil {
				return err
			}
			defer conn.Close()
			if err := localcluster.Bootstrap(cmd.Context(), conn, timeout); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "system namespaces present")
			return nil
		},
	}
	registerCredentials(cmd.Flags(), &api, "an administrator (group system:masters)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}
