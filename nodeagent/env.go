// This file holds a container's environment as the kubelet makes it: its
// variables from values, ConfigMaps, Secrets, pod fields and resources, and
// where the ConfigMaps and Secrets are read from.

package nodeagent

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/kplane/kplane/proto/apierrors"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
	"github.com/kplane/kplane/services/client"
)

// envObjects reads the ConfigMaps and Secrets that containers' environments
// and the pods' volumes name: from watches (watchedObjects, the default),
// a TTL cache (ttlObjects) or a get at each read (apiObjects), as
// Config.ConfigMapAndSecretChangeDetectionStrategy says. A missing object
// is NotFound (`configmap "x" not found`, the kubelet's wording).
type envObjects interface {
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
}

// envInputs is what a container's environment is computed from besides
// the pod: its IPs, the node's allocatable (resourceFieldRef of a limit
// that is not set), and where ConfigMaps and Secrets come from.
type envInputs struct {
	podIP, hostIP string
	allocatable   map[string]string
	objects       envObjects
}

// containerEnv is a container's environment, as the kubelet makes it:
// envFrom first (every key of a ConfigMap or Secret, with the prefix;
// keys that are not valid variable names are skipped and returned in
// skipped), then env in order — plain values, and valueFrom a ConfigMap or
// Secret key, a pod field (metadata.name, metadata.namespace, metadata.uid,
// metadata.labels['k'], metadata.annotations['k'], spec.nodeName,
// spec.serviceAccountName, status.podIP, status.hostIP) or a resource
// (limits.cpu, requests.memory, ...). A later definition of a name
// replaces an earlier one. A missing ConfigMap, Secret or key that is not
// optional is an error with the kubelet's message: the container is not
// created (CreateContainerConfigError). $(VAR) references are not expanded.
func containerEnv(ctx context.Context, pod *corev1.Pod, c *corev1.Container, in envInputs) (env []*runtimeapi.KeyValue, skipped []string, err error) {
	ns := pod.GetMetadata().GetNamespace()
	index := map[string]int{}
	set := func(k, v string) {
		if i, ok := index[k]; ok {
			env[i].Value = v
			return
		}
		index[k] = len(env)
		env = append(env, &runtimeapi.KeyValue{Key: k, Value: v})
	}
	for _, from := range c.GetEnvFrom() {
		var data map[string]string
		switch {
		case from.GetConfigMapRef() != nil:
			ref := from.GetConfigMapRef()
			cm, err := in.objects.ConfigMap(ctx, ns, ref.GetName())
			if apierrors.IsNotFound(err) && ref.GetOptional() {
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			data = cm.GetData()
		case from.GetSecretRef() != nil:
			ref := from.GetSecretRef()
			sec, err := in.objects.Secret(ctx, ns, ref.GetName())
			if apierrors.IsNotFound(err) && ref.GetOptional() {
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			data = map[string]string{}
			for k, v := range sec.GetData() {
				data[k] = string(v)
			}
		default:
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(data)) {
			name := from.GetPrefix() + k
			if len(validation.IsEnvVarName(name)) > 0 {
				skipped = append(skipped, name)
				continue
			}
			set(name, data[k])
		}
	}
	// A literal value may refer to the variables before it, $(NAME).
	defined := map[string]string{}
	for _, kv := range env {
		defined[kv.GetKey()] = kv.GetValue()
	}
	for _, e := range c.GetEnv() {
		v, ok, err := envValue(ctx, pod, c, e, in)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		if e.GetValueFrom() == nil {
			v = expandRefs(v, envLookup(defined))
		}
		set(e.GetName(), v)
		defined[e.GetName()] = v
	}
	return env, skipped, nil
}

// envValue is one env entry's value; ok is false when an optional source
// is missing (the variable is left out).
func envValue(ctx context.Context, pod *corev1.Pod, c *corev1.Container, e *corev1.EnvVar, in envInputs) (string, bool, error) {
	src := e.GetValueFrom()
	if src == nil {
		return e.GetValue(), true, nil
	}
	ns := pod.GetMetadata().GetNamespace()
	switch {
	case src.GetConfigMapKeyRef() != nil:
		ref := src.GetConfigMapKeyRef()
		cm, err := in.objects.ConfigMap(ctx, ns, ref.GetName())
		if apierrors.IsNotFound(err) && ref.GetOptional() {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		v, ok := cm.GetData()[ref.GetKey()]
		if !ok {
			if ref.GetOptional() {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.GetKey(), ns, ref.GetName())
		}
		return v, true, nil
	case src.GetSecretKeyRef() != nil:
		ref := src.GetSecretKeyRef()
		sec, err := in.objects.Secret(ctx, ns, ref.GetName())
		if apierrors.IsNotFound(err) && ref.GetOptional() {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		v, ok := sec.GetData()[ref.GetKey()]
		if !ok {
			if ref.GetOptional() {
				return "", false, nil
			}
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.GetKey(), ns, ref.GetName())
		}
		return string(v), true, nil
	case src.GetFieldRef() != nil:
		v, err := podField(pod, src.GetFieldRef().GetFieldPath(), in)
		return v, err == nil, err
	case src.GetResourceFieldRef() != nil:
		v, err := resourceField(pod, c, src.GetResourceFieldRef(), in.allocatable)
		return v, err == nil, err
	}
	return e.GetValue(), true, nil
}

// podField is the value of a fieldRef path.
func podField(pod *corev1.Pod, path string, in envInputs) (string, error) {
	m := pod.GetMetadata()
	switch path {
	case "metadata.name":
		return m.GetName(), nil
	case "metadata.namespace":
		return m.GetNamespace(), nil
	case "metadata.uid":
		return m.GetUid(), nil
	case "spec.nodeName":
		return pod.GetSpec().GetNodeName(), nil
	case "spec.serviceAccountName":
		return pod.GetSpec().GetServiceAccountName(), nil
	case "status.podIP":
		return in.podIP, nil
	case "status.hostIP":
		return in.hostIP, nil
	}
	for prefix, values := range map[string]map[string]string{"metadata.labels": m.GetLabels(), "metadata.annotations": m.GetAnnotations()} {
		if k, ok := strings.CutPrefix(path, prefix+"['"); ok && strings.HasSuffix(k, "']") {
			return values[strings.TrimSuffix(k, "']")], nil
		}
	}
	return "", fmt.Errorf("unsupported fieldPath: %s", path)
}

// resourceField is the value of a resourceFieldRef: a request or limit of
// the named container (default this one) divided by the divisor and
// rounded up, as the kubelet computes it; a limit that is not set is the
// node's allocatable.
func resourceField(pod *corev1.Pod, c *corev1.Container, ref *corev1.ResourceFieldSelector, allocatable map[string]string) (string, error) {
	target := c
	if n := ref.GetContainerName(); n != "" {
		if target = containerSpec(pod.GetSpec(), n); target == nil {
			return "", fmt.Errorf("container %q referenced by resourceFieldRef not found", n)
		}
	}
	kind, res, ok := strings.Cut(ref.GetResource(), ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported container resource: %s", ref.GetResource())
	}
	src := target.GetResources().GetRequests()
	if kind == "limits" {
		src = target.GetResources().GetLimits()
	}
	val := src[res]
	if val == "" && kind == "limits" {
		val = allocatable[res]
	}
	if val == "" {
		val = "0"
	}
	q, err := resource.ParseQuantity(val)
	if err != nil {
		return "", fmt.Errorf("resourceFieldRef %s: %w", ref.GetResource(), err)
	}
	// No divisor, or a zero one (what a client that leaves it unset
	// sends), is 1, as the kubelet takes it.
	div := resource.MustParse("1")
	if d := ref.GetDivisor(); d != "" {
		parsed, err := resource.ParseQuantity(d)
		if err != nil || parsed.Sign() < 0 {
			return "", fmt.Errorf("resourceFieldRef %s: invalid divisor %q", ref.GetResource(), d)
		}
		if !parsed.IsZero() {
			div = parsed
		}
	}
	if res == "cpu" {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(div.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(div.Value()))), 10), nil
}

// apiObjects reads ConfigMaps and Secrets from the API service with the
// node's identity (the Node authorizer lets it read those its pods name).
// A missing one is NotFound with the kubelet's wording (`configmap "x" not
// found`).
type apiObjects struct {
	configMaps *client.Client[*corev1.ConfigMap]
	secrets    *client.Client[*corev1.Secret]
}

var _ envObjects = apiObjects{}

func (o apiObjects) ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	cm, err := o.configMaps.Get(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound("", "configmap", name)
	}
	return cm, err
}

func (o apiObjects) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	s, err := o.secrets.Get(ctx, namespace, name)
	if apierrors.IsNotFound(err) {
		return nil, apierrors.NewNotFound("", "secret", name)
	}
	return s, err
}
