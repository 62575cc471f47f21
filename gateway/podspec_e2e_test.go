// This file checks with the real kubectl (1.27 and 1.33, strict field
// validation) that a Deployment using every pod-spec field family is
// accepted and read back with every field intact: the generated schema
// carries all of Kubernetes' fields.

package gateway_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

const fullPodSpecDeployment = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: full
  labels: {app: full}
spec:
  replicas: 1
  selector: {matchLabels: {app: full}}
  template:
    metadata:
      labels: {app: full}
    spec:
      securityContext:
        runAsUser: 1000
        runAsGroup: 3000
        runAsNonRoot: true
        fsGroup: 2000
        fsGroupChangePolicy: OnRootMismatch
        supplementalGroups: [4000]
        seccompProfile: {type: RuntimeDefault}
        sysctls: [{name: net.ipv4.ip_local_port_range, value: "1024 65535"}]
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions: [{key: kubernetes.io/os, operator: In, values: [linux]}]
        podAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
          - weight: 50
            podAffinityTerm:
              labelSelector: {matchLabels: {app: cache}}
              topologyKey: kubernetes.io/hostname
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - labelSelector: {matchExpressions: [{key: app, operator: In, values: [full]}]}
            topologyKey: kubernetes.io/hostname
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: topology.kubernetes.io/zone
        whenUnsatisfiable: ScheduleAnyway
        labelSelector: {matchLabels: {app: full}}
      imagePullSecrets: [{name: regcred}]
      dnsPolicy: None
      dnsConfig:
        nameservers: [1.1.1.1]
        searches: [svc.cluster.local]
        options: [{name: ndots, value: "2"}]
      hostAliases: [{ip: 10.0.0.1, hostnames: [db.local]}]
      readinessGates: [{conditionType: example.com/ready}]
      shareProcessNamespace: true
      initContainers:
      - name: init
        image: busybox
        command: [sh, -c, "true"]
      containers:
      - name: app
        image: nginx
        stdin: true
        stdinOnce: true
        tty: true
        ports: [{containerPort: 8080, name: http}]
        securityContext:
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          runAsNonRoot: true
          capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}
          seccompProfile: {type: RuntimeDefault}
        lifecycle:
          postStart: {exec: {command: [sh, -c, "echo hi"]}}
          preStop: {httpGet: {path: /quit, port: 8080}}
        startupProbe: {tcpSocket: {port: 8080}, failureThreshold: 30, periodSeconds: 10}
        terminationMessagePolicy: FallbackToLogsOnError
        volumeMounts:
        - {name: cache, mountPath: /cache}
        - {name: all-in-one, mountPath: /projected, readOnly: true}
        - {name: podinfo, mountPath: /etc/podinfo}
        - {name: data, mountPath: /data}
        - {name: scratch, mountPath: /scratch}
      volumes:
      - name: cache
        emptyDir: {medium: Memory, sizeLimit: 64Mi}
      - name: all-in-one
        projected:
          defaultMode: 288
          sources:
          - secret: {name: s, items: [{key: k, path: p}]}
          - configMap: {name: c}
          - downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}
          - serviceAccountToken: {audience: api, expirationSeconds: 3600, path: token}
      - name: podinfo
        downwardAPI:
          items:
          - path: cpu_limit
            resourceFieldRef: {containerName: app, resource: limits.cpu, divisor: 1m}
      - name: data
        persistentVolumeClaim: {claimName: data-claim, readOnly: true}
      - name: scratch
        ephemeral:
          volumeClaimTemplate:
            spec:
              accessModes: [ReadWriteOnce]
              storageClassName: fast
              resources: {requests: {storage: 1Gi}}
`

// subset reports the first value of want missing from got or different
// there (got may hold more: defaults).
func subset(want, got any, path string) error {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: got %v, want an object", path, got)
		}
		for k, v := range w {
			if err := subset(v, g[k], path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Errorf("%s: got %v, want %v", path, got, want)
		}
		for i := range w {
			if err := subset(w[i], g[i], fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	default:
		if !reflect.DeepEqual(want, got) {
			return fmt.Errorf("%s: got %v, want %v", path, got, want)
		}
	}
	return nil
}

func TestKubectlEveryPodSpecFieldFamily(t *testing.T) {
	var want map[string]any
	if err := yaml.Unmarshal([]byte(fullPodSpecDeployment), &want); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := startKube(t, bin)
			f := k.file("full.yaml", fullPodSpecDeployment)
			k.ok([]string{"apply", "--validate=strict", "-f", f}, "deployment.apps/full created")
			out := k.ok([]string{"get", "deployment", "full", "-o", "json"})
			var got map[string]any
			if err := json.Unmarshal([]byte(out), &got); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			// YAML and JSON numbers compare as float64 once both are
			// decoded the same way.
			var norm map[string]any
			b, _ := json.Marshal(want)
			_ = json.Unmarshal(b, &norm)
			if err := subset(norm["spec"], got["spec"], "spec"); err != nil {
				t.Fatalf("read back: %v", err)
			}
			k.ok([]string{"apply", "--validate=strict", "-f", f}, "deployment.apps/full unchanged")
		})
	}
}

// TestKubectlDescribeNodeReadsLease: the node's Lease renewTime is a
// MicroTime written with 6 fractional digits, which kubectl describe node
// parses (it failed on nanoseconds).
func TestKubectlDescribeNodeReadsLease(t *testing.T) {
	k := startKube(t, "kubectl.1.33")
	k.ok([]string{"apply", "-f", k.file("node.yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n")}, "node/n1 created")
	lease := "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: n1\n  namespace: kube-node-lease\nspec:\n  holderIdentity: n1\n  renewTime: \"2026-11-26T10:00:00.123456Z\"\n"
	k.ok([]string{"apply", "-f", k.file("lease.yaml", lease)}, "lease.coordination.k8s.io/n1 created")
	k.ok([]string{"get", "lease", "-n", "kube-node-lease", "n1", "-o", "jsonpath={.spec.renewTime}"}, "2026-11-26T10:00:00.123456Z")
	k.ok([]string{"describe", "node", "n1"}, "Name:", "n1", "RenewTime:")
}

// TestKubectlExplain: kubectl explain shows Kubernetes' descriptions (the
// generated schema carries k8s.io/api's doc comments into OpenAPI v3).
func TestKubectlExplain(t *testing.T) {
	for _, bin := range []string{"kubectl.1.27", "kubectl.1.33"} {
		t.Run(bin, func(t *testing.T) {
			k := startKube(t, bin)
			k.ok([]string{"explain", "deployment.spec.template.spec.securityContext"},
				"SecurityContext holds pod-level security attributes", "runAsNonRoot")
			k.ok([]string{"explain", "pod.spec.volumes.configMap"}, "Name of the referent", "optional specify whether the ConfigMap")
		})
	}
}
