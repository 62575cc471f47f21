// This file holds the simulated pod sandboxes and their CRI calls.

package simruntime

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// sandbox is one simulated pod sandbox.
type sandbox struct {
	id             string
	meta           *runtimeapi.PodSandboxMetadata
	state          runtimeapi.PodSandboxState
	createdAt      time.Time
	ip             netip.Addr // invalid: no pod IP
	hostNetwork    bool
	logDir         string
	hostname       string
	resolvConf     string // the pod's /etc/resolv.conf ("": none), from the config's DnsConfig
	runtimeHandler string
	labels         map[string]string
	annotations    map[string]string
}

// sandboxMeta copies m: the runtime keeps its own metadata, labels and
// annotations and answers with copies, so that neither a caller in the same
// process (cri's in-process client passes requests and answers as they
// are) nor the runtime can change what the other holds.
func sandboxMeta(m *runtimeapi.PodSandboxMetadata) *runtimeapi.PodSandboxMetadata {
	if m == nil {
		return nil
	}
	return &runtimeapi.PodSandboxMetadata{Name: m.Name, Uid: m.Uid, Namespace: m.Namespace, Attempt: m.Attempt}
}

func (sb *sandbox) toCRI() *runtimeapi.PodSandbox {
	return &runtimeapi.PodSandbox{
		Id:             sb.id,
		Metadata:       sandboxMeta(sb.meta),
		State:          sb.state,
		CreatedAt:      sb.createdAt.UnixNano(),
		Labels:         maps.Clone(sb.labels),
		Annotations:    maps.Clone(sb.annotations),
		RuntimeHandler: sb.runtimeHandler,
	}
}

func (sb *sandbox) status() *runtimeapi.PodSandboxStatus {
	st := &runtimeapi.PodSandboxStatus{
		Id:             sb.id,
		Metadata:       sandboxMeta(sb.meta),
		State:          sb.state,
		CreatedAt:      sb.createdAt.UnixNano(),
		Network:        &runtimeapi.PodSandboxNetworkStatus{},
		Labels:         maps.Clone(sb.labels),
		Annotations:    maps.Clone(sb.annotations),
		RuntimeHandler: sb.runtimeHandler,
	}
	if sb.ip.IsValid() {
		st.Network.Ip = sb.ip.String()
	}
	mode := runtimeapi.NamespaceMode_POD
	if sb.hostNetwork {
		mode = runtimeapi.NamespaceMode_NODE
	}
	st.Linux = &runtimeapi.LinuxPodSandboxStatus{Namespaces: &runtimeapi.Namespace{
		Options: &runtimeapi.NamespaceOption{Network: mode},
	}}
	return st
}

// RunPodSandbox creates a ready sandbox with a pod IP from the pod CIDR
// (none for host network or without a CIDR). A second sandbox with the same
// metadata (name, namespace, uid, attempt) is refused while the first
// exists, as containerd refuses the reused name.
func (r *Runtime) RunPodSandbox(ctx context.Context, req *runtimeapi.RunPodSandboxRequest) (*runtimeapi.RunPodSandboxResponse, error) {
	cfg := req.GetConfig()
	meta := cfg.GetMetadata()
	if meta.GetName() == "" || meta.GetUid() == "" {
		return nil, status.Error(codes.InvalidArgument, "sandbox config: metadata name and uid are required")
	}
	if msg, ok := cfg.GetAnnotations()[AnnotationSandboxError]; ok {
		return nil, status.Errorf(codes.Unknown, "kplane-sim: run pod sandbox %s/%s: %s (annotation %s)",
			meta.GetNamespace(), meta.GetName(), msg, AnnotationSandboxError)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, other := range r.sandboxes {
		m := other.meta
		if m.GetName() == meta.GetName() && m.GetNamespace() == meta.GetNamespace() &&
			m.GetUid() == meta.GetUid() && m.GetAttempt() == meta.GetAttempt() {
			return nil, status.Errorf(codes.AlreadyExists, "sandbox name %s_%s_%s_%d is reserved for %s",
				meta.GetName(), meta.GetNamespace(), meta.GetUid(), meta.GetAttempt(), other.id)
		}
	}
	sb := &sandbox{
		id:             r.newIDLocked("sandbox"),
		meta:           sandboxMeta(meta),
		state:          runtimeapi.PodSandboxState_SANDBOX_READY,
		createdAt:      r.clock.Now(),
		hostNetwork:    cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == runtimeapi.NamespaceMode_NODE,
		logDir:         cfg.GetLogDirectory(),
		hostname:       cfg.GetHostname(),
		resolvConf:     resolvConf(cfg.GetDnsConfig()),
		runtimeHandler: req.GetRuntimeHandler(),
		labels:         maps.Clone(cfg.GetLabels()),
		annotations:    maps.Clone(cfg.GetAnnotations()),
	}
	if !sb.hostNetwork && r.pods != nil {
		ip, ok := r.pods.allocate()
		if !ok {
			return nil, status.Errorf(codes.ResourceExhausted, "kplane-sim: no free address in pod CIDR %s", r.pods.prefix)
		}
		sb.ip = ip
	}
	r.sandboxes[sb.id] = sb
	r.log.Debug("ran pod sandbox", "id", sb.id, "pod", meta.GetNamespace()+"/"+meta.GetName(), "ip", sb.ip)
	return &runtimeapi.RunPodSandboxResponse{PodSandboxId: sb.id}, nil
}

// StopPodSandbox stops every container of the sandbox at once (the caller
// stops them gracefully first), releases its pod IP and marks it not ready.
// Stopping an unknown sandbox succeeds (the CRI contract: idempotent).
func (r *Runtime) StopPodSandbox(ctx context.Context, req *runtimeapi.StopPodSandboxRequest) (*runtimeapi.StopPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return &runtimeapi.StopPodSandboxResponse{}, nil
	}
	r.stopSandboxLocked(sb)
	return &runtimeapi.StopPodSandboxResponse{}, nil
}

func (r *Runtime) stopSandboxLocked(sb *sandbox) {
	now := r.clock.Now()
	for _, c := range r.containers {
		if c.sandboxID == sb.id {
			c.observe(now)
			c.kill(now, exitCodeSIGKILL)
		}
	}
	if sb.ip.IsValid() && r.pods != nil {
		r.pods.release(sb.ip)
	}
	sb.ip = netip.Addr{}
	sb.state = runtimeapi.PodSandboxState_SANDBOX_NOTREADY
}

// RemovePodSandbox removes the sandbox and its containers, stopping them
// forcibly if needed. Removing an unknown sandbox succeeds.
func (r *Runtime) RemovePodSandbox(ctx context.Context, req *runtimeapi.RemovePodSandboxRequest) (*runtimeapi.RemovePodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return &runtimeapi.RemovePodSandboxResponse{}, nil
	}
	r.stopSandboxLocked(sb)
	for id, c := range r.containers {
		if c.sandboxID == sb.id {
			delete(r.containers, id)
		}
	}
	delete(r.sandboxes, sb.id)
	return &runtimeapi.RemovePodSandboxResponse{}, nil
}

// PodSandboxStatus returns the sandbox's status, NotFound when unknown.
func (r *Runtime) PodSandboxStatus(ctx context.Context, req *runtimeapi.PodSandboxStatusRequest) (*runtimeapi.PodSandboxStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sb, ok := r.sandboxes[req.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "pod sandbox %q not found", req.GetPodSandboxId())
	}
	resp := &runtimeapi.PodSandboxStatusResponse{Status: sb.status()}
	if req.GetVerbose() {
		resp.Info = map[string]string{"runtime": RuntimeName, "logDirectory": sb.logDir}
	}
	return resp, nil
}

// ListPodSandbox lists sandboxes matching the filter (ID, or a unique ID
// prefix; state; every label of the selector), oldest first.
func (r *Runtime) ListPodSandbox(ctx context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	f := req.GetFilter()
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*sandbox
	for _, sb := range r.sandboxes {
		if f.GetId() != "" && !strings.HasPrefix(sb.id, f.GetId()) {
			continue
		}
		if f.GetState() != nil && sb.state != f.GetState().GetState() {
			continue
		}
		if !matchLabels(sb.labels, f.GetLabelSelector()) {
			continue
		}
		out = append(out, sb)
	}
	slices.SortFunc(out, func(a, b *sandbox) int {
		if n := a.createdAt.Compare(b.createdAt); n != 0 {
			return n
		}
		return strings.Compare(a.id, b.id)
	})
	resp := &runtimeapi.ListPodSandboxResponse{}
	for _, sb := range out {
		resp.Items = append(resp.Items, sb.toCRI())
	}
	return resp, nil
}

func matchLabels(labels, selector map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// resolvConf is the /etc/resolv.conf of a sandbox's containers, written as
// containerd writes it from the CRI DnsConfig: the search line, a
// nameserver line per server, the options line. Without a DnsConfig there
// is none.
func resolvConf(c *runtimeapi.DNSConfig) string {
	if c == nil {
		return ""
	}
	var b strings.Builder
	if len(c.GetSearches()) > 0 {
		b.WriteString("search " + strings.Join(c.GetSearches(), " ") + "\n")
	}
	for _, s := range c.GetServers() {
		b.WriteString("nameserver " + s + "\n")
	}
	if len(c.GetOptions()) > 0 {
		b.WriteString("options " + strings.Join(c.GetOptions(), " ") + "\n")
	}
	return b.String()
}
