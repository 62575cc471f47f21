// This file holds Service addressing as kube-apiserver's Service registry
// does it: the normalisation and carry-over of cluster IPs and node ports on
// create and update, their validation with Kubernetes' messages, and the
// claim and release of range members in the same store transaction as the
// Service write, so that no member is ever held by two Services, whichever
// API service replica writes (docs/design.md, "Service addressing").

package apiserver

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// serviceAddressing allocates Services' cluster IPs and node ports.
type serviceAddressing struct {
	cidr      netip.Prefix
	family    string // "IPv4" or "IPv6": the cluster is single-stack
	portRange PortRange
	ips       *memberRange
	ports     *memberRange
}

func newServiceAddressing(prefix string, cidr netip.Prefix, ports PortRange) (*serviceAddressing, error) {
	if !cidr.IsValid() {
		cidr = DefaultServiceClusterIPRange
	}
	if ports.Size == 0 {
		ports = DefaultServiceNodePortRange
	}
	ips, err := newIPRange(prefix, cidr)
	if err != nil {
		return nil, err
	}
	fam := "IPv4"
	if cidr.Addr().Is6() {
		fam = "IPv6"
	}
	return &serviceAddressing{cidr: cidr.Masked(), family: fam, portRange: ports, ips: ips, ports: newPortRange(prefix, ports)}, nil
}

// firstIP is the range's first address, the kubernetes Service's.
func (a *serviceAddressing) firstIP() string { return a.ips.name(0) }

const invalidIPMessage = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"

// claim is one range member a Service write takes.
type claim struct {
	r         *memberRange
	idx       int
	requested bool // the client asked for it; otherwise picked
	port      int  // index in spec.ports (node ports)
}

// servicePlan is what one Service write takes and gives back.
type servicePlan struct {
	claims   []*claim
	releases []string // keys of members the Service no longer holds
}

// heldMembers lists the members of a's ranges that spec holds.
func (a *serviceAddressing) heldMembers(s *corev1.ServiceSpec) (ips []int, ports []int) {
	if s == nil {
		return nil, nil
	}
	if needsClusterIP(s) {
		for _, ip := range s.GetClusterIps() {
			if i, ok := a.ips.index(ip); ok {
				ips = append(ips, i)
			}
		}
	}
	if hasNodePorts(s) {
		for _, p := range s.GetPorts() {
			if i, ok := a.ports.index(fmt.Sprint(p.GetNodePort())); ok && !slices.Contains(ports, i) {
				ports = append(ports, i)
			}
		}
	}
	return ips, ports
}

// plan decides what svc takes and gives back against old (nil on create):
// requested members are checked against the ranges (422 with Kubernetes'
// messages), dynamic ones are picked at random and written into svc.
func (a *serviceAddressing) plan(svc, old *corev1.Service) (*servicePlan, error) {
	s, p := svc.GetSpec(), field.NewPath("spec")
	oldIPs, oldPorts := a.heldMembers(old.GetSpec())
	pl := &servicePlan{}
	var errs field.ErrorList
	if needsClusterIP(s) && !isHeadless(s) {
		if s.GetClusterIp() == "" {
			i, err := a.ips.pick(nil)
			if err != nil {
				return nil, fullError(a.ips)
			}
			pl.claims = append(pl.claims, &claim{r: a.ips, idx: i})
			s.ClusterIp = a.ips.name(i)
			s.ClusterIps = []string{s.ClusterIp}
		} else if old == nil || !slices.Contains(old.GetSpec().GetClusterIps(), s.GetClusterIp()) || !needsClusterIP(old.GetSpec()) {
			i, ok := a.ips.index(s.GetClusterIp())
			if !ok {
				errs = append(errs, field.Invalid(p.Child("clusterIPs"), s.GetClusterIps(),
					fmt.Sprintf("failed to allocate IP %s: the provided network does not match the current range", s.GetClusterIp())))
			} else if !slices.Contains(oldIPs, i) {
				pl.claims = append(pl.claims, &claim{r: a.ips, idx: i, requested: true})
			}
		}
	}
	newIPs, _ := a.heldMembers(s)
	for _, i := range oldIPs {
		if !slices.Contains(newIPs, i) {
			pl.releases = append(pl.releases, a.ips.key(a.ips.name(i)))
		}
	}
	var newPorts []int
	kept := map[int32]bool{} // node ports the stored Service holds already
	if old != nil && hasNodePorts(old.GetSpec()) {
		for _, op := range old.GetSpec().GetPorts() {
			kept[op.GetNodePort()] = true
		}
	}
	if hasNodePorts(s) {
		// Picks avoid the ports this Service asks for or holds.
		inUse := map[int]bool{}
		for _, port := range s.GetPorts() {
			if i, ok := a.ports.index(fmt.Sprint(port.GetNodePort())); ok {
				inUse[i] = true
			}
		}
		first := map[int32]int{}
		for pi, port := range s.GetPorts() {
			np := port.GetNodePort()
			pp := p.Child("ports").Index(pi).Child("nodePort")
			if np == 0 {
				if needsNodePorts(s) {
					i, err := a.ports.pick(inUse)
					if err != nil {
						return nil, fullError(a.ports)
					}
					inUse[i] = true
					pl.claims = append(pl.claims, &claim{r: a.ports, idx: i, port: pi})
					port.NodePort = int32(a.portRange.Base + i)
					newPorts = append(newPorts, i)
				}
				continue
			}
			if _, dup := first[np]; dup {
				errs = append(errs, field.Invalid(pp, np, "provided port is already allocated"))
				continue
			}
			first[np] = pi
			i, ok := a.ports.index(fmt.Sprint(np))
			if !ok {
				if !kept[np] {
					errs = append(errs, field.Invalid(pp, np, fmt.Sprintf("provided port is not in the valid range. The range of valid ports is %s", a.portRange)))
				}
				continue
			}
			newPorts = append(newPorts, i)
			if !slices.Contains(oldPorts, i) {
				pl.claims = append(pl.claims, &claim{r: a.ports, idx: i, requested: true, port: pi})
			}
		}
	}
	for _, i := range oldPorts {
		if !slices.Contains(newPorts, i) {
			pl.releases = append(pl.releases, a.ports.key(a.ports.name(i)))
		}
	}
	if len(errs) > 0 {
		return nil, invalid(&resourceInfo{Kind: "Service"}, svc.GetMetadata().GetName(), errs)
	}
	return pl, nil
}

// releasePlan is what deleting svc gives back.
func (a *serviceAddressing) releasePlan(svc *corev1.Service) *servicePlan {
	ips, ports := a.heldMembers(svc.GetSpec())
	pl := &servicePlan{}
	for _, i := range ips {
		pl.releases = append(pl.releases, a.ips.key(a.ips.name(i)))
	}
	for _, i := range ports {
		pl.releases = append(pl.releases, a.ports.key(a.ports.name(i)))
	}
	return pl
}

// maxAllocationAttempts bounds the transactions one Service write tries
// while other writers take the members it picked.
const maxAllocationAttempts = 32

// commit runs write (a create, update or removal of svc with the extra
// comparisons and operations given) until the plan's claims and releases
// hold: a picked member someone else took is picked again (after two
// losses from the members read as free), a requested one is Kubernetes'
// 422, and a full range its 500.
func (a *serviceAddressing) commit(ctx context.Context, cli *clientv3.Client, svc *corev1.Service, pl *servicePlan, write func(*txnExtra) (int64, error)) (int64, error) {
	owner := allocationOwner{Namespace: svc.GetMetadata().GetNamespace(), Name: svc.GetMetadata().GetName(), UID: svc.GetMetadata().GetUid()}
	taken := map[*memberRange]map[int]bool{}
	for attempt := 0; ; attempt++ {
		x := &txnExtra{}
		for _, c := range pl.claims {
			k := c.r.key(c.r.name(c.idx))
			x.cmps = append(x.cmps, clientv3.Compare(clientv3.CreateRevision(k), "=", 0))
			x.ops = append(x.ops, clientv3.OpPut(k, owner.value()))
			x.reads = append(x.reads, k)
		}
		if len(pl.releases) > 0 {
			// Only members this Service holds are given back.
			ops := make([]clientv3.Op, 0, len(pl.releases))
			for _, k := range pl.releases {
				ops = append(ops, clientv3.OpGet(k))
			}
			resp, err := cli.Txn(ctx).Then(ops...).Commit()
			if err != nil {
				return 0, storeErr(err)
			}
			for _, r := range resp.Responses {
				kvs := r.GetResponseRange().GetKvs()
				if len(kvs) == 0 {
					continue
				}
				if o, ok := parseOwner(kvs[0].Value); ok && o.UID == owner.UID {
					k := string(kvs[0].Key)
					x.cmps = append(x.cmps, clientv3.Compare(clientv3.ModRevision(k), "=", kvs[0].ModRevision))
					x.ops = append(x.ops, clientv3.OpDelete(k))
					x.reads = append(x.reads, k)
				}
			}
		}
		rev, err := write(x)
		ec, ok := err.(*extraConflict)
		if !ok {
			return rev, err
		}
		if attempt >= maxAllocationAttempts {
			return 0, apierrors.NewConflict("", "services", svc.GetMetadata().GetName(), "the service's addresses kept being taken by other writers; try again")
		}
		var errs field.ErrorList
		for _, c := range pl.claims {
			kv := ec.current[c.r.key(c.r.name(c.idx))]
			if kv == nil {
				continue
			}
			if o, ok := parseOwner(kv.Value); ok && o.UID == owner.UID {
				continue // already this Service's (released and retaken is impossible; a repair recorded it)
			}
			if c.requested {
				errs = append(errs, a.takenError(svc, c))
				continue
			}
			if taken[c.r] == nil {
				taken[c.r] = map[int]bool{}
			}
			taken[c.r][c.idx] = true
			if attempt >= 1 {
				// Lost twice: read which members are held and pick from
				// the rest.
				held, err := c.r.readTaken(ctx, cli)
				if err != nil {
					return 0, err
				}
				for i := range held {
					taken[c.r][i] = true
				}
			}
			for _, o := range pl.claims {
				if o != c && o.r == c.r {
					taken[c.r][o.idx] = true
				}
			}
			i, err := c.r.pick(taken[c.r])
			if err != nil {
				return 0, fullError(c.r)
			}
			delete(taken[c.r], c.idx)
			c.idx = i
			a.setClaim(svc, c)
		}
		if len(errs) > 0 {
			return 0, invalid(&resourceInfo{Kind: "Service"}, svc.GetMetadata().GetName(), errs)
		}
		// Claims that turned out to be ours already are dropped.
		pl.claims = slices.DeleteFunc(pl.claims, func(c *claim) bool {
			kv := ec.current[c.r.key(c.r.name(c.idx))]
			if kv == nil {
				return false
			}
			o, ok := parseOwner(kv.Value)
			return ok && o.UID == owner.UID
		})
	}
}

// fullError is kube-apiserver's answer when a range has no free member.
func fullError(r *memberRange) error {
	err := fmt.Errorf("failed to allocate a %s: %w", r.what, errRangeFull)
	se := apierrors.NewInternalError(err)
	se.Causes = []apierrors.Cause{{Message: err.Error()}}
	return se
}

func (a *serviceAddressing) setClaim(svc *corev1.Service, c *claim) {
	s := svc.GetSpec()
	if c.r == a.ips {
		s.ClusterIp = a.ips.name(c.idx)
		s.ClusterIps = []string{s.ClusterIp}
		return
	}
	s.Ports[c.port].NodePort = int32(a.portRange.Base + c.idx)
}

func (a *serviceAddressing) takenError(svc *corev1.Service, c *claim) *field.Error {
	s, p := svc.GetSpec(), field.NewPath("spec")
	if c.r == a.ips {
		return field.Invalid(p.Child("clusterIPs"), s.GetClusterIps(), fmt.Sprintf("failed to allocate IP %s: provided IP is already allocated", s.GetClusterIp()))
	}
	return field.Invalid(p.Child("ports").Index(c.port).Child("nodePort"), s.GetPorts()[c.port].GetNodePort(), "provided port is already allocated")
}

// validateService is the validation stage for a Service: its addresses are
// normalised and carried over (prepareService), then the object and its
// addresses are validated together, and the IP families defaulted.
func (s *Server) validateService(r *resourceInfo, svc *corev1.Service, old proto.Message) error {
	var oldSvc *corev1.Service
	if old != nil {
		oldSvc = old.(*corev1.Service)
	}
	prepareService(svc, oldSvc)
	errs := validateObjectErrs(r, svc, old)
	errs = append(errs, s.svcs.validateServiceAddresses(svc, oldSvc)...)
	if len(errs) > 0 {
		return invalid(r, svc.GetMetadata().GetName(), errs)
	}
	s.svcs.defaultServiceFamilies(svc.Spec)
	return nil
}

// dryRunAddresses gives a Service written with dryRun the addresses a real
// write would pick, and refuses those it asks for that are taken, as
// Kubernetes' dry-run allocator does (nothing is claimed).
func (s *Server) dryRunAddresses(ctx context.Context, obj, old proto.Message) error {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil
	}
	oldSvc, _ := old.(*corev1.Service)
	pl, err := s.svcs.plan(svc, oldSvc)
	if err != nil {
		return err
	}
	var errs field.ErrorList
	for _, c := range pl.claims {
		if !c.requested {
			continue
		}
		resp, err := s.store.cli.Get(ctx, c.r.key(c.r.name(c.idx)))
		if err != nil {
			return storeErr(err)
		}
		if len(resp.Kvs) > 0 {
			if o, _ := parseOwner(resp.Kvs[0].Value); o.UID != svc.GetMetadata().GetUid() {
				errs = append(errs, s.svcs.takenError(svc, c))
			}
		}
	}
	return invalid(&resourceInfo{Kind: "Service"}, svc.GetMetadata().GetName(), errs)
}

// storeCreate writes a new object; a Service claims its addresses, and q
// (if not nil) charges the namespace's quotas, in the same transaction.
func (s *Server) storeCreate(ctx context.Context, r *resourceInfo, obj proto.Message, q *quotaCharge) (int64, error) {
	m := meta(obj)
	write := q.wrap(ctx, func(x *txnExtra) (int64, error) {
		return s.store.createWith(ctx, r, m.GetNamespace(), m.GetName(), obj, x)
	})
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return write(nil)
	}
	pl, err := s.svcs.plan(svc, nil)
	if err != nil {
		return 0, err
	}
	return s.svcs.commit(ctx, s.store.cli, svc, pl, write)
}

// storeUpdate writes n over old (at revision rev); a Service claims and
// gives back addresses, and q (if not nil) charges the namespace's quotas,
// in the same transaction.
func (s *Server) storeUpdate(ctx context.Context, r *resourceInfo, ns, name string, rev int64, n, old proto.Message, q *quotaCharge) (int64, error) {
	write := q.wrap(ctx, func(x *txnExtra) (int64, error) {
		return s.store.updateWith(ctx, r, ns, name, rev, n, x)
	})
	svc, ok := n.(*corev1.Service)
	if !ok {
		return write(nil)
	}
	oldSvc, _ := old.(*corev1.Service)
	pl, err := s.svcs.plan(svc, oldSvc)
	if err != nil {
		return 0, err
	}
	if len(pl.claims) == 0 && len(pl.releases) == 0 {
		return write(nil)
	}
	return s.svcs.commit(ctx, s.store.cli, svc, pl, write)
}

// storeRemove deletes an object (obj is its last state, at revision rev); a
// Service gives back its addresses in the same transaction.
func (s *Server) storeRemove(ctx context.Context, r *resourceInfo, ns, name string, rev int64, obj proto.Message) (int64, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return s.store.remove(ctx, r, ns, name, rev)
	}
	pl := s.svcs.releasePlan(svc)
	if len(pl.releases) == 0 {
		return s.store.remove(ctx, r, ns, name, rev)
	}
	return s.svcs.commit(ctx, s.store.cli, svc, pl, func(x *txnExtra) (int64, error) {
		return s.store.removeWith(ctx, r, ns, name, rev, x)
	})
}
