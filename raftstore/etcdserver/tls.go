// This file holds how a member writes its peers' URLs: https when the Raft
// transport runs over TLS.

package etcdserver

// peerURL returns the peer URL of a Raft address (host:port): https when
// the transport runs over TLS, as etcd reports its members.
func (s *Server) peerURL(addr string) string {
	if s.cfg.PeerTLS {
		return "https://" + addr
	}
	return "http://" + addr
}
