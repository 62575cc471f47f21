// This file holds the node's pod network on a real runtime: the CNI
// network configuration (a bridge with host-local addresses from the
// node's pod CIDR, and portmap for hostPorts) that the agent writes into
// the runtime's CNI configuration directory, the host's masquerade rule for
// what pods send out of the cluster's pod network, and the port mappings a
// pod's sandbox asks for.

package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// CNINetworkName is the name of the CNI network the agent writes; it
// names the host-local address directory and the bridge plugin's NAT
// chains' comments.
const CNINetworkName = "kplane"

// CNIConfFile is the file the agent writes in its CNI configuration
// directory. containerd's CRI plugin uses the first network of that
// directory in lexical order, so the name sorts before the usual
// 10-containerd-net.conflist; earlierCNIConfigs names any that still
// sort first.
const CNIConfFile = "05-kplane.conflist"

// DefaultCNIBridge is the bridge the pods' veths attach to when
// Config.CNIBridge is empty.
const DefaultCNIBridge = "kplane0"

// cniConfList is the network a node's pods join: a Linux bridge that is
// their gateway (the bridge gets the pod CIDR's first address),
// host-local addresses from the pod CIDR, then portmap for hostPorts.
// containerd brings each sandbox's loopback up itself (its CRI plugin
// always adds the loopback plugin as a network of its own), so it is not
// in this chain. The bridge plugin's own ipMasq is off: it masquerades
// everything leaving the node's pod CIDR, pods of other nodes included,
// where Kubernetes' network model wants pod-to-pod traffic unNATed; the
// agent's masquerade rule (ensureMasquerade) spares the cluster's pod
// network instead, as the kubelet's kubenet did with its
// --non-masquerade-cidr.
func cniConfList(podCIDR, bridge, ipamDir string) ([]byte, error) {
	p, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return nil, fmt.Errorf("pod CIDR %q: %w", podCIDR, err)
	}
	if !p.Addr().Is4() || p.Bits() > 30 {
		return nil, fmt.Errorf("pod CIDR %s: the CNI bridge needs an IPv4 subnet of /30 or larger", podCIDR)
	}
	if l := len(bridge); l == 0 || l > 15 {
		return nil, fmt.Errorf("bridge name %q: want 1 to 15 characters (a Linux interface name)", bridge)
	}
	type obj = map[string]any
	conf := obj{
		"cniVersion": "1.0.0",
		"name":       CNINetworkName,
		"plugins": []obj{
			{
				"type":        "bridge",
				"bridge":      bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": obj{
					"type":    "host-local",
					"ranges":  [][]obj{{{"subnet": p.Masked().String()}}},
					"routes":  []obj{{"dst": "0.0.0.0/0"}},
					"dataDir": ipamDir,
				},
			},
			{"type": "portmap", "capabilities": obj{"portMappings": true}, "snat": true},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// writeCNIConfig writes the node's network into dir (made if missing)
// through a temporary file and a rename, so the runtime, which watches the
// directory and reloads it, never reads half a file: the temporary name
// has no .conflist suffix, which CNI's loader skips.
func writeCNIConfig(dir, podCIDR, bridge, ipamDir string) error {
	b, err := cniConfList(podCIDR, bridge, ipamDir)
	if err != nil {
		return fmt.Errorf("nodeagent: CNI config: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("nodeagent: CNI config: %w", err)
	}
	final := filepath.Join(dir, CNIConfFile)
	if old, err := os.ReadFile(final); err == nil && string(old) == string(b) {
		return nil // unchanged: no reload for the runtime
	}
	tmp := final + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("nodeagent: CNI config: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("nodeagent: CNI config: %w", err)
	}
	return nil
}

// portMappings are the sandbox's port mappings, made as the kubelet makes
// them: every port of every container; the runtime gives portmap only
// those with a hostPort, and ignores them all for a host-network pod.
func portMappings(spec *corev1.PodSpec) []*runtimeapi.PortMapping {
	var out []*runtimeapi.PortMapping
	for _, c := range spec.GetContainers() {
		for _, p := range c.GetPorts() {
			out = append(out, &runtimeapi.PortMapping{
				Protocol:      protocol(p.GetProtocol()),
				ContainerPort: p.GetContainerPort(),
				HostPort:      p.GetHostPort(),
				HostIp:        p.GetHostIp(),
			})
		}
	}
	return out
}

// protocol is the CRI protocol of a port's (TCP when empty).
func protocol(p string) runtimeapi.Protocol {
	switch p {
	case "UDP":
		return runtimeapi.Protocol_UDP
	case "SCTP":
		return runtimeapi.Protocol_SCTP
	default:
		return runtimeapi.Protocol_TCP
	}
}

// ensureMasquerade makes the host masquerade what the node's pods send
// out of the cluster's pod network (clusterCIDR), so they reach beyond the
// host, while traffic between pods, on this node or another, keeps its
// addresses. It adds one nat POSTROUTING rule, named by a comment with the
// node's name, unless it is there. The rule stays when the agent stops, as
// the kubelet's do, so running pods keep their way out.
func ensureMasquerade(ctx context.Context, node, podCIDR, clusterCIDR string) error {
	if _, err := exec.LookPath("iptables"); err != nil {
		return fmt.Errorf("nodeagent: masquerade for the pod network needs iptables (apt-get install -y iptables): %w", err)
	}
	rule := []string{"POSTROUTING", "-s", podCIDR, "!", "-d", clusterCIDR,
		"-m", "comment", "--comment", "kplane " + node + ": pods to outside the cluster pod network", "-j", "MASQUERADE"}
	check := exec.CommandContext(ctx, "iptables", append([]string{"-w", "-t", "nat", "-C"}, rule...)...)
	err := check.Run()
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("nodeagent: iptables -C: %w", err)
	}
	if out, err := exec.CommandContext(ctx, "iptables", append([]string{"-w", "-t", "nat", "-A"}, rule...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("nodeagent: add the pods' masquerade rule: %w: %s", err, out)
	}
	return nil
}

// nonMasqueradeCIDR is the cluster's pod network as the masquerade rule
// sees it: clusterCIDR when it holds podCIDR, else podCIDR alone.
func nonMasqueradeCIDR(podCIDR, clusterCIDR string) string {
	pod, err := netip.ParsePrefix(podCIDR)
	if err != nil {
		return podCIDR
	}
	if c, err := netip.ParsePrefix(clusterCIDR); err == nil && c.Bits() <= pod.Bits() && c.Contains(pod.Addr()) {
		return c.Masked().String()
	}
	return pod.Masked().String()
}

// earlierCNIConfigs lists the network configurations in dir that sort
// before CNIConfFile: containerd would use the first of them, not the
// agent's.
func earlierCNIConfigs(dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		n := e.Name()
		switch filepath.Ext(n) {
		case ".conf", ".conflist", ".json":
			if n < CNIConfFile {
				out = append(out, n)
			}
		}
	}
	return out
}
