// Package rootcacertpublisher is the root CA certificate publisher, as
// Kubernetes' root-ca-cert-publisher controller is: every namespace has a
// ConfigMap "kube-root-ca.crt" whose ca.crt is the CA bundle that verifies
// the API, with Kubernetes' description annotation; it is created when the
// namespace appears, recreated when deleted and put back when changed.
package rootcacertpublisher

import (
	"context"
	"fmt"
	"log/slog"
	"maps"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	"github.com/kplane/kplane/services/client"
)

// Kubernetes' name of the ConfigMap, its key and its description.
const (
	ConfigMapName         = "kube-root-ca.crt"
	Key                   = "ca.crt"
	DescriptionAnnotation = "kubernetes.io/description"
	Description           = "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. " +
		"No other usage is guaranteed across distributions of Kubernetes clusters."
)

// FieldSelector selects the ConfigMaps this controller watches.
const FieldSelector = "metadata.name=" + ConfigMapName

// ConfigMapClient writes ConfigMaps (*client.Client[*corev1.ConfigMap]).
type ConfigMapClient interface {
	Create(ctx context.Context, obj *corev1.ConfigMap) (*corev1.ConfigMap, error)
	Update(ctx context.Context, obj *corev1.ConfigMap) (*corev1.ConfigMap, error)
}

// Config wires a Controller; New adds handlers to the informers.
type Config struct {
	ConfigMaps        ConfigMapClient
	NamespaceInformer *client.Informer[*corev1.Namespace]
	// ConfigMapInformer holds the kube-root-ca.crt ConfigMaps (FieldSelector).
	ConfigMapInformer *client.Informer[*corev1.ConfigMap]
	// RootCA is the PEM bundle published.
	RootCA []byte
	Logger *slog.Logger
	// TracerProvider records a span per reconcile (client.Trace); nil
	// uses the global one.
	TracerProvider trace.TracerProvider
}

// Controller is the publisher. Its queue holds namespace names.
type Controller struct {
	cfg   Config
	log   *slog.Logger
	queue client.Queue
}

// New returns a controller and registers its handlers: a namespace added
// or updated while Active, and its ConfigMap changed or deleted, bring
// the namespace to the queue.
func New(cfg Config) *Controller {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Controller{cfg: cfg, log: log.With("controller", "root-ca-cert-publisher"), queue: client.NewQueue("root_ca_cert_publisher", 0, 0)}
	cfg.NamespaceInformer.AddEventHandler(client.Handler[*corev1.Namespace]{
		OnAdd: func(n *corev1.Namespace) { c.queue.Add(n.GetMetadata().GetName()) },
		OnUpdate: func(_, n *corev1.Namespace) {
			if active(n) {
				c.queue.Add(n.GetMetadata().GetName())
			}
		},
	})
	enqueue := func(cm *corev1.ConfigMap) {
		if cm.GetMetadata().GetName() == ConfigMapName {
			c.queue.Add(cm.GetMetadata().GetNamespace())
		}
	}
	cfg.ConfigMapInformer.AddEventHandler(client.Handler[*corev1.ConfigMap]{
		OnUpdate: func(_, cm *corev1.ConfigMap) { enqueue(cm) },
		OnDelete: enqueue,
	})
	return c
}

// Run waits for the caches, then reconciles until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) {
	defer c.queue.ShutDown() // also when the caches never sync: the queue's goroutines end with it
	if !client.WaitForCacheSync(ctx, c.cfg.NamespaceInformer, c.cfg.ConfigMapInformer) {
		return
	}
	t := client.Trace{TracerProvider: c.cfg.TracerProvider, Span: "rootcacertpublisher.reconcile",
		Annotations: client.StoreAnnotations(c.cfg.NamespaceInformer.Store())}
	client.RunWorkers(ctx, c.queue, workers, t.Reconciler(c.Reconcile), c.log)
}

// Reconcile makes the namespace ns's kube-root-ca.crt hold the root CA and
// the description.
func (c *Controller) Reconcile(ctx context.Context, ns string) (client.Result, error) {
	n, ok := c.cfg.NamespaceInformer.Store().Get(ns)
	if !ok || !active(n) {
		return client.Result{}, nil
	}
	data := map[string]string{Key: string(c.cfg.RootCA)}
	cur, ok := c.cfg.ConfigMapInformer.Store().GetByName(ns, ConfigMapName)
	if !ok {
		cm := &corev1.ConfigMap{ApiVersion: "v1", Kind: "ConfigMap",
			Metadata: &metav1.ObjectMeta{Namespace: ns, Name: ConfigMapName, Annotations: map[string]string{DescriptionAnnotation: Description}},
			Data:     data}
		_, err := c.cfg.ConfigMaps.Create(ctx, cm)
		switch {
		case err == nil, apierrors.IsAlreadyExists(err):
			return client.Result{}, nil
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
			// The namespace went away or started terminating since the
			// cache saw it; its deletion or update comes through the
			// informer.
			if cur, ok := c.cfg.NamespaceInformer.Store().Get(ns); !ok || !active(cur) {
				return client.Result{}, nil
			}
		}
		return client.Result{}, fmt.Errorf("configmap %s/%s: create: %w", ns, ConfigMapName, err)
	}
	if maps.Equal(cur.GetData(), data) && cur.GetMetadata().GetAnnotations()[DescriptionAnnotation] != "" {
		return client.Result{}, nil
	}
	u := proto.Clone(cur).(*corev1.ConfigMap)
	u.Data = data
	if u.Metadata.Annotations == nil {
		u.Metadata.Annotations = map[string]string{}
	}
	u.Metadata.Annotations[DescriptionAnnotation] = Description
	if _, err := c.cfg.ConfigMaps.Update(ctx, u); err != nil && !apierrors.IsNotFound(err) {
		return client.Result{}, fmt.Errorf("configmap %s/%s: update: %w", ns, ConfigMapName, err)
	}
	return client.Result{}, nil
}

// active reports whether n takes new content: phase Active and not being
// deleted.
func active(n *corev1.Namespace) bool {
	return n.GetMetadata().GetDeletionTimestamp() == nil && n.GetStatus().GetPhase() == "Active"
}
