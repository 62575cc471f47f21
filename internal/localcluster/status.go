// This file holds Status: what `kplane status` reports about a running
// `kplane up` — every process, the store's Raft leader, the scheduler and
// controller manager that hold their Leases, and the nodes.

package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	coordinationv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// Status is a running cluster's state, grouped by component. Lists keep
// the start order.
type Status struct {
	DataDir     string          `json:"dataDir"`
	PID         int             `json:"pid"` // kplane up
	Store       []StoreStatus   `json:"store"`
	APIServer   []ProcessStatus `json:"apiserver"`
	Gateway     []ProcessStatus `json:"gateway"`
	Scheduler   []ProcessStatus `json:"scheduler"`
	Controllers []ProcessStatus `json:"controllers"`
	NodeAgent   []ProcessStatus `json:"nodeagent"`
	DNS         []ProcessStatus `json:"dns"`
	Proxy       []ProcessStatus `json:"proxy,omitempty"`
	Nodes       []NodeStatus    `json:"nodes"`
	// Errors are what could not be asked (e.g. the API service is down).
	Errors []string `json:"errors,omitempty"`
}

// StoreStatus is one store member.
type StoreStatus struct {
	Name      string `json:"name"`
	PID       int    `json:"pid"`
	Running   bool   `json:"running"`
	Restarts  int    `json:"restarts"`
	ID        string `json:"id,omitempty"` // member ID, hex as etcdctl prints it
	ClientURL string `json:"clientURL"`
	PeerURL   string `json:"peerURL"`
	Leader    bool   `json:"leader"`
	RaftTerm  uint64 `json:"raftTerm,omitempty"`
	Metrics   string `json:"metrics,omitempty"`
	Log       string `json:"log"`
}

// ProcessStatus is one process other than a store member. Healthy is set
// for API services (gRPC health SERVING); Active for leader-elected
// replicas holding their Lease.
type ProcessStatus struct {
	Name     string `json:"name"`
	PID      int    `json:"pid"`
	Running  bool   `json:"running"`
	Restarts int    `json:"restarts"`
	Endpoint string `json:"endpoint,omitempty"`
	Healthy  *bool  `json:"healthy,omitempty"`
	Identity string `json:"identity,omitempty"`
	Active   *bool  `json:"active,omitempty"`
	Metrics  string `json:"metrics,omitempty"`
	Log      string `json:"log"`
}

// NodeStatus is one node and its Ready condition.
type NodeStatus struct {
	Name  string `json:"name"`
	Ready bool   `json:"ready"`
}

// GetStatus asks the cluster recorded in dataDir for its status. What
// cannot be asked is listed in Status.Errors; only a missing or unreadable
// state file is an error.
func GetStatus(ctx context.Context, dataDir string) (*Status, error) {
	st, err := ReadState(dataDir)
	if err != nil {
		return nil, err
	}
	out := &Status{DataDir: st.DataDir, PID: st.PID}
	fail := func(what string, err error) { out.Errors = append(out.Errors, what+": "+err.Error()) }

	storeCA := st.StoreCAFile
	if storeCA == "" {
		// An older kplane up, whose one CA signed the store's certificates
		// too.
		storeCA = st.CAFile
	}
	storeTLS, err := loadClientTLS(storeCA, st.StoreCertFile, st.StoreKeyFile)
	if err != nil {
		return nil, err
	}
	adminTLS, err := loadClientTLS(st.CAFile, st.AdminCertFile, st.AdminKeyFile)
	if err != nil {
		return nil, err
	}
	var apiAddrs []string
	for _, p := range st.Processes {
		running := st.Alive(p.PID)
		if p.Component == "store" {
			out.Store = append(out.Store, storeStatus(ctx, p, running, storeTLS, fail))
			continue
		}
		ps := ProcessStatus{Name: p.Name, PID: p.PID, Running: running, Restarts: p.Restarts, Endpoint: p.Addr, Identity: p.Identity, Metrics: p.Metrics, Log: p.Log}
		switch p.Component {
		case "apiserver":
			healthy := running && serving(ctx, p.Addr, adminTLS)
			ps.Healthy = &healthy
			out.APIServer = append(out.APIServer, ps)
			apiAddrs = append(apiAddrs, p.Addr)
		case "gateway":
			ps.Endpoint = "https://" + p.Addr
			out.Gateway = append(out.Gateway, ps)
		case "scheduler":
			out.Scheduler = append(out.Scheduler, ps)
		case "controllers":
			out.Controllers = append(out.Controllers, ps)
		case "nodeagent":
			out.NodeAgent = append(out.NodeAgent, ps)
		case "dns":
			out.DNS = append(out.DNS, ps)
		case "proxy":
			out.Proxy = append(out.Proxy, ps)
		}
	}

	conn, err := client.Dial(apiAddrs, grpc.WithTransportCredentials(credentials.NewTLS(adminTLS)))
	if err != nil {
		fail("API service", err)
		return out, nil
	}
	defer conn.Close()
	leases := client.Must[*coordinationv1.Lease](conn)
	for _, x := range []struct {
		lease string
		ps    []ProcessStatus
	}{{"kube-scheduler", out.Scheduler}, {"kube-controller-manager", out.Controllers}} {
		if len(x.ps) == 0 {
			// kplane up without them (--schedulers 0): the Lease, if
			// any, is another scheduler's, not ours to report.
			continue
		}
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		l, err := leases.Get(actx, "kube-system", x.lease)
		cancel()
		if err != nil {
			fail("Lease kube-system/"+x.lease, err)
			continue
		}
		holder := l.GetSpec().GetHolderIdentity()
		for i := range x.ps {
			active := x.ps[i].Running && holder != "" && holder == x.ps[i].Identity
			x.ps[i].Active = &active
		}
	}
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	nodes, _, err := client.Must[*corev1.Node](conn).List(actx, "", client.ListOptions{})
	cancel()
	if err != nil {
		fail("nodes", err)
	}
	for _, n := range nodes {
		ns := NodeStatus{Name: n.GetMetadata().GetName()}
		for _, c := range n.GetStatus().GetConditions() {
			if c.GetType() == "Ready" {
				ns.Ready = c.GetStatus() == "True"
			}
		}
		out.Nodes = append(out.Nodes, ns)
	}
	return out, nil
}

// storeStatus asks one member (etcd's Maintenance.Status) for its ID,
// term and leader.
func storeStatus(ctx context.Context, p ProcessState, running bool, t *tls.Config, fail func(string, error)) StoreStatus {
	s := StoreStatus{Name: p.Name, PID: p.PID, Running: running, Restarts: p.Restarts, ClientURL: p.ClientURL, PeerURL: p.PeerURL, Metrics: p.Metrics, Log: p.Log}
	if !running {
		return s
	}
	ep := strings.TrimPrefix(p.ClientURL, "https://")
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: t.Clone(), DialTimeout: 3 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		fail("store member "+p.Name, err)
		return s
	}
	defer cli.Close()
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := cli.Status(actx, ep)
	if err != nil {
		fail("store member "+p.Name, err)
		return s
	}
	s.ID = strconv.FormatUint(resp.Header.GetMemberId(), 16)
	s.RaftTerm = resp.RaftTerm
	s.Leader = resp.Leader != 0 && resp.Leader == resp.Header.GetMemberId()
	return s
}

// serving reports whether the API service at addr answers SERVING on
// gRPC's health service.
func serving(ctx context.Context, addr string, t *tls.Config) bool {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(t.Clone())))
	if err != nil {
		return false
	}
	defer conn.Close()
	actx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(actx, &healthpb.HealthCheckRequest{})
	return err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING
}

func loadClientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New(caFile + ": no certificates")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", certFile, err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}
