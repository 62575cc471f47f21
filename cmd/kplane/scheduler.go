// This file holds `kplane scheduler`: kube-scheduler's flags
// (scheduler.Options), then the scheduler run.

package main

import (
	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/services/scheduler"
)

func newSchedulerCommand() *cobra.Command {
	var o scheduler.Options
	p := component.Options{Service: "scheduler", FollowOnly: true}
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the scheduler: bind every pending pod to the best node",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			o.Logger, o.Telemetry = proc.Log, proc.Tel
			return scheduler.RunStandard(cmd.Context(), o)
		},
	}
	o.AddFlags(cmd.Flags())
	p.AddFlags(cmd.Flags(), "")
	return cmd
}
