// This file holds tests of what Kubernetes' own components need from the
// gateway (scripts/components.sh runs them unchanged): client-go in the
// protobuf content type they use for built-in kinds, the storage kinds
// kube-scheduler's informers wait for, and the bookmark that ends a
// watch-list's initial events, which Helm's waiter (client-go's
// WatchListClient) waits for; lists and watches authorized by a
// metadata.name field selector.

package gateway_test

import (
	"context"
	"testing"

	"net/http/httptest"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/kplane/kplane/gateway"
	"github.com/kplane/kplane/services/apiserver/apiservertest"
)

// gatewayClients starts a gateway in front of an in-process API service and
// returns a maker of client-go typed clientsets talking to it with a token
// in a content type.
func gatewayClients(t *testing.T) func(token, contentType string) kubernetes.Interface {
	t.Helper()
	env := apiservertest.Start(t, apiservertest.Options{})
	gw, err := gateway.New(gateway.Config{Conn: env.Dial(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return func(token, ct string) kubernetes.Interface {
		cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, BearerToken: token,
			ContentConfig: rest.ContentConfig{ContentType: ct, AcceptContentTypes: ct}})
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
}

const protobufType = "application/vnd.kubernetes.protobuf"

// clientsets returns client-go's typed clientset in JSON and in protobuf
// (kube-scheduler's and kube-controller-manager's default), both talking
// to one gateway in front of an in-process API service, as admin.
func clientsets(t *testing.T) map[string]kubernetes.Interface {
	t.Helper()
	mk := gatewayClients(t)
	return map[string]kubernetes.Interface{"json": mk(apiservertest.AdminToken, "application/json"),
		"protobuf": mk(apiservertest.AdminToken, protobufType)}
}

// A list or watch whose field selector requires metadata.name=NAME is
// authorized for that name, as kube-apiserver does: kube-scheduler, whose
// role may read only kube-system/extension-apiserver-authentication among
// ConfigMaps (Kubernetes' extension-apiserver-authentication-reader),
// lists and watches it so, and may not list the others.
func TestListWatchAuthorizedByNameSelector(t *testing.T) {
	ctx := context.Background()
	cms := gatewayClients(t)(apiservertest.SchedulerToken, protobufType).CoreV1().ConfigMaps("kube-system")
	one := metav1.ListOptions{FieldSelector: "metadata.name=extension-apiserver-authentication"}
	if _, err := cms.List(ctx, one); err != nil {
		t.Errorf("list by name: %v", err)
	}
	w, err := cms.Watch(ctx, one)
	if err != nil {
		t.Errorf("watch by name: %v", err)
	} else {
		w.Stop()
	}
	if _, err := cms.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list of all: got %v, want Forbidden", err)
	}
	if _, err := cms.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=other"}); !apierrors.IsForbidden(err) {
		t.Errorf("list by another name: got %v, want Forbidden", err)
	}
}

// CSIStorageCapacity is served (kube-scheduler's volume binding waits for
// its informer): create, list and watch in both content types.
func TestCSIStorageCapacityServed(t *testing.T) {
	ctx := context.Background()
	for name, cs := range clientsets(t) {
		t.Run(name, func(t *testing.T) {
			caps := cs.StorageV1().CSIStorageCapacities("default")
			in := &storagev1.CSIStorageCapacity{ObjectMeta: metav1.ObjectMeta{Name: "cap-" + name},
				StorageClassName: "fast", Capacity: ptr.To(resource.MustParse("10Gi")),
				NodeTopology: &metav1.LabelSelector{MatchLabels: map[string]string{"topology.kubernetes.io/zone": "a"}}}
			if _, err := caps.Create(ctx, in, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			l, err := caps.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, c := range l.Items {
				if c.Name == in.Name {
					found = true
					if got, want := c.Capacity.String(), "10Gi"; got != want {
						t.Errorf("capacity: got %s, want %s", got, want)
					}
					if got, want := c.NodeTopology.MatchLabels["topology.kubernetes.io/zone"], "a"; got != want {
						t.Errorf("nodeTopology zone: got %q, want %q", got, want)
					}
				}
			}
			if !found {
				t.Fatalf("list: got %d items without %s", len(l.Items), in.Name)
			}
			w, err := caps.Watch(ctx, metav1.ListOptions{ResourceVersion: l.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			if err := caps.Delete(ctx, in.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			ev := <-w.ResultChan()
			if got, ok := ev.Object.(*storagev1.CSIStorageCapacity); ev.Type != watch.Deleted || !ok || got.Name != in.Name {
				t.Fatalf("watch: got %s %T, want DELETED of %s", ev.Type, ev.Object, in.Name)
			}
		})
	}
}

// A watch with sendInitialEvents=true sends the existing objects, then a
// bookmark annotated k8s.io/initial-events-end, as kube-apiserver does:
// client-go's watch-list (Helm's waiter) waits for that annotation.
func TestWatchListEndsInitialEvents(t *testing.T) {
	ctx := context.Background()
	for name, cs := range clientsets(t) {
		t.Run(name, func(t *testing.T) {
			cms := cs.CoreV1().ConfigMaps("default")
			if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-" + name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			w, err := cms.Watch(ctx, metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
				ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, FieldSelector: "metadata.name=cm-" + name})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			ev := <-w.ResultChan()
			if got, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || got.Name != "cm-"+name {
				t.Fatalf("first event: got %s %T, want ADDED of cm-%s", ev.Type, ev.Object, name)
			}
			ev = <-w.ResultChan()
			bm, ok := ev.Object.(*corev1.ConfigMap)
			if ev.Type != watch.Bookmark || !ok {
				t.Fatalf("second event: got %s %T, want BOOKMARK", ev.Type, ev.Object)
			}
			if got, want := bm.Annotations[metav1.InitialEventsAnnotationKey], "true"; got != want {
				t.Errorf("bookmark annotation %s: got %q, want %q", metav1.InitialEventsAnnotationKey, got, want)
			}
			if bm.ResourceVersion == "" {
				t.Error("bookmark without a resourceVersion")
			}
		})
	}
}
