// This file holds Dial: one connection to every replica of the API service,
// with gRPC's own failover.

package client

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	_ "google.golang.org/grpc/health" // client-side health checking
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// serviceConfig balances calls over every replica that is up and reports
// SERVING on gRPC's health service (the API service turns NOT_SERVING while
// it starts and stops); a replica that dies or stops answering leaves the
// rotation, and comes back when it reconnects and is healthy again.
const serviceConfig = `{
  "loadBalancingConfig": [{"round_robin": {}}],
  "healthCheckConfig": {"serviceName": ""}
}`

// SplitServers splits a comma-separated list of API service addresses
// (host:port), as the components' --server flag takes them.
func SplitServers(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Dial returns one client connection to the API service replicas at addrs
// (host:port each). gRPC does the failover: a manual resolver gives the
// round_robin balancer every address, client-side health checking takes
// replicas that are not SERVING out of rotation, and keepalive pings find a
// replica that stopped answering. Calls made while a replica goes away may
// fail with Unavailable; the next ones go to the others. opts add the
// transport credentials and anything else; each address's host is the TLS
// server name its certificate is checked against.
//
// Responses of any size are accepted: grpc-go's default 4 MiB receive limit
// would fail an unpaginated list (client-go's informers, `kubectl get
// --chunk-size=0` through the gateway) once the objects add up to more,
// where kube-apiserver answers it. The limit left is gRPC's own 2 GiB, the
// API service's send limit too.
func Dial(addrs []string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	if len(addrs) == 0 {
		return nil, errors.New("client: no API service address")
	}
	state := resolver.State{}
	for _, a := range addrs {
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("client: API service address %q: %w", a, err)
		}
		state.Addresses = append(state.Addresses, resolver.Address{Addr: a, ServerName: host})
	}
	r := manual.NewBuilderWithScheme("kplane-apiservers")
	r.InitialState(state)
	opts = append([]grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(serviceConfig),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(math.MaxInt32)),
	}, opts...)
	conn, err := grpc.NewClient(r.Scheme()+":///apiserver", opts...)
	if err != nil {
		return nil, fmt.Errorf("client: connect to the API service at %s: %w", strings.Join(addrs, ","), err)
	}
	return conn, nil
}
