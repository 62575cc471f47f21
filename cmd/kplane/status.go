// This file holds `kplane status`: the state of the `kplane up` running in
// a data directory.

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/kplane/kplane/internal/localcluster"
)

func newStatusCommand() *cobra.Command {
	var dataDir, output string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the kplane up running in --data-dir: processes, store leader, active scheduler and controller manager, nodes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "" && output != "json" {
				return fmt.Errorf("-o %q: want json or nothing", output)
			}
			st, err := localcluster.GetStatus(cmd.Context(), dataDir)
			if err != nil {
				return err
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			return printStatus(cmd.OutOrStdout(), st)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dataDir, "data-dir", ".kplane", "the data directory of the kplane up to ask")
	f.StringVarP(&output, "output", "o", "", "output format: json (every process with its component, name, current PID, restart count and endpoints)")
	return cmd
}

func printStatus(out io.Writer, st *localcluster.Status) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "COMPONENT\tNAME\tPID\tSTATE\tRESTARTS\tROLE\tENDPOINT\tMETRICS\n")
	state := func(running bool) string {
		if running {
			return "running"
		}
		return "down"
	}
	for _, s := range st.Store {
		role := "follower"
		switch {
		case !s.Running || s.ID == "":
			role = "-"
		case s.Leader:
			role = "leader"
		}
		fmt.Fprintf(w, "store\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", s.Name, s.PID, state(s.Running), s.Restarts, role, s.ClientURL, dash(s.Metrics))
	}
	for _, g := range []struct {
		component string
		ps        []localcluster.ProcessStatus
	}{{"apiserver", st.APIServer}, {"gateway", st.Gateway}, {"scheduler", st.Scheduler},
		{"controllers", st.Controllers}, {"nodeagent", st.NodeAgent}, {"dns", st.DNS}} {
		for _, p := range g.ps {
			role := "-"
			switch {
			case p.Healthy != nil && *p.Healthy:
				role = "serving"
			case p.Healthy != nil:
				role = "not serving"
			case p.Active != nil && *p.Active:
				role = "active"
			case p.Active != nil:
				role = "standby"
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%s\n", g.component, p.Name, p.PID, state(p.Running), p.Restarts, role, dash(p.Endpoint), dash(p.Metrics))
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	ready := 0
	for _, n := range st.Nodes {
		if n.Ready {
			ready++
		}
	}
	fmt.Fprintf(out, "\nnodes: %s of %d Ready\n", strconv.Itoa(ready), len(st.Nodes))
	for _, e := range st.Errors {
		fmt.Fprintf(out, "error: %s\n", e)
	}
	return nil
}

// dash is s, or "-" for an empty column.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
