// Tests of probe actions that reach a port by its name and of gRPC
// probes, against real servers on loopback.

package nodeagent

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
)

// TestProbeNamedPortsAndGRPC: httpGet and tcpSocket probes reach a port
// named in the container's ports (a name that is not there is an error,
// a number written as a string is that number); gRPC probes ask the
// grpc.health.v1 service on the pod's address and pass only on SERVING;
// on the built-in runtime a gRPC probe is an exec naming it.
func TestProbeNamedPortsAndGRPC(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer web.Close()
	host, webPort, _ := net.SplitHostPort(web.Listener.Addr().String())

	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("ok", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("down", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(gl)
	defer gs.Stop()
	grpcPort := int32(gl.Addr().(*net.TCPAddr).Port)
	bare := grpc.NewServer() // no health service
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go bare.Serve(bl)
	defer bare.Stop()
	barePort := int32(bl.Addr().(*net.TCPAddr).Port)

	wp, _ := strconv.Atoi(webPort)
	spec := &corev1.Container{Name: "main", Ports: []*corev1.ContainerPort{{Name: "http", ContainerPort: int32(wp)}}}
	named := func(n string) *metav1.IntOrString {
		return &metav1.IntOrString{Value: &metav1.IntOrString_StrVal{StrVal: n}}
	}
	grpcProbe := func(port int32, service *string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{Grpc: &corev1.GRPCAction{Port: port, Service: service}}}
	}
	str := func(s string) *string { return &s }
	tests := []struct {
		name      string
		probe     *corev1.Probe
		simulated bool
		want      bool
		wantMsg   string
		wantErr   string
		wantExec  string
	}{
		{name: "http to a named port", want: true,
			probe: &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Path: "/", Port: named("http")}}}},
		{name: "tcp to a named port", want: true,
			probe: &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{TcpSocket: &corev1.TCPSocketAction{Port: named("http")}}}},
		{name: "a number as a string", want: true,
			probe: &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{TcpSocket: &corev1.TCPSocketAction{Port: named(webPort)}}}},
		{name: "a name the container lacks", wantErr: "port metrics not found",
			probe: &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Path: "/", Port: named("metrics")}}}},
		{name: "simulated http names the resolved URL", simulated: true, want: true, wantExec: "kplane-probe http-get http://" + net.JoinHostPort(host, webPort) + "/healthz?x=1",
			probe: &corev1.Probe{ProbeHandler: &corev1.ProbeHandler{HttpGet: &corev1.HTTPGetAction{Path: "/healthz?x=1", Port: named("http")}}}},
		{name: "grpc, server as a whole", probe: grpcProbe(grpcPort, nil), want: true},
		{name: "grpc, serving service", probe: grpcProbe(grpcPort, str("ok")), want: true},
		{name: "grpc, service not serving", probe: grpcProbe(grpcPort, str("down")), wantMsg: `service unhealthy (responded with "NOT_SERVING")`},
		{name: "grpc, unknown service", probe: grpcProbe(grpcPort, str("nope")), wantMsg: "error: health rpc probe failed"},
		{name: "grpc, no health service", probe: grpcProbe(barePort, nil), wantMsg: "error: this server does not implement the grpc health protocol"},
		{name: "simulated grpc is an exec", probe: grpcProbe(grpcPort, str("down")), simulated: true, want: true,
			wantExec: "kplane-probe grpc " + net.JoinHostPort(host, strconv.Itoa(int(grpcPort))) + " down"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pr := &execProber{ok: true}
			got, msg, err := runProbe(context.Background(), pr, tt.simulated, spec, "c1", host, tt.probe, 5*time.Second)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error: got %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want || !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("got %v %q, want %v %q", got, msg, tt.want, tt.wantMsg)
			}
			var execs []string
			for _, c := range pr.cmds {
				execs = append(execs, strings.Join(c, " "))
			}
			if want := tt.wantExec; (want == "" && len(execs) != 0) || (want != "" && (len(execs) != 1 || execs[0] != want)) {
				t.Errorf("execs: got %q, want %q", execs, want)
			}
		})
	}
}
