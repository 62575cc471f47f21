// This file holds the lease server the package's unit tests run against: an
// in-memory LeaseService over real gRPC on loopback, with revisions,
// compaction and broken watches on demand.

package client

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// leaseServer is a small in-memory LeaseService served over real gRPC on
// loopback, standing in for the API service in this package's unit tests:
// revisions as resourceVersions, compare-and-swap updates, watches from a
// revision with 410 below a compaction point, and a switch to break every
// open watch stream.
type leaseServer struct {
	coordv1.UnimplementedLeaseServiceServer

	mu        sync.Mutex
	rev       int64
	objs      map[string]*coordv1.Lease
	log       []*coordv1.WatchLeasesResponse // every event, in order
	compacted int64                          // watches from below this get 410
	changed   chan struct{}                  // closed and replaced on every change
	breakCh   chan struct{}                  // closed and replaced to break watches
	watchRVs  []string                       // resourceVersions watches were opened from
	lists     int
}

func startLeaseServer(t *testing.T) (*leaseServer, *grpc.ClientConn) {
	t.Helper()
	s := &leaseServer{objs: map[string]*coordv1.Lease{}, changed: make(chan struct{}), breakCh: make(chan struct{})}
	gs := grpc.NewServer()
	coordv1.RegisterLeaseServiceServer(gs, s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
	})
	return s, conn
}

func key(ns, name string) string { return ns + "/" + name }

// commit records an event; callers hold s.mu.
func (s *leaseServer) commit(typ string, obj *coordv1.Lease) {
	s.log = append(s.log, &coordv1.WatchLeasesResponse{Type: typ, Object: proto.Clone(obj).(*coordv1.Lease)})
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *leaseServer) GetLease(_ context.Context, r *coordv1.GetLeaseRequest) (*coordv1.GetLeaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objs[key(r.Namespace, r.Name)]
	if !ok {
		return nil, apierrors.NewNotFound("coordination.k8s.io", "leases", r.Name)
	}
	return &coordv1.GetLeaseResponse{Lease: proto.Clone(o).(*coordv1.Lease)}, nil
}

func (s *leaseServer) ListLeases(_ context.Context, r *coordv1.ListLeasesRequest) (*coordv1.ListLeasesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lists++
	list := &coordv1.LeaseList{Metadata: &metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rev, 10)}}
	for _, o := range s.objs {
		if r.Namespace == "" || o.Metadata.Namespace == r.Namespace {
			list.Items = append(list.Items, proto.Clone(o).(*coordv1.Lease))
		}
	}
	return &coordv1.ListLeasesResponse{List: list}, nil
}

func (s *leaseServer) CreateLease(_ context.Context, r *coordv1.CreateLeaseRequest) (*coordv1.CreateLeaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := proto.Clone(r.Lease).(*coordv1.Lease)
	k := key(o.Metadata.Namespace, o.Metadata.Name)
	if _, ok := s.objs[k]; ok {
		return nil, apierrors.NewAlreadyExists("coordination.k8s.io", "leases", o.Metadata.Name)
	}
	s.rev++
	o.Metadata.ResourceVersion = strconv.FormatInt(s.rev, 10)
	s.objs[k] = o
	s.commit("ADDED", o)
	return &coordv1.CreateLeaseResponse{Lease: proto.Clone(o).(*coordv1.Lease)}, nil
}

func (s *leaseServer) UpdateLease(_ context.Context, r *coordv1.UpdateLeaseRequest) (*coordv1.UpdateLeaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := proto.Clone(r.Lease).(*coordv1.Lease)
	k := key(r.Namespace, r.Name)
	cur, ok := s.objs[k]
	if !ok {
		return nil, apierrors.NewNotFound("coordination.k8s.io", "leases", r.Name)
	}
	if o.Metadata.ResourceVersion != cur.Metadata.ResourceVersion {
		return nil, apierrors.NewConflict("coordination.k8s.io", "leases", r.Name, apierrors.ConflictModified)
	}
	s.rev++
	o.Metadata.ResourceVersion = strconv.FormatInt(s.rev, 10)
	s.objs[k] = o
	s.commit("MODIFIED", o)
	return &coordv1.UpdateLeaseResponse{Lease: proto.Clone(o).(*coordv1.Lease)}, nil
}

func (s *leaseServer) DeleteLease(_ context.Context, r *coordv1.DeleteLeaseRequest) (*coordv1.DeleteLeaseResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key(r.Namespace, r.Name)
	cur, ok := s.objs[k]
	if !ok {
		return nil, apierrors.NewNotFound("coordination.k8s.io", "leases", r.Name)
	}
	s.rev++
	gone := proto.Clone(cur).(*coordv1.Lease)
	gone.Metadata.ResourceVersion = strconv.FormatInt(s.rev, 10)
	delete(s.objs, k)
	s.commit("DELETED", gone)
	return &coordv1.DeleteLeaseResponse{Lease: gone}, nil
}

func (s *leaseServer) WatchLeases(r *coordv1.WatchLeasesRequest, stream grpc.ServerStreamingServer[coordv1.WatchLeasesResponse]) error {
	s.mu.Lock()
	s.watchRVs = append(s.watchRVs, r.ResourceVersion)
	from, _ := strconv.ParseInt(r.ResourceVersion, 10, 64)
	if r.ResourceVersion != "" && from < s.compacted {
		s.mu.Unlock()
		return apierrors.NewResourceExpired("too old resource version: " + r.ResourceVersion)
	}
	brk := s.breakCh
	s.mu.Unlock()
	for {
		s.mu.Lock()
		var pending []*coordv1.WatchLeasesResponse
		for _, ev := range s.log {
			rv, _ := strconv.ParseInt(ev.Object.Metadata.ResourceVersion, 10, 64)
			if rv > from && (r.Namespace == "" || ev.Object.Metadata.Namespace == r.Namespace) {
				pending = append(pending, ev)
			}
		}
		changed := s.changed
		s.mu.Unlock()
		for _, ev := range pending {
			if err := stream.Send(ev); err != nil {
				return err
			}
			from, _ = strconv.ParseInt(ev.Object.Metadata.ResourceVersion, 10, 64)
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-brk:
			return apierrors.NewServiceUnavailable("watch broken by the test")
		case <-changed:
		}
	}
}

// breakWatches ends every open watch stream with an error.
func (s *leaseServer) breakWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.breakCh)
	s.breakCh = make(chan struct{})
}

// compact makes every revision up to now unavailable to watches.
func (s *leaseServer) compact() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.compacted = s.rev + 1
}

func (s *leaseServer) snapshot() (watchRVs []string, lists int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.watchRVs...), s.lists
}
