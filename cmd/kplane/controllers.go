// This file holds `kplane controllers`: kube-controller-manager's flags
// (controllers.Options), then the controller manager run.

package main

import (
	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/services/controllers"
)

func newControllersCommand() *cobra.Command {
	var o controllers.Options
	p := component.Options{Service: "controllers", FollowOnly: true}
	cmd := &cobra.Command{
		Use:   "controllers",
		Short: "Run the controllers: deployments, replicasets, garbage collection, endpoints, namespaces, node lifecycle, service accounts, root CA ConfigMaps, daemon sets, disruption budgets, jobs, cronjobs, TTL after finished, pod garbage collection, replication controllers, custom resource definitions, endpoint slices, endpoint slice mirroring, resource quotas, stateful sets, persistent volumes and claims, horizontal pod autoscalers",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			o.Logger, o.Telemetry = proc.Log, proc.Tel
			return controllers.RunStandard(cmd.Context(), o)
		},
	}
	o.AddFlags(cmd.Flags())
	p.AddFlags(cmd.Flags(), "")
	return cmd
}
