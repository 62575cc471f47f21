// This file holds the volume controller's tests against a real API
// service, the real scheduler (its VolumeBinding plugin) and node-agent
// stand-ins: static volumes bound and released, the default class's
// node-local volumes provisioned where the scheduler put a StatefulSet's
// pods, and pods kept off nodes while their claims cannot be met.
package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/internal/testutil"
	appsv1 "github.com/kplane/kplane/proto/kplane/apps/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	storagev1 "github.com/kplane/kplane/proto/kplane/storage/v1"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
	"github.com/kplane/kplane/services/scheduler"
	"github.com/kplane/kplane/services/scheduler/queue"
)

type pvCluster struct {
	*dsCluster
	pvcs    *client.Client[*corev1.PersistentVolumeClaim]
	pvs     *client.Client[*corev1.PersistentVolume]
	classes *client.Client[*storagev1.StorageClass]
	sets    *client.Client[*appsv1.StatefulSet]
}

// startPVCluster runs the API service, the volume, statefulset and garbage
// collector controllers, the scheduler and node agent stand-ins, with one
// node, node-a.
func startPVCluster(t *testing.T) *pvCluster {
	env := apiservertest.Start(t, apiservertest.Options{})
	conn := env.Dial(t, apiservertest.AdminToken)
	ctx, cancel := context.WithCancel(context.Background())
	m, err := controllers.New(controllers.Config{Conn: conn, Logger: testLogger(),
		Controllers: []string{controllers.PersistentVolume, controllers.StatefulSet, controllers.GarbageCollector}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New(scheduler.Config{Conn: env.Dial(t, apiservertest.SchedulerToken),
		Queue: queue.Config{InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 2)
	go func() { _ = m.Run(ctx); done <- struct{}{} }()
	go func() { _ = s.Run(ctx); done <- struct{}{} }()
	boundKubelet(ctx, conn, 0)
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
	})
	c := &pvCluster{
		dsCluster: &dsCluster{ctx: ctx, conn: conn, pods: client.Must[*corev1.Pod](conn), nodes: client.Must[*corev1.Node](conn)},
		pvcs:      client.Must[*corev1.PersistentVolumeClaim](conn), pvs: client.Must[*corev1.PersistentVolume](conn),
		classes: client.Must[*storagev1.StorageClass](conn), sets: client.Must[*appsv1.StatefulSet](conn),
	}
	if _, err := client.Must[*corev1.Namespace](conn).Create(ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: "sts"}}); err != nil {
		t.Fatal(err)
	}
	c.addNode(t, "node-a", map[string]string{"kubernetes.io/hostname": "node-a"})
	return c
}

func claim(name, class, size string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{Metadata: &metav1.ObjectMeta{Name: name, Namespace: "sts"},
		Spec: &corev1.PersistentVolumeClaimSpec{StorageClassName: proto.String(class), AccessModes: []string{"ReadWriteOnce"},
			Resources: &corev1.VolumeResourceRequirements{Requests: map[string]string{"storage": size}}}}
}

func (c *pvCluster) claimPhase(t *testing.T, name string) (*corev1.PersistentVolumeClaim, string) {
	t.Helper()
	p, err := c.pvcs.Get(c.ctx, "sts", name)
	if err != nil {
		return nil, err.Error() // not made yet
	}
	return p, fmt.Sprintf("phase %q volume %q annotations %v", p.GetStatus().GetPhase(), p.GetSpec().GetVolumeName(), p.GetMetadata().GetAnnotations())
}

func TestStaticVolumeBindingAndRelease(t *testing.T) {
	c := startPVCluster(t)
	for _, pv := range []struct {
		name, size string
	}{{"pv-small", "1Gi"}, {"pv-big", "10Gi"}, {"pv-right", "2Gi"}} {
		if _, err := c.pvs.Create(c.ctx, &corev1.PersistentVolume{Metadata: &metav1.ObjectMeta{Name: pv.name},
			Spec: &corev1.PersistentVolumeSpec{Capacity: map[string]string{"storage": pv.size}, AccessModes: []string{"ReadWriteOnce"},
				StorageClassName:       "manual",
				PersistentVolumeSource: &corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + pv.name}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.pvcs.Create(c.ctx, claim("data", "manual", "1500Mi")); err != nil {
		t.Fatal(err)
	}
	// The smallest volume big enough.
	testutil.EventuallyWithin(t, waitLimit, "claim bound", func() (bool, string) {
		p, s := c.claimPhase(t, "data")
		return p.GetStatus().GetPhase() == "Bound" && p.GetSpec().GetVolumeName() == "pv-right" && p.GetStatus().GetCapacity()["storage"] == "2Gi", s
	})
	pv, err := c.pvs.Get(c.ctx, "", "pv-right")
	if err != nil {
		t.Fatal(err)
	}
	if pv.GetStatus().GetPhase() != "Bound" || pv.GetSpec().GetClaimRef().GetName() != "data" || pv.GetMetadata().GetFinalizers()[0] != "kubernetes.io/pv-protection" {
		t.Errorf("volume phase %q, claimRef %v, finalizers %v", pv.GetStatus().GetPhase(), pv.GetSpec().GetClaimRef(), pv.GetMetadata().GetFinalizers())
	}
	// Retain (a static volume's default): released, kept.
	if err := c.pvcs.Delete(c.ctx, "sts", "data", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "volume released", func() (bool, string) {
		pv, err := c.pvs.Get(c.ctx, "", "pv-right")
		if err != nil {
			t.Fatal(err)
		}
		return pv.GetStatus().GetPhase() == "Released", pv.GetStatus().GetPhase()
	})

	// A claim of a class that binds immediately, without a volume or a
	// provisioner, keeps its pod off every node.
	if _, err := c.classes.Create(c.ctx, &storagev1.StorageClass{Metadata: &metav1.ObjectMeta{Name: "slow"}, Provisioner: "example.com/none"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pvcs.Create(c.ctx, claim("unmet", "slow", "1Gi")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pods.Create(c.ctx, &corev1.Pod{Metadata: &metav1.ObjectMeta{Name: "user", Namespace: "sts"}, Spec: &corev1.PodSpec{
		Containers: []*corev1.Container{{Name: "c", Image: "busybox"}},
		Volumes: []*corev1.Volume{{Name: "d", VolumeSource: &corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "unmet"}}}}}}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "pod unschedulable", func() (bool, string) {
		p, err := c.pods.Get(c.ctx, "sts", "user")
		if err != nil {
			t.Fatal(err)
		}
		for _, cond := range p.GetStatus().GetConditions() {
			if cond.GetType() == "PodScheduled" && cond.GetStatus() == "False" && strings.Contains(cond.GetMessage(), "pod has unbound immediate PersistentVolumeClaims") {
				return p.GetSpec().GetNodeName() == "", ""
			}
		}
		return false, fmt.Sprint(p.GetStatus().GetConditions())
	})
	// A volume for it: the claim is bound and the pod, moved by the
	// claim's change, scheduled.
	if _, err := c.pvs.Create(c.ctx, &corev1.PersistentVolume{Metadata: &metav1.ObjectMeta{Name: "pv-slow"},
		Spec: &corev1.PersistentVolumeSpec{Capacity: map[string]string{"storage": "1Gi"}, AccessModes: []string{"ReadWriteOnce"},
			StorageClassName:       "slow",
			PersistentVolumeSource: &corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/pv-slow"}}}}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "pod scheduled once its claim is bound", func() (bool, string) {
		p, err := c.pods.Get(c.ctx, "sts", "user")
		if err != nil {
			t.Fatal(err)
		}
		return p.GetSpec().GetNodeName() == "node-a", fmt.Sprint(p.GetStatus().GetConditions())
	})
}

func TestStatefulSetClaimsProvisionedOnTheirNode(t *testing.T) {
	c := startPVCluster(t)
	// The default class, created by the controller, is put on claims
	// without one.
	testutil.EventuallyWithin(t, waitLimit, "default class", func() (bool, string) {
		sc, err := c.classes.Get(c.ctx, "", "standard")
		if err != nil {
			return false, err.Error()
		}
		return sc.GetMetadata().GetAnnotations()["storageclass.kubernetes.io/is-default-class"] == "true" && sc.GetVolumeBindingMode() == "WaitForFirstConsumer", ""
	})
	set := newStatefulSet("web", 2, "Parallel", &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{WhenDeleted: "Delete"})
	if _, err := c.sets.Create(c.ctx, set); err != nil {
		t.Fatal(err)
	}
	var volume string
	testutil.EventuallyWithin(t, waitLimit, "claims bound to provisioned volumes", func() (bool, string) {
		p, s := c.claimPhase(t, "data-web-1")
		volume = p.GetSpec().GetVolumeName()
		return p.GetStatus().GetPhase() == "Bound" && p.GetSpec().GetStorageClassName() == "standard" &&
			p.GetMetadata().GetAnnotations()["volume.kubernetes.io/selected-node"] == "node-a", s
	})
	pv, err := c.pvs.Get(c.ctx, "", volume)
	if err != nil {
		t.Fatal(err)
	}
	terms := pv.GetSpec().GetNodeAffinity().GetRequired().GetNodeSelectorTerms()
	if len(terms) != 1 || terms[0].GetMatchExpressions()[0].GetValues()[0] != "node-a" || pv.GetSpec().GetPersistentVolumeSource().GetHostPath() == nil ||
		pv.GetSpec().GetPersistentVolumeReclaimPolicy() != "Delete" || pv.GetMetadata().GetAnnotations()["pv.kubernetes.io/provisioned-by"] != "kplane.io/node-local" {
		t.Errorf("provisioned volume %v", pv)
	}
	testutil.EventuallyWithin(t, waitLimit, "pods running", func() (bool, string) {
		s, err := c.sets.Get(c.ctx, "sts", "web")
		if err != nil {
			t.Fatal(err)
		}
		return s.GetStatus().GetReadyReplicas() == 2, fmt.Sprint(s.GetStatus())
	})
	// Deleting the set takes its claims (whenDeleted Delete), once the
	// pods are gone; their volumes are deleted (the class's policy).
	if err := c.sets.Delete(c.ctx, "sts", "web", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "volumes deleted", func() (bool, string) {
		pvs, _, err := c.pvs.List(c.ctx, "", client.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, pv := range pvs {
			names = append(names, pv.GetMetadata().GetName()+":"+pv.GetStatus().GetPhase())
		}
		return len(pvs) == 0, fmt.Sprint(names)
	})
}
