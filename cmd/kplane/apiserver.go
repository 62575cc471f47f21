// This file holds `kplane apiserver`: kube-apiserver's flags mapped onto
// apiserver.Options, then the standard API service built and run.

package main

import (
	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/component"
	"github.com/kplane/kplane/services/apiserver"
)

func newAPIServerCommand() *cobra.Command {
	o := apiserver.DefaultOptions()
	p := component.Options{Service: "apiserver", GCPercent: new(apiserver.DefaultGCPercent)}
	cmd := &cobra.Command{
		Use:   "apiserver",
		Short: "Run the API service: typed Kubernetes resources over gRPC on the store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			p.Instance = o.Listen
			proc, err := component.Start(cmd.Context(), p)
			if err != nil {
				return err
			}
			defer proc.Close()
			o.Logger, o.TracerProvider, o.MeterProvider = proc.Log, proc.Tel.TracerProvider(), proc.Tel.MeterProvider()
			s, err := apiserver.NewStandard(cmd.Context(), o)
			if err != nil {
				return err
			}
			proc.Log.Info("API service listening", "addr", s.Addr(), "store", o.StoreEndpoints)
			return s.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	o.AddFlags(f)
	f.IntVar(&p.BlockProfileRate, "block-profile-rate", 0, "with --profiling-listen: runtime.SetBlockProfileRate (0 leaves block profiling off)")
	p.AddFlags(f, "127.0.0.1:6060")
	return cmd
}
