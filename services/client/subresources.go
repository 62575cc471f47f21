// This file holds the typed client's subresource calls: pod binding and
// eviction, scale, and finalize.

package client

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kplane/kplane/proto/apierrors"
	autoscalingv1 "github.com/kplane/kplane/proto/kplane/autoscaling/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	metav1 "github.com/kplane/kplane/proto/kplane/meta/v1"
	policyv1 "github.com/kplane/kplane/proto/kplane/policy/v1"
)

// method finds a method of the resource's service by name, or returns
// MethodNotAllowed for a resource that lacks that subresource.
func (c *Client[T]) method(name, sub string) (protoreflect.MethodDescriptor, error) {
	m := c.service.Methods().ByName(protoreflect.Name(name))
	if m == nil {
		return nil, apierrors.NewMethodNotSupported("", fmt.Sprintf("%s/%s", c.kind.Name(), sub), name)
	}
	return m, nil
}

// Bind binds the pod namespace/name to node through the pods/binding
// subresource — the only way to set spec.nodeName. It is Conflict if the
// pod is already bound. Only for Client[*corev1.Pod].
func (c *Client[T]) Bind(ctx context.Context, namespace, name, node string) error {
	m, err := c.method("Bind"+string(c.kind.Name()), "binding")
	if err != nil {
		return err
	}
	req, err := newMessage(m.Input())
	if err != nil {
		return err
	}
	setString(req, "namespace", namespace)
	setString(req, "name", name)
	b := &corev1.Binding{
		Metadata: &metav1.ObjectMeta{Namespace: namespace, Name: name},
		Target:   &corev1.ObjectReference{Kind: "Node", Name: node},
	}
	fd := req.Descriptor().Fields().ByName("binding")
	if fd == nil {
		return fmt.Errorf("client: %s has no binding field", req.Descriptor().FullName())
	}
	req.Set(fd, protoreflect.ValueOfMessage(b.ProtoReflect()))
	_, err = c.invoke(ctx, m, req)
	return err
}

// Evict evicts the pod namespace/name through the pods/eviction
// subresource, deleted with opts (nil: the pod's own grace period) unless a
// PodDisruptionBudget forbids it (TooManyRequests). Only for
// Client[*corev1.Pod].
func (c *Client[T]) Evict(ctx context.Context, namespace, name string, opts *metav1.DeleteOptions) error {
	m, err := c.method("Evict"+string(c.kind.Name()), "eviction")
	if err != nil {
		return err
	}
	req, err := newMessage(m.Input())
	if err != nil {
		return err
	}
	setString(req, "namespace", namespace)
	setString(req, "name", name)
	ev := &policyv1.Eviction{ApiVersion: "policy/v1", Kind: "Eviction",
		Metadata: &metav1.ObjectMeta{Namespace: namespace, Name: name}, DeleteOptions: opts}
	fd := req.Descriptor().Fields().ByName("eviction")
	if fd == nil {
		return fmt.Errorf("client: %s has no eviction field", req.Descriptor().FullName())
	}
	req.Set(fd, protoreflect.ValueOfMessage(ev.ProtoReflect()))
	_, err = c.invoke(ctx, m, req)
	return err
}

// GetScale reads the scale subresource (deployments, replicasets).
func (c *Client[T]) GetScale(ctx context.Context, namespace, name string) (*autoscalingv1.Scale, error) {
	m, err := c.method("Get"+string(c.kind.Name())+"Scale", "scale")
	if err != nil {
		return nil, err
	}
	req, err := newMessage(m.Input())
	if err != nil {
		return nil, err
	}
	setString(req, "namespace", namespace)
	setString(req, "name", name)
	resp, err := c.invoke(ctx, m, req)
	if err != nil {
		return nil, err
	}
	return scaleOf(resp)
}

// UpdateScale writes the scale subresource; scale's resourceVersion must be
// current (Conflict otherwise).
func (c *Client[T]) UpdateScale(ctx context.Context, namespace, name string, scale *autoscalingv1.Scale) (*autoscalingv1.Scale, error) {
	m, err := c.method("Update"+string(c.kind.Name())+"Scale", "scale")
	if err != nil {
		return nil, err
	}
	req, err := newMessage(m.Input())
	if err != nil {
		return nil, err
	}
	setString(req, "namespace", namespace)
	setString(req, "name", name)
	fd := req.Descriptor().Fields().ByName("scale")
	if fd == nil {
		return nil, fmt.Errorf("client: %s has no scale field", req.Descriptor().FullName())
	}
	req.Set(fd, protoreflect.ValueOfMessage(scale.ProtoReflect()))
	resp, err := c.invoke(ctx, m, req)
	if err != nil {
		return nil, err
	}
	return scaleOf(resp)
}

func scaleOf(resp protoreflect.Message) (*autoscalingv1.Scale, error) {
	fd := resp.Descriptor().Fields().ByName("scale")
	if fd == nil || !resp.Has(fd) {
		return nil, fmt.Errorf("client: %s carries no Scale", resp.Descriptor().FullName())
	}
	s, ok := resp.Get(fd).Message().Interface().(*autoscalingv1.Scale)
	if !ok {
		return nil, fmt.Errorf("client: %s.scale is not an autoscaling/v1 Scale", resp.Descriptor().FullName())
	}
	return s, nil
}

// Finalize writes obj's spec.finalizers through the finalize subresource
// (namespaces/finalize): a namespace being deleted goes once none are left.
// It returns the stored object (its last state if it went). Only for
// Client[*corev1.Namespace].
func (c *Client[T]) Finalize(ctx context.Context, obj T) (T, error) {
	var zero T
	m, err := c.method("Finalize"+string(c.kind.Name()), "finalize")
	if err != nil {
		return zero, err
	}
	return c.write(ctx, m, obj, false)
}
