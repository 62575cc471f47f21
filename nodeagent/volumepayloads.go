// This file holds the contents of the volumes the agent writes: the
// files of configMap, secret, downwardAPI and projected volumes (with
// their items and modes), and the bound ServiceAccount tokens projected
// volumes carry, renewed before they expire.

package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/kplane/kplane/proto/apierrors"
	authenticationv1 "github.com/kplane/kplane/proto/kplane/authentication/v1"
	corev1 "github.com/kplane/kplane/proto/kplane/core/v1"
)

// tokenSource issues ServiceAccount tokens bound to a pod (TokenRequest).
type tokenSource interface {
	PodToken(ctx context.Context, pod *corev1.Pod, audience string, expirationSeconds int64) (token string, expires time.Time, err error)
}

// apiTokens asks the API service for tokens.
type apiTokens struct {
	client authenticationv1.AuthenticationServiceClient
}

// PodToken requests a token of the pod's ServiceAccount bound to the pod,
// as the kubelet's token manager does.
func (t apiTokens) PodToken(ctx context.Context, pod *corev1.Pod, audience string, exp int64) (string, time.Time, error) {
	m := pod.GetMetadata()
	var auds []string
	if audience != "" {
		auds = []string{audience}
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	resp, err := t.client.CreateServiceAccountToken(ctx, &authenticationv1.CreateServiceAccountTokenRequest{
		Namespace: m.GetNamespace(), Name: pod.GetSpec().GetServiceAccountName(),
		TokenRequest: &authenticationv1.TokenRequest{Spec: &authenticationv1.TokenRequestSpec{
			Audiences: auds, ExpirationSeconds: &exp,
			BoundObjectRef: &authenticationv1.BoundObjectReference{ApiVersion: "v1", Kind: "Pod", Name: m.GetName(), Uid: m.GetUid()},
		}},
	})
	if err != nil {
		return "", time.Time{}, apierrors.FromError(err)
	}
	st := resp.GetTokenRequest().GetStatus()
	return st.GetToken(), st.GetExpirationTimestamp().AsTime(), nil
}

// cachedToken is a token the agent holds for a pod's projected volume.
type cachedToken struct {
	token           string
	issued, expires time.Time
}

// due reports whether the token must be renewed: past 80 % of its
// lifetime, or older than 24 hours, as the kubelet's token manager does.
func (c cachedToken) due(now time.Time) bool {
	if c.token == "" {
		return true
	}
	ttl := c.expires.Sub(c.issued)
	return !now.Before(c.issued.Add(ttl*8/10)) || now.Sub(c.issued) > 24*time.Hour
}

// modeOr is a defaultMode, or Kubernetes' default 0644.
func modeOr(m *int32) os.FileMode {
	if m == nil {
		return defaultVolumeMode
	}
	return os.FileMode(*m) & fs.ModePerm
}

// itemMode is a KeyToPath's own mode, or the volume's default.
func itemMode(m *int32, def os.FileMode) os.FileMode {
	if m == nil {
		return def
	}
	return os.FileMode(*m) & fs.ModePerm
}

// configMapPayload adds a ConfigMap's keys (all, or the items) to payload.
// A missing ConfigMap that is optional adds nothing; a missing one that is
// not is the kubelet's error, as is an item naming a key it lacks.
func (a *Agent) configMapPayload(ctx context.Context, pod *corev1.Pod, name string, items []*corev1.KeyToPath, optional bool, mode os.FileMode, payload map[string]fileProjection) error {
	cm, err := a.volObjs.ConfigMap(ctx, pod.GetMetadata().GetNamespace(), name)
	if apierrors.IsNotFound(err) {
		if optional {
			return nil
		}
		return fmt.Errorf("configmap %q not found", name)
	}
	if err != nil {
		return err
	}
	data := map[string][]byte{}
	for k, v := range cm.GetData() {
		data[k] = []byte(v)
	}
	for k, v := range cm.GetBinaryData() {
		data[k] = v
	}
	return addItems(data, items, optional, mode, payload, "configmap references non-existent config key: %s")
}

// secretPayload is configMapPayload for a Secret.
func (a *Agent) secretPayload(ctx context.Context, pod *corev1.Pod, name string, items []*corev1.KeyToPath, optional bool, mode os.FileMode, payload map[string]fileProjection) error {
	s, err := a.volObjs.Secret(ctx, pod.GetMetadata().GetNamespace(), name)
	if apierrors.IsNotFound(err) {
		if optional {
			return nil
		}
		return fmt.Errorf("secret %q not found", name)
	}
	if err != nil {
		return err
	}
	return addItems(s.GetData(), items, optional, mode, payload, "references non-existent secret key: %s")
}

// addItems puts every key of data (no items) or the items' keys under
// their paths.
func addItems(data map[string][]byte, items []*corev1.KeyToPath, optional bool, mode os.FileMode, payload map[string]fileProjection, missing string) error {
	if len(items) == 0 {
		for k, v := range data {
			payload[k] = fileProjection{data: v, mode: mode}
		}
		return nil
	}
	for _, it := range items {
		v, ok := data[it.GetKey()]
		if !ok {
			if optional {
				continue
			}
			return fmt.Errorf(missing, it.GetKey())
		}
		payload[it.GetPath()] = fileProjection{data: v, mode: itemMode(it.Mode, mode)}
	}
	return nil
}

// downwardPayload adds the downwardAPI items: pod fields (labels and
// annotations as sorted key="value" lines) and container resources.
func (a *Agent) downwardPayload(pod *corev1.Pod, items []*corev1.DownwardAPIVolumeFile, mode os.FileMode, payload map[string]fileProjection) error {
	for _, it := range items {
		var v string
		var err error
		switch {
		case it.GetFieldRef() != nil:
			switch fp := it.GetFieldRef().GetFieldPath(); fp {
			case "metadata.labels":
				v = formatMap(pod.GetMetadata().GetLabels())
			case "metadata.annotations":
				v = formatMap(pod.GetMetadata().GetAnnotations())
			default:
				v, err = podField(pod, fp, envInputs{})
			}
		case it.GetResourceFieldRef() != nil:
			var first *corev1.Container
			if cs := pod.GetSpec().GetContainers(); len(cs) > 0 {
				first = cs[0]
			}
			v, err = resourceField(pod, first, it.GetResourceFieldRef(), a.cfg.Capacity)
		}
		if err != nil {
			return err
		}
		payload[it.GetPath()] = fileProjection{data: []byte(v), mode: itemMode(it.Mode, mode)}
	}
	return nil
}

// formatMap is labels or annotations as a downwardAPI file shows them:
// one key="value" line per key (the value quoted as Go quotes strings),
// sorted by key, no final newline.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

// projectedPayload is a projected volume's files: its configMap, secret,
// downwardAPI and serviceAccountToken sources. A clusterTrustBundle source
// is refused (kplane serves no ClusterTrustBundles).
func (a *Agent) projectedPayload(ctx context.Context, pod *corev1.Pod, rec *podRecord, volume string, p *corev1.ProjectedVolumeSource) (map[string]fileProjection, error) {
	mode := modeOr(p.DefaultMode)
	payload := map[string]fileProjection{}
	for i, s := range p.GetSources() {
		switch {
		case s.GetConfigMap() != nil:
			c := s.GetConfigMap()
			if err := a.configMapPayload(ctx, pod, c.GetLocalObjectReference().GetName(), c.GetItems(), c.GetOptional(), mode, payload); err != nil {
				return nil, err
			}
		case s.GetSecret() != nil:
			c := s.GetSecret()
			if err := a.secretPayload(ctx, pod, c.GetLocalObjectReference().GetName(), c.GetItems(), c.GetOptional(), mode, payload); err != nil {
				return nil, err
			}
		case s.GetDownwardApi() != nil:
			if err := a.downwardPayload(pod, s.GetDownwardApi().GetItems(), mode, payload); err != nil {
				return nil, err
			}
		case s.GetServiceAccountToken() != nil:
			t := s.GetServiceAccountToken()
			exp := int64(3600)
			if t.ExpirationSeconds != nil {
				exp = t.GetExpirationSeconds()
			}
			tok, err := a.podToken(ctx, pod, rec, fmt.Sprintf("%s/%d", volume, i), t.GetAudience(), exp)
			if err != nil {
				return nil, fmt.Errorf("failed to fetch token: %w", err)
			}
			payload[t.GetPath()] = fileProjection{data: []byte(tok), mode: mode}
		case s.GetClusterTrustBundle() != nil:
			return nil, errors.New("clusterTrustBundle projections are not supported: kplane serves no ClusterTrustBundles")
		}
	}
	return payload, nil
}

// podToken returns the pod's token for one projection, renewing it at
// 80 % of its lifetime.
func (a *Agent) podToken(ctx context.Context, pod *corev1.Pod, rec *podRecord, key, audience string, exp int64) (string, error) {
	now := time.Now()
	if c, ok := rec.tokens[key]; ok && !c.due(now) {
		return c.token, nil
	}
	if a.tokens == nil {
		return "", errors.New("no token source")
	}
	tok, expires, err := a.tokens.PodToken(ctx, pod, audience, exp)
	if err != nil {
		return "", err
	}
	if rec.tokens == nil {
		rec.tokens = map[string]cachedToken{}
	}
	rec.tokens[key] = cachedToken{token: tok, issued: now, expires: expires}
	return tok, nil
}

// nextTokenRenewal is when the soonest of the pod's tokens is due (zero:
// none).
func nextTokenRenewal(rec *podRecord) time.Time {
	var next time.Time
	for _, c := range rec.tokens {
		at := c.issued.Add(c.expires.Sub(c.issued) * 8 / 10)
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}
