// This file holds the ServiceAccount controller's test on a real
// in-process API service: a new namespace gets its default
// ServiceAccount and its kube-root-ca.crt ConfigMap, a deleted
// ServiceAccount and a changed ConfigMap come back, a Terminating
// namespace gets none.
package controllers_test

import (
	"fmt"
	"testing"

	"github.com/kplane/kplane/internal/testutil"
	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
	"github.com/kplane/kplane/services/controllers"
)

const rootCA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

func TestDefaultServiceAccountInEveryNamespace(t *testing.T) {
	c := startCluster(t, func(cfg *controllers.Config) {
		cfg.Controllers = []string{controllers.ServiceAccount, controllers.Namespace, controllers.RootCACertPublisher}
		cfg.RootCA = []byte(rootCA)
	})
	cms := client.Must[*corev1.ConfigMap](c.conn)
	sas := client.Must[*corev1.ServiceAccount](c.conn)
	has := func(ns string) func() (bool, string) {
		return func() (bool, string) {
			sa, err := sas.Get(c.ctx, ns, "default")
			return err == nil, fmt.Sprintf("%v %v", sa.GetMetadata(), err)
		}
	}
	// The namespaces that were there before the controller started.
	testutil.EventuallyWithin(t, waitLimit, "default ServiceAccount in default", has("default"))

	const ns = "team"
	c.namespace(t, ns)
	testutil.EventuallyWithin(t, waitLimit, "default ServiceAccount in a new namespace", has(ns))
	testutil.EventuallyWithin(t, waitLimit, "kube-root-ca.crt in a new namespace", func() (bool, string) {
		cm, err := cms.Get(c.ctx, ns, "kube-root-ca.crt")
		return err == nil && cm.GetData()["ca.crt"] == rootCA, fmt.Sprintf("%v %v", cm, err)
	})
	// Changed by hand: put back.
	if cm, err := cms.Get(c.ctx, ns, "kube-root-ca.crt"); err != nil {
		t.Fatal(err)
	} else {
		cm.Data = map[string]string{"ca.crt": "mine"}
		if _, err := cms.Update(c.ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyWithin(t, waitLimit, "kube-root-ca.crt put back", func() (bool, string) {
		cm, err := cms.Get(c.ctx, ns, "kube-root-ca.crt")
		return err == nil && cm.GetData()["ca.crt"] == rootCA, fmt.Sprintf("%v %v", cm, err)
	})
	first, err := sas.Get(c.ctx, ns, "default")
	if err != nil {
		t.Fatal(err)
	}
	if err := sas.Delete(c.ctx, ns, "default", client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "default ServiceAccount recreated", func() (bool, string) {
		sa, err := sas.Get(c.ctx, ns, "default")
		return err == nil && sa.GetMetadata().GetUid() != first.GetMetadata().GetUid(), fmt.Sprintf("%v %v", sa.GetMetadata(), err)
	})

	// A deleted namespace is emptied, its ServiceAccount included, and
	// none is created in it again: it goes away.
	if err := c.nss.Delete(c.ctx, "", ns, client.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "namespace gone with its ServiceAccount", func() (bool, string) {
		_, errNS := c.nss.Get(c.ctx, "", ns)
		_, errSA := sas.Get(c.ctx, ns, "default")
		return apierrors.IsNotFound(errNS) && apierrors.IsNotFound(errSA), fmt.Sprintf("namespace: %v, serviceaccount: %v", errNS, errSA)
	})
	// The namespace created again gets a new one.
	if _, err := c.nss.Create(c.ctx, &corev1.Namespace{Metadata: &metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, waitLimit, "default ServiceAccount in the namespace created again", has(ns))
}
