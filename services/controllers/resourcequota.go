// This file holds how the controller manager wires the resource quota
// controller: the informers and listers it counts from, the live listers
// it checks counts with, and the deletes that give usage back.

package controllers

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/runtime/schema"

	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	batchv1 "github.com/kplane/kplane/proto/kplane/batch/v1"
	coordv1 "github.com/kplane/kplane/proto/kplane/coordination/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	dynamicv1 "github.com/kplane/kplane/proto/kplane/dynamic/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
	rbacv1 "github.com/kplane/kplane/proto/kplane/rbac/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers/internal/ctrl"
	"github.com/kplane/kplane/services/controllers/resourcequota"
)

// resourceQuotaController builds the resource quota controller with the
// informers it recounts from (pods shared; quotas, services, configmaps and
// secrets its own, the last two only to give usage back when one goes) and
// listers for the other kinds a quota may count.
func (m *Manager) resourceQuotaController(conn grpc.ClientConnInterface, podInf *client.Informer[*corev1.Pod], rsInf *client.Informer[*appsv1.ReplicaSet],
	dInf *client.Informer[*appsv1.Deployment], rcInf *client.Informer[*corev1.ReplicationController], informer func(func(context.Context) error)) func(context.Context) {
	quotas := client.Must[*corev1.ResourceQuota](conn)
	qInf := newInformer(quotas, m.log)
	svcInf := newInformer(client.Must[*corev1.Service](conn), m.log)
	cms, secrets := client.Must[*corev1.ConfigMap](conn), client.Must[*corev1.Secret](conn)
	cmInf, secInf := newInformer(cms, m.log), newInformer(secrets, m.log)
	for _, run := range []func(context.Context) error{qInf.Run, svcInf.Run, cmInf.Run, secInf.Run} {
		informer(run)
	}
	gr := func(group, resource string) schema.GroupResource {
		return schema.GroupResource{Group: group, Resource: resource}
	}
	c := resourcequota.New(resourcequota.Config{Quotas: quotas, QuotaInformer: qInf, PodInformer: podInf, ServiceInformer: svcInf,
		Listers: map[schema.GroupResource]resourcequota.Lister{
			gr("", "configmaps"):                            storeLister(cmInf),
			gr("", "secrets"):                               storeLister(secInf),
			gr("", "serviceaccounts"):                       resourcequota.ClientLister(client.Must[*corev1.ServiceAccount](conn)),
			gr("", "endpoints"):                             resourcequota.ClientLister(client.Must[*corev1.Endpoints](conn)),
			gr("", "limitranges"):                           resourcequota.ClientLister(client.Must[*corev1.LimitRange](conn)),
			gr("apps", "deployments"):                       storeLister(dInf),
			gr("apps", "replicasets"):                       storeLister(rsInf),
			gr("apps", "daemonsets"):                        resourcequota.ClientLister(client.Must[*appsv1.DaemonSet](conn)),
			gr("apps", "controllerrevisions"):               resourcequota.ClientLister(client.Must[*appsv1.ControllerRevision](conn)),
			gr("batch", "jobs"):                             resourcequota.ClientLister(client.Must[*batchv1.Job](conn)),
			gr("batch", "cronjobs"):                         resourcequota.ClientLister(client.Must[*batchv1.CronJob](conn)),
			gr("policy", "poddisruptionbudgets"):            resourcequota.ClientLister(client.Must[*policyv1.PodDisruptionBudget](conn)),
			gr("coordination.k8s.io", "leases"):             resourcequota.ClientLister(client.Must[*coordv1.Lease](conn)),
			gr("rbac.authorization.k8s.io", "roles"):        resourcequota.ClientLister(client.Must[*rbacv1.Role](conn)),
			gr("rbac.authorization.k8s.io", "rolebindings"): resourcequota.ClientLister(client.Must[*rbacv1.RoleBinding](conn)),
		},
		ListerCaches: []client.Syncer{cmInf, secInf, dInf, rsInf},
		Live: map[schema.GroupResource]resourcequota.Lister{
			gr("", "pods"):                   resourcequota.ClientLister(client.Must[*corev1.Pod](conn)),
			gr("", "services"):               resourcequota.ClientLister(client.Must[*corev1.Service](conn)),
			gr("", "configmaps"):             resourcequota.ClientLister(cms),
			gr("", "secrets"):                resourcequota.ClientLister(secrets),
			gr("", "replicationcontrollers"): resourcequota.ClientLister(client.Must[*corev1.ReplicationController](conn)),
			gr("apps", "deployments"):        resourcequota.ClientLister(client.Must[*appsv1.Deployment](conn)),
			gr("apps", "replicasets"):        resourcequota.ClientLister(client.Must[*appsv1.ReplicaSet](conn)),
		},
		Custom:       dynamicv1.NewResourceServiceClient(conn),
		ResyncPeriod: m.cfg.ResourceQuotaSyncPeriod, Logger: m.log, TracerProvider: m.cfg.TracerProvider})
	if rcInf != nil {
		c.CountFrom(schema.GroupResource{Resource: "replicationcontrollers"}, storeLister(rcInf))
		c.WaitFor(rcInf)
		replenish(rcInf, c)
	} else {
		c.CountFrom(schema.GroupResource{Resource: "replicationcontrollers"}, resourcequota.ClientLister(client.Must[*corev1.ReplicationController](conn)))
	}
	replenish(cmInf, c)
	replenish(secInf, c)
	replenish(qInf, c)
	replenish(rsInf, c)
	replenish(dInf, c)
	return func(ctx context.Context) { c.Run(ctx, m.cfg.ResourceQuotaWorkers) }
}

// storeLister lists a namespace's objects from an informer's cache.
func storeLister[T proto.Message](inf *client.Informer[T]) resourcequota.Lister {
	return func(_ context.Context, ns string) ([]proto.Message, error) {
		items := inf.Store().ByNamespace(ns)
		out := make([]proto.Message, len(items))
		for i, it := range items {
			out[i] = it
		}
		return out, nil
	}
}

// replenish has the quota controller recount a namespace's quotas when one
// of inf's objects goes.
func replenish[T interface {
	proto.Message
	ctrl.Object
}](inf *client.Informer[T], c *resourcequota.Controller) {
	inf.AddEventHandler(client.Handler[T]{OnDelete: func(o T) { c.NamespaceChanged(o.GetMetadata().GetNamespace()) }})
}
