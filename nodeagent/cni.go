// This file holds the node's pod network on a real runtime: the CNI
// network configuration (a bridge with host-local addresses from the
// node's pod CIDR, and portmap for hostPorts) that the agent writes into
// the runtime's CNI configuration directory, and the port mappings a pod's
// sandbox asks for.

package nodeagent

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
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
// directory in lexical order, so the name sorts early.
const CNIConfFile = "10-kplane.conflist"

// DefaultCNIBridge is the bridge the pods' veths attach to when
// Config.CNIBridge is empty.
const DefaultCNIBridge = "kplane0"

// cniConfList is the network a node's pods join: a Linux bridge that is
// their gateway (the bridge gets the pod CIDR's first address) and
// masquerades what they send out of the pod CIDR, host-local addresses
// from the pod CIDR, then portmap for hostPorts. containerd brings each
// sandbox's loopback up itself (its CRI plugin always adds the loopback
// plugin as a network of its own), so it is not in this chain.
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
				"ipMasq":      true,
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
