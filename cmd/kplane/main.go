// Command kplane runs any part of the kplane control plane as a subcommand.
// Each subcommand is a thin main: it parses flags into a Config, builds the
// part with New and runs it until the process is signalled.
// `kplane version` prints the module version the binary was built from.

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kplane:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "kplane",
		Short:         "A Kubernetes-style, highly available control plane on its own Raft store",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVersionCommand(), newSimRuntimeCommand(), newNodeAgentCommand(), newStoreCommand(),
		newUpCommand(), newDownCommand(), newStatusCommand(), newCertsCommand(), newHealthcheckCommand(),
		newBootstrapCommand(), newAPIServerCommand(), newSchedulerCommand(), newControllersCommand(),
		newGatewayCommand(), newDNSCommand(), newProxyCommand(), newTraceCommand(), newJaegerCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the kplane version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			version := "(devel)"
			if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" {
				version = info.Main.Version
			}
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "kplane %s\n", version)
			return err
		},
	}
}
