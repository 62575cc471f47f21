// Package clusterdns is kplane's cluster DNS (`kplane dns`): it answers
// the names of the Kubernetes DNS-Based Service Discovery specification
// (version 1.1.0) for one zone (cluster.local by default) from informer
// caches of Services, EndpointSlices and Namespaces, over UDP and TCP, on
// github.com/miekg/dns; names outside the zone go to upstream servers or
// are refused.
//
// It keeps no state of its own beyond the caches: every answer is computed
// from them when the query arrives, so there is nothing to reconcile and no
// work queue (the caches are the level; a change is visible to the next
// query as soon as its watch event is applied).
package clusterdns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	discoveryv1 "github.com/kplane/kplane/proto/kplane/discovery/v1"
	"github.com/kplane/kplane/services/client"
)

// Defaults of a Config.
const (
	DefaultZone = "cluster.local"
	DefaultTTL  = 30 * time.Second
)

// Config configures a Server.
type Config struct {
	// Conn reaches the API service as the DNS identity (list and watch of
	// services, endpointslices and namespaces: ClusterRole system:coredns).
	Conn grpc.ClientConnInterface
	// Addr is where to listen, UDP and TCP on the same port (e.g.
	// 127.0.0.1:53; port 0 picks a free one, the same for both).
	Addr string
	// Zone is the cluster domain (default cluster.local).
	Zone string
	// TTL of every answer from the zone (default 30 s; whole seconds).
	TTL time.Duration
	// FreeBind binds Addr even when no interface has its address yet
	// (IP_FREEBIND): `kplane up` listens on the first node's pod bridge
	// address, which appears with the node's first pod.
	FreeBind bool
	// Upstreams are host:port name servers that names outside the zone are
	// forwarded to, tried in order; none: such queries are REFUSED.
	Upstreams []string
	// Logger; nil discards.
	Logger *slog.Logger
}

// Server is the cluster DNS server. New opens its sockets; Run serves.
type Server struct {
	cfg      Config
	log      *slog.Logger
	zone     string // canonical: "cluster.local."
	ttl      uint32
	udp      net.PacketConn
	tcp      net.Listener
	services *client.Informer[*corev1.Service]
	slices   *client.Informer[*discoveryv1.EndpointSlice]
	nss      *client.Informer[*corev1.Namespace]
	fwd      *forwarder
}

// Index names of the informers' caches.
const (
	indexClusterIP   = "clusterIP" // a Service's cluster IPs
	indexSliceOwner  = "service"   // a slice's namespace/service-name
	indexSliceAddr   = "address"   // a slice's endpoint addresses
	labelServiceName = "kubernetes.io/service-name"
)

// New validates cfg, opens the UDP and TCP sockets and builds the
// informers. The caller must Run it (or Close it) to release the sockets.
func New(cfg Config) (*Server, error) {
	if cfg.Conn == nil {
		return nil, errors.New("clusterdns: Config.Conn is required")
	}
	if cfg.Zone == "" {
		cfg.Zone = DefaultZone
	}
	if _, ok := dns.IsDomainName(cfg.Zone); !ok {
		return nil, fmt.Errorf("clusterdns: zone %q is not a domain name", cfg.Zone)
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("clusterdns: negative TTL %s", cfg.TTL)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log.With("component", "dns"), zone: dns.CanonicalName(cfg.Zone), ttl: uint32(cfg.TTL / time.Second)}
	for _, u := range cfg.Upstreams {
		if _, _, err := net.SplitHostPort(u); err != nil {
			return nil, fmt.Errorf("clusterdns: upstream %q: %w", u, err)
		}
	}
	if len(cfg.Upstreams) > 0 {
		s.fwd = &forwarder{upstreams: cfg.Upstreams}
	}
	svcs, err := client.New[*corev1.Service](cfg.Conn)
	if err != nil {
		return nil, err
	}
	slices, err := client.New[*discoveryv1.EndpointSlice](cfg.Conn)
	if err != nil {
		return nil, err
	}
	nss, err := client.New[*corev1.Namespace](cfg.Conn)
	if err != nil {
		return nil, err
	}
	s.services = client.NewInformer(client.ListWatch(svcs, "", "", "", 500), client.InformerOptions[*corev1.Service]{
		Logger: log, Indexers: map[string]client.IndexFunc[*corev1.Service]{indexClusterIP: serviceIPs}})
	s.slices = client.NewInformer(client.ListWatch(slices, "", "", "", 500), client.InformerOptions[*discoveryv1.EndpointSlice]{
		Logger: log, Indexers: map[string]client.IndexFunc[*discoveryv1.EndpointSlice]{indexSliceOwner: sliceOwner, indexSliceAddr: sliceAddresses}})
	s.nss = client.NewInformer(client.ListWatch(nss, "", "", "", 500), client.InformerOptions[*corev1.Namespace]{Logger: log})
	if err := s.listen(cfg.Addr); err != nil {
		return nil, err
	}
	return s, nil
}

// listen opens UDP and TCP on the same address; with port 0 it takes the
// UDP socket's port for TCP, retrying a few times if that port's TCP side
// is taken.
func (s *Server) listen(addr string) error {
	if addr == "" {
		addr = "127.0.0.1:53"
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("clusterdns: address %q: %w", addr, err)
	}
	var lc net.ListenConfig
	if s.cfg.FreeBind {
		lc.Control = freeBind
	}
	ctx := context.Background()
	const attempts = 10
	for i := range attempts {
		udp, err := lc.ListenPacket(ctx, "udp", addr)
		if err != nil {
			return fmt.Errorf("clusterdns: listen udp: %w", err)
		}
		tcp, err := lc.Listen(ctx, "tcp", udp.LocalAddr().String())
		if err == nil {
			s.udp, s.tcp = udp, tcp
			return nil
		}
		udp.Close()
		if port != "0" || i == attempts-1 {
			return fmt.Errorf("clusterdns: listen tcp: %w", err)
		}
	}
	return nil
}

// freeBind sets IP_FREEBIND on a socket before it binds.
func freeBind(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1)
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("clusterdns: IP_FREEBIND: %w", serr)
	}
	return nil
}

// Addr is the address served (UDP and TCP).
func (s *Server) Addr() string { return s.udp.LocalAddr().String() }

// Close releases the sockets of a Server that is not Run.
func (s *Server) Close() {
	s.udp.Close()
	s.tcp.Close()
}

// Run starts the informers, waits until their caches have synced, then
// answers queries until ctx ends. It closes the sockets when it returns.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, run := range []func(context.Context) error{s.services.Run, s.slices.Run, s.nss.Run} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = run(ctx)
		}()
	}
	if !client.WaitForCacheSync(ctx, s.services, s.slices, s.nss) {
		s.Close()
		return ctx.Err()
	}
	s.log.Info("dns serving", "addr", s.Addr(), "zone", s.zone, "upstreams", s.cfg.Upstreams)
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { s.serve(ctx, w, r) })
	udpSrv := &dns.Server{PacketConn: s.udp, Handler: h}
	tcpSrv := &dns.Server{Listener: s.tcp, Handler: h}
	errc := make(chan error, 2)
	for _, srv := range []*dns.Server{udpSrv, tcpSrv} {
		go func() { errc <- srv.ActivateAndServe() }()
	}
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case err = <-errc:
		err = fmt.Errorf("clusterdns: serve: %w", err)
	}
	shut, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	_ = udpSrv.ShutdownContext(shut)
	_ = tcpSrv.ShutdownContext(shut)
	return err
}

// serve answers one query: from the zone, by forwarding, or REFUSED.
func (s *Server) serve(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	if len(r.Question) != 1 || r.Opcode != dns.OpcodeQuery {
		m.SetRcode(r, dns.RcodeNotImplemented)
		_ = w.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := dns.CanonicalName(q.Name)
	switch {
	case dns.IsSubDomain(s.zone, name):
		s.answerZone(m, r, name, q.Qtype)
	case isReverse(name):
		if !s.answerReverse(m, r, name, q.Qtype) {
			s.forward(ctx, w, r, m)
			return
		}
	default:
		s.forward(ctx, w, r, m)
		return
	}
	m.Compress = true
	if opt := r.IsEdns0(); opt != nil {
		m.SetEdns0(opt.UDPSize(), false)
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := uint16(dns.MinMsgSize)
		if opt := r.IsEdns0(); opt != nil {
			size = max(opt.UDPSize(), size)
		}
		m.Truncate(int(size))
	}
	if err := w.WriteMsg(m); err != nil {
		s.log.Debug("dns write", "err", err)
	}
}

// forward sends r to the upstreams and relays the answer, or REFUSES when
// there are none (or SERVFAIL when none answered).
func (s *Server) forward(ctx context.Context, w dns.ResponseWriter, r, m *dns.Msg) {
	if s.fwd == nil {
		m.SetRcode(r, dns.RcodeRefused)
		_ = w.WriteMsg(m)
		return
	}
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	resp, err := s.fwd.exchange(ctx, r, tcp)
	if err != nil {
		s.log.Debug("dns forward", "name", r.Question[0].Name, "err", err)
		m.SetRcode(r, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
		return
	}
	resp.Id = r.Id
	_ = w.WriteMsg(resp)
}

// serviceIPs indexes a Service by its cluster IPs (not "None").
func serviceIPs(svc *corev1.Service) []string {
	var out []string
	ips := svc.GetSpec().GetClusterIps()
	if len(ips) == 0 && svc.GetSpec().GetClusterIp() != "" {
		ips = []string{svc.GetSpec().GetClusterIp()}
	}
	for _, ip := range ips {
		if p := net.ParseIP(ip); p != nil {
			out = append(out, p.String())
		}
	}
	return out
}

// sliceOwner indexes a slice by namespace/<its kubernetes.io/service-name>.
func sliceOwner(s *discoveryv1.EndpointSlice) []string {
	svc := s.GetMetadata().GetLabels()[labelServiceName]
	if svc == "" {
		return nil
	}
	return []string{client.KeyOf(s.GetMetadata().GetNamespace(), svc)}
}

// sliceAddresses indexes a slice by its endpoints' addresses.
func sliceAddresses(s *discoveryv1.EndpointSlice) []string {
	var out []string
	for _, e := range s.GetEndpoints() {
		for _, a := range e.GetAddresses() {
			if p := net.ParseIP(a); p != nil {
				out = append(out, p.String())
			}
		}
	}
	return out
}

// isReverse reports whether name is in in-addr.arpa or ip6.arpa.
func isReverse(name string) bool {
	return strings.HasSuffix(name, ".in-addr.arpa.") || strings.HasSuffix(name, ".ip6.arpa.")
}
