// This file holds the test of docker-compose.yml: it runs `kplane up`'s
// topology, with command lines the binary accepts, healthchecks, volumes and
// dependencies in order.

package packaging

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	root := repoRoot()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root), cli.WithConsistency(true), cli.WithDiscardEnvFile)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
	}
	return p
}

// kplaneCommand returns a service's kplane command line, or nil for a
// service that does not run the kplane image.
func kplaneCommand(s types.ServiceConfig) []string {
	if s.Build == nil && !strings.HasPrefix(s.Image, "kplane") {
		return nil
	}
	return s.Command
}

// TestComposeFile loads docker-compose.yml with the compose-spec loader and
// checks it runs `kplane up`'s topology with command lines the kplane
// binary accepts, healthchecks, volumes and dependencies in order.
func TestComposeFile(t *testing.T) {
	k := &Kplane{Bin: kplaneBinary(t)}
	ctx := context.Background()
	p := loadCompose(t)

	want, err := k.UpTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := Topology{Processes: map[string]int{}}
	byComponent := map[string][]types.ServiceConfig{}
	for _, s := range p.Services {
		args := kplaneCommand(s)
		if args == nil {
			continue
		}
		if err := k.CheckArgs(ctx, args); err != nil {
			t.Errorf("service %s: %v", s.Name, err)
		}
		if hc := s.HealthCheck; hc != nil && len(hc.Test) > 2 && hc.Test[0] == "CMD" {
			if hc.Test[1] != "/kplane" {
				t.Errorf("service %s: healthcheck runs %q, not /kplane (the image has no shell)", s.Name, hc.Test[1])
			} else if err := k.CheckArgs(ctx, hc.Test[2:]); err != nil {
				t.Errorf("service %s healthcheck: %v", s.Name, err)
			}
		}
		byComponent[args[0]] = append(byComponent[args[0]], s)
		switch args[0] {
		case "store", "apiserver", "gateway", "scheduler", "controllers", "nodeagent":
			got.Processes[args[0]]++
			// Restarted when it exits (a scheduler that lost its Lease,
			// a crash), as kplane up restarts it.
			if !slices.Contains([]string{types.RestartPolicyAlways, types.RestartPolicyUnlessStopped, types.RestartPolicyOnFailure}, s.Restart) {
				t.Errorf("service %s: restart %q; kplane up restarts a process that fails", s.Name, s.Restart)
			}
		default:
			// A one-shot (certs, bootstrap) others wait for to complete.
			if s.Restart == types.RestartPolicyAlways || s.Restart == types.RestartPolicyUnlessStopped {
				t.Errorf("one-shot service %s: restart %q would run it again after it completes", s.Name, s.Restart)
			}
		}
		if args[0] == "nodeagent" {
			n, _ := FlagValue(args, "nodes")
			var v int
			if _, err := fmtSscan(n, &v); err != nil {
				t.Errorf("service %s: --nodes %q: %v", s.Name, n, err)
			}
			got.Nodes += v
		}
	}
	for comp, n := range want.Processes {
		if got.Processes[comp] != n {
			t.Errorf("%d %s services, kplane up runs %d", got.Processes[comp], comp, n)
		}
	}
	if got.Nodes != want.Nodes {
		t.Errorf("node agents carry %d nodes, kplane up's %d", got.Nodes, want.Nodes)
	}

	// Store members: a healthcheck, a named volume at the data dir, and
	// one initial cluster naming exactly the members by the names and peer
	// URLs they advertise.
	var members []string
	for _, s := range byComponent["store"] {
		name, _ := FlagValue(s.Command, "name")
		peer, _ := FlagValue(s.Command, "initial-advertise-peer-urls")
		members = append(members, name+"="+peer)
		if name != s.Name {
			t.Errorf("service %s runs member --name %s", s.Name, name)
		}
		if s.HealthCheck == nil || s.HealthCheck.Disable {
			t.Errorf("store %s has no healthcheck", s.Name)
		}
		dataDir, _ := FlagValue(s.Command, "data-dir")
		if !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Type == types.VolumeTypeVolume && v.Target == dataDir
		}) {
			t.Errorf("store %s: no named volume at its --data-dir %s", s.Name, dataDir)
		}
	}
	slices.Sort(members)
	for _, s := range byComponent["store"] {
		ic, _ := FlagValue(s.Command, "initial-cluster")
		list := strings.Split(ic, ",")
		slices.Sort(list)
		if !slices.Equal(list, members) {
			t.Errorf("store %s: --initial-cluster %s, members are %s", s.Name, ic, strings.Join(members, ","))
		}
	}

	// Whoever a component talks to is a service of the right kind, and it
	// waits for it: the store healthy, the API services healthy, the
	// certificates written.
	serviceOf := func(addr string) string {
		addr = strings.TrimPrefix(strings.TrimPrefix(addr, "http://"), "https://")
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return ""
		}
		return host
	}
	isComponent := func(name, comp string) bool {
		return slices.ContainsFunc(byComponent[comp], func(s types.ServiceConfig) bool { return s.Name == name })
	}
	waitsFor := func(s types.ServiceConfig, dep, condition string) {
		t.Helper()
		d, ok := s.DependsOn[dep]
		if !ok {
			t.Errorf("service %s does not depend on %s", s.Name, dep)
			return
		}
		if d.Condition != condition {
			t.Errorf("service %s waits for %s with condition %q, want %q", s.Name, dep, d.Condition, condition)
		}
	}
	for _, s := range byComponent["apiserver"] {
		eps, _ := FlagValue(s.Command, "store-endpoints")
		for _, ep := range strings.Split(eps, ",") {
			host := serviceOf(ep)
			if !isComponent(host, "store") {
				t.Errorf("apiserver %s: store endpoint %s is not a store service", s.Name, ep)
			}
			waitsFor(s, host, types.ServiceConditionHealthy)
		}
		if s.HealthCheck == nil {
			t.Errorf("apiserver %s has no healthcheck", s.Name)
		}
	}
	certs := byComponent["certs"]
	if len(certs) != 1 {
		t.Fatalf("%d services run kplane certs, want one", len(certs))
	}
	for comp, list := range byComponent {
		for _, s := range list {
			switch comp {
			case "certs":
				continue
			case "store", "apiserver":
				waitsFor(s, certs[0].Name, types.ServiceConditionCompletedSuccessfully)
				continue
			}
			server, ok := FlagValue(s.Command, "server")
			if !ok {
				t.Errorf("service %s has no --server", s.Name)
				continue
			}
			for _, addr := range strings.Split(server, ",") {
				host := serviceOf(addr)
				if !isComponent(host, "apiserver") {
					t.Errorf("service %s: --server %s is not an API service", s.Name, addr)
				}
				waitsFor(s, host, types.ServiceConditionHealthy)
			}
		}
	}

	// Every certificate and key a service names is one the certs service
	// writes: run its command line into a temp dir.
	tmp := t.TempDir()
	certArgs := append(slices.Clone(certs[0].Command), "--data-dir="+tmp, "--kubeconfig="+filepath.Join(tmp, "pki", "kubeconfig"))
	if out, err := exec.Command(k.Bin, certArgs...).CombinedOutput(); err != nil {
		t.Fatalf("kplane %s: %v: %s", strings.Join(certArgs, " "), err, out)
	}
	for _, s := range p.Services {
		refs := PKIFiles(s.Command)
		if s.HealthCheck != nil {
			refs = append(refs, PKIFiles(s.HealthCheck.Test)...)
		}
		for _, f := range refs {
			if _, err := os.Stat(filepath.Join(tmp, "pki", f)); err != nil {
				t.Errorf("service %s names %s/%s, which kplane certs does not write", s.Name, PKIDir, f)
			}
		}
		if len(refs) > 0 && !slices.ContainsFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Source == "pki" && v.Target == PKIDir
		}) {
			t.Errorf("service %s names certificates but does not mount the pki volume at %s", s.Name, PKIDir)
		}
	}

	// Only the members and the API services reach the store: the store CA
	// signs their certificates and is the one the store trusts, and the
	// members' healthchecks verify them with it.
	var stores, apis [][]string
	var names []string
	for _, s := range byComponent["store"] {
		stores = append(stores, s.Command)
		name, _ := FlagValue(s.Command, "name")
		names = append(names, name)
		if ca, _ := FlagValue(s.HealthCheck.Test, "ca-file"); ca != StoreCAFile {
			t.Errorf("store %s: healthcheck --ca-file %q, want %s", s.Name, ca, StoreCAFile)
		}
	}
	for _, s := range byComponent["apiserver"] {
		apis = append(apis, s.Command)
	}
	checkStoreTrust(t, filepath.Join(tmp, "pki"), stores, names, apis, "")

	// The gateway's HTTPS port is published; Jaeger runs with its UI
	// published.
	for _, s := range byComponent["gateway"] {
		listen, _ := FlagValue(s.Command, "listen")
		_, port, _ := net.SplitHostPort(listen)
		if !slices.ContainsFunc(s.Ports, func(pc types.ServicePortConfig) bool {
			return pc.Published != "" && strings.TrimSpace(port) == itoa(pc.Target)
		}) {
			t.Errorf("gateway %s: its --listen port %s is not published (%+v)", s.Name, port, s.Ports)
		}
	}
	jaeger, err := p.GetService("jaeger")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(jaeger.Image, "jaegertracing/jaeger:") {
		t.Errorf("jaeger image %q, want the official jaegertracing/jaeger", jaeger.Image)
	}
	if !slices.ContainsFunc(jaeger.Ports, func(pc types.ServicePortConfig) bool { return pc.Target == 16686 && pc.Published != "" }) {
		t.Errorf("jaeger's UI port 16686 is not published")
	}
}
