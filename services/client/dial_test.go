// This file holds the test of client.Dial's balancing across replicas by
// their health: both used, NOT_SERVING skipped, a stopped one left.

package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/kplane/kplane/services/client"
)

// TestDialFailover starts two gRPC servers with the health service and
// checks client.Dial's balancing: calls go to both replicas, only to the
// SERVING one when the other turns NOT_SERVING, and to the survivor when
// one stops.
func TestDialFailover(t *testing.T) {
	type replica struct {
		addr   string
		srv    *grpc.Server
		health *health.Server
	}
	var rs []*replica
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{addr: l.Addr().String(), srv: grpc.NewServer(), health: health.NewServer()}
		healthpb.RegisterHealthServer(r.srv, r.health)
		go r.srv.Serve(l)
		t.Cleanup(r.srv.Stop)
		rs = append(rs, r)
	}
	conn, err := client.Dial([]string{rs[0].addr, rs[1].addr}, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	// served returns which replicas answered 20 calls (failed calls count
	// as "").
	served := func() map[string]int {
		got := map[string]int{}
		for range 20 {
			var p peer.Peer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
			cancel()
			if err != nil || p.Addr == nil {
				got[""]++
				continue
			}
			got[p.Addr.String()]++
		}
		return got
	}
	// until polls (bounded) until want holds of served().
	until := func(what string, want func(map[string]int) bool) {
		t.Helper()
		var got map[string]int
		for range 50 {
			if got = served(); want(got) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: calls were served by %v", what, got)
	}
	a, b := rs[0].addr, rs[1].addr
	until("both SERVING: calls balanced over both", func(m map[string]int) bool { return m[a] > 0 && m[b] > 0 && m[""] == 0 })
	rs[0].health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	until("replica 0 NOT_SERVING: every call on replica 1", func(m map[string]int) bool { return m[b] == 20 })
	rs[0].health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	rs[1].srv.Stop()
	until("replica 1 stopped: every call on replica 0", func(m map[string]int) bool { return m[a] == 20 })
}
