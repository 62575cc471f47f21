// This file holds Status.Print, `kplane status`'s table.

package localcluster

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
)

// Print writes st as `kplane status` shows it: a table of the processes,
// then how many nodes are Ready and any errors met while asking.
func (st *Status) Print(out io.Writer) error {
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
		ps        []ProcessStatus
	}{{"apiserver", st.APIServer}, {"gateway", st.Gateway}, {"scheduler", st.Scheduler},
		{"controllers", st.Controllers}, {"nodeagent", st.NodeAgent}, {"dns", st.DNS}, {"proxy", st.Proxy}} {
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
