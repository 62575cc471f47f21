// This file holds `kplane bootstrap`: what a new cluster needs once the API
// service answers (kplane up does the same itself).

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/localcluster"
)

func newBootstrapCommand() *cobra.Command {
	var (
		api     apiClientFlags
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create the system namespaces (default, kube-system, kube-node-lease, kube-public) once the API service answers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			conn, err := api.dial()
			if err != nil {
				return err
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			for {
				actx, acancel := context.WithTimeout(ctx, 5*time.Second)
				err = localcluster.CreateSystemNamespaces(actx, conn)
				acancel()
				if err == nil {
					fmt.Fprintln(cmd.OutOrStdout(), "system namespaces present")
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("bootstrap: %w (last: %w)", ctx.Err(), err)
				case <-time.After(time.Second):
				}
			}
		},
	}
	api.register(cmd.Flags(), "an administrator (group system:masters)")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "give up after this long")
	return cmd
}
