// Command kubegen writes kplane's resource messages
// (proto/kplane/<group>/v1/types.proto and proto/kplane/meta/v1/meta.proto)
// from Kubernetes' own API definitions: the k8s.io/api and
// k8s.io/apimachinery Go types (and k8s.io/apiextensions-apiserver's
// CustomResourceDefinition) at the version go.mod requires. Reflection
// over the types reachable from the served kinds gives every field, its
// Kubernetes protobuf field number (the `protobuf:"bytes,N,..."` struct tag),
// its JSON name (the `json` tag) and its presence (pointer-ness); go/parser
// over the modules' source gives the doc comments, which become the proto
// comments. scripts/gen.sh runs it before buf generate.
//
// Mapping rules (chosen so that the Go API protoc-gen-go generates keeps
// today's names wherever they already agree with Kubernetes):
//   - a Go struct becomes a message of the same name in the proto package of
//     its Go package (k8s.io/api/core/v1 → kplane.core.v1, apimachinery's
//     meta/v1 and util/intstr → kplane.meta.v1);
//   - a field is named snake_case(Go field name) (HostIP → host_ip) and
//     carries json_name where protoc's default differs from Kubernetes';
//   - pointer scalars are proto3 optional, slices repeated, []byte bytes,
//     maps maps (a slice map value, like authorization's ExtraValue, becomes
//     a wrapper message with `repeated items = 1`, as in Kubernetes' own
//     generated.proto, marked so kubejson writes it as a bare array);
//   - an embedded struct written inline in JSON (Volume's VolumeSource,
//     Probe's ProbeHandler) is a message field marked (kplane.meta.v1.inline);
//   - metav1.Time is google.protobuf.Timestamp (wire-identical to
//     Kubernetes' Time{seconds=1,nanos=2}); metav1.MicroTime is a Timestamp
//     marked (kplane.meta.v1.micro_time) so kubejson writes 6 fractional
//     digits; metav1.Duration and resource.Quantity are strings and
//     ResourceList is map<string,string> (Kubernetes encodes Quantity as a
//     message {string=1}: the wire-compatibility step transcodes these);
//     intstr.IntOrString is kplane.meta.v1.IntOrString (int_val=2,
//     str_val=3 as in Kubernetes, as a oneof); metav1.FieldsV1 and
//     runtime.RawExtension keep Kubernetes' {bytes raw=1} and are marked
//     (kplane.meta.v1.raw_json) so kubejson writes the bytes as embedded JSON;
//     apiextensions' JSONSchemaProps (a CRD's openAPIV3Schema) is such a
//     message too: its JSON document, not a mirror of its recursive type;
//   - a scalar Kubernetes writes even when zero (no omitempty: a container
//     status' "ready": false) is marked (kplane.meta.v1.emit_empty).
//   - A top-level kind or list (a struct embedding metav1.TypeMeta) gets
//     `string api_version = 1000` and `string kind = 1001`: Kubernetes'
//     protobuf carries them in its envelope (runtime.Unknown), not in the
//     message, and its message field numbers stay far below 1000, so these
//     cannot collide with a Kubernetes field.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"unicode"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	networkingv1 "k8s.io/api/networking/v1"
	nodev1 "k8s.io/api/node/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

const (
	metaGo     = "k8s.io/apimachinery/pkg/apis/meta/v1"
	intstrGo   = "k8s.io/apimachinery/pkg/util/intstr"
	runtimeGo  = "k8s.io/apimachinery/pkg/runtime"
	optionsImp = "kplane/meta/v1/options.proto"
)

// protoPkg is one generated .proto file.
type protoPkg struct {
	Dir     string   // under proto/kplane: core, meta, ...
	File    string   // types.proto or meta.proto
	Doc     string   // package comment
	GoPkgs  []string // Go import paths whose structs land here
	GoAlias string
	Roots   []any // served kinds and lists, in order
	// Version is the API version, "v1" when empty: a group served in
	// another version too (autoscaling/v2) has one package per version.
	Version string
}

func (p protoPkg) version() string {
	if p.Version == "" {
		return "v1"
	}
	return p.Version
}

// key names the package in the generator's maps: its directory for v1,
// directory and version otherwise.
func (p protoPkg) key() string {
	if p.version() == "v1" {
		return p.Dir
	}
	return p.Dir + p.version()
}

func (p protoPkg) name() string { return "kplane." + p.Dir + "." + p.version() }
func (p protoPkg) importPath() string {
	return "kplane/" + p.Dir + "/" + p.version() + "/" + p.File
}

func packages() []protoPkg {
	return []protoPkg{
		{Dir: "meta", File: "meta.proto", GoAlias: "metav1",
			GoPkgs: []string{metaGo, intstrGo, runtimeGo},
			Doc:    "holds the object metadata every kplane resource carries and the other\n// types of Kubernetes' meta/v1 the API uses",
			Roots:  []any{metav1.Status{}, metav1.Preconditions{}, metav1.Condition{}, metav1.ObjectMeta{}, metav1.ListMeta{}, metav1.LabelSelector{}}},
		{Dir: "core", File: "types.proto", GoAlias: "corev1", GoPkgs: []string{"k8s.io/api/core/v1"},
			Doc: "holds Kubernetes' core/v1 resources",
			Roots: []any{corev1.Namespace{}, corev1.NamespaceList{}, corev1.Pod{}, corev1.PodList{}, corev1.Binding{},
				corev1.Node{}, corev1.NodeList{}, corev1.Event{}, corev1.EventList{}, corev1.Service{}, corev1.ServiceList{},
				corev1.Endpoints{}, corev1.EndpointsList{}, corev1.ConfigMap{}, corev1.ConfigMapList{}, corev1.Secret{}, corev1.SecretList{},
				corev1.ServiceAccount{}, corev1.ServiceAccountList{}, corev1.ReplicationController{}, corev1.ReplicationControllerList{},
				corev1.PodTemplate{}, corev1.PodTemplateList{},
				corev1.ResourceQuota{}, corev1.ResourceQuotaList{}, corev1.LimitRange{}, corev1.LimitRangeList{},
				corev1.PersistentVolumeClaim{}, corev1.PersistentVolumeClaimList{}, corev1.PersistentVolume{}, corev1.PersistentVolumeList{}}},
		{Dir: "apps", File: "types.proto", GoAlias: "appsv1", GoPkgs: []string{"k8s.io/api/apps/v1"},
			Doc: "holds Kubernetes' apps/v1 resources",
			Roots: []any{appsv1.Deployment{}, appsv1.DeploymentList{}, appsv1.ReplicaSet{}, appsv1.ReplicaSetList{},
				appsv1.DaemonSet{}, appsv1.DaemonSetList{}, appsv1.ControllerRevision{}, appsv1.ControllerRevisionList{},
				appsv1.StatefulSet{}, appsv1.StatefulSetList{}}},
		{Dir: "coordination", File: "types.proto", GoAlias: "coordinationv1", GoPkgs: []string{"k8s.io/api/coordination/v1"},
			Doc:   "holds Kubernetes' coordination.k8s.io/v1 resources",
			Roots: []any{coordinationv1.Lease{}, coordinationv1.LeaseList{}}},
		{Dir: "policy", File: "types.proto", GoAlias: "policyv1", GoPkgs: []string{"k8s.io/api/policy/v1"},
			Doc:   "holds Kubernetes' policy/v1 resources and the Eviction a pod's eviction subresource takes",
			Roots: []any{policyv1.PodDisruptionBudget{}, policyv1.PodDisruptionBudgetList{}, policyv1.Eviction{}}},
		{Dir: "rbac", File: "types.proto", GoAlias: "rbacv1", GoPkgs: []string{"k8s.io/api/rbac/v1"},
			Doc: "holds Kubernetes' rbac.authorization.k8s.io/v1 resources",
			Roots: []any{rbacv1.Role{}, rbacv1.RoleList{}, rbacv1.ClusterRole{}, rbacv1.ClusterRoleList{},
				rbacv1.RoleBinding{}, rbacv1.RoleBindingList{}, rbacv1.ClusterRoleBinding{}, rbacv1.ClusterRoleBindingList{}}},
		{Dir: "admissionregistration", File: "types.proto", GoAlias: "admissionregistrationv1", GoPkgs: []string{"k8s.io/api/admissionregistration/v1"},
			Doc: "holds Kubernetes' admissionregistration.k8s.io/v1 webhook configurations and admission policies",
			Roots: []any{admissionregistrationv1.MutatingWebhookConfiguration{}, admissionregistrationv1.MutatingWebhookConfigurationList{},
				admissionregistrationv1.ValidatingWebhookConfiguration{}, admissionregistrationv1.ValidatingWebhookConfigurationList{},
				admissionregistrationv1.ValidatingAdmissionPolicy{}, admissionregistrationv1.ValidatingAdmissionPolicyList{},
				admissionregistrationv1.ValidatingAdmissionPolicyBinding{}, admissionregistrationv1.ValidatingAdmissionPolicyBindingList{}}},
		{Dir: "authorization", File: "types.proto", GoAlias: "authorizationv1", GoPkgs: []string{"k8s.io/api/authorization/v1"},
			Doc: "holds Kubernetes' authorization.k8s.io/v1 reviews",
			Roots: []any{authorizationv1.SubjectAccessReview{}, authorizationv1.SelfSubjectAccessReview{},
				authorizationv1.LocalSubjectAccessReview{}, authorizationv1.SelfSubjectRulesReview{}}},
		{Dir: "authentication", File: "types.proto", GoAlias: "authenticationv1", GoPkgs: []string{"k8s.io/api/authentication/v1"},
			Doc:   "holds Kubernetes' authentication.k8s.io/v1 requests and reviews",
			Roots: []any{authenticationv1.TokenRequest{}, authenticationv1.TokenReview{}, authenticationv1.SelfSubjectReview{}}},
		{Dir: "autoscaling", File: "types.proto", GoAlias: "autoscalingv1", GoPkgs: []string{"k8s.io/api/autoscaling/v1"},
			Doc:   "holds autoscaling/v1 Scale, the body of the scale subresource, and HorizontalPodAutoscaler, a view of the stored autoscaling/v2 one",
			Roots: []any{autoscalingv1.Scale{}, autoscalingv1.HorizontalPodAutoscaler{}, autoscalingv1.HorizontalPodAutoscalerList{}}},
		{Dir: "autoscaling", Version: "v2", File: "types.proto", GoAlias: "autoscalingv2", GoPkgs: []string{"k8s.io/api/autoscaling/v2"},
			Doc:   "holds Kubernetes' autoscaling/v2 HorizontalPodAutoscaler",
			Roots: []any{autoscalingv2.HorizontalPodAutoscaler{}, autoscalingv2.HorizontalPodAutoscalerList{}}},
		{Dir: "metrics", Version: "v1beta1", File: "types.proto", GoAlias: "metricsv1beta1", GoPkgs: []string{"k8s.io/metrics/pkg/apis/metrics/v1beta1"},
			Doc: "holds Kubernetes' metrics.k8s.io/v1beta1 resource metrics (read-only)",
			Roots: []any{metricsv1beta1.NodeMetrics{}, metricsv1beta1.NodeMetricsList{},
				metricsv1beta1.PodMetrics{}, metricsv1beta1.PodMetricsList{}}},
		{Dir: "batch", File: "types.proto", GoAlias: "batchv1", GoPkgs: []string{"k8s.io/api/batch/v1"},
			Doc:   "holds Kubernetes' batch/v1 resources",
			Roots: []any{batchv1.Job{}, batchv1.JobList{}, batchv1.CronJob{}, batchv1.CronJobList{}}},
		{Dir: "apiextensions", File: "types.proto", GoAlias: "apiextensionsv1", GoPkgs: []string{"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"},
			Doc:   "holds apiextensions.k8s.io/v1 CustomResourceDefinition",
			Roots: []any{apiextensionsv1.CustomResourceDefinition{}, apiextensionsv1.CustomResourceDefinitionList{}}},
		{Dir: "discovery", File: "types.proto", GoAlias: "discoveryv1", GoPkgs: []string{"k8s.io/api/discovery/v1"},
			Doc:   "holds Kubernetes' discovery.k8s.io/v1 resources",
			Roots: []any{discoveryv1.EndpointSlice{}, discoveryv1.EndpointSliceList{}}},
		{Dir: "certificates", File: "types.proto", GoAlias: "certificatesv1", GoPkgs: []string{"k8s.io/api/certificates/v1"},
			Doc:   "holds Kubernetes' certificates.k8s.io/v1 resources",
			Roots: []any{certificatesv1.CertificateSigningRequest{}, certificatesv1.CertificateSigningRequestList{}}},
		{Dir: "events", File: "types.proto", GoAlias: "eventsv1", GoPkgs: []string{"k8s.io/api/events/v1"},
			Doc:   "holds Kubernetes' events.k8s.io/v1 Event, a view of the stored core/v1 Event",
			Roots: []any{eventsv1.Event{}, eventsv1.EventList{}}},
		{Dir: "networking", File: "types.proto", GoAlias: "networkingv1", GoPkgs: []string{"k8s.io/api/networking/v1"},
			Doc: "holds Kubernetes' networking.k8s.io/v1 resources",
			Roots: []any{networkingv1.Ingress{}, networkingv1.IngressList{}, networkingv1.IngressClass{}, networkingv1.IngressClassList{},
				networkingv1.NetworkPolicy{}, networkingv1.NetworkPolicyList{}}},
		{Dir: "node", File: "types.proto", GoAlias: "nodev1", GoPkgs: []string{"k8s.io/api/node/v1"},
			Doc:   "holds Kubernetes' node.k8s.io/v1 resources",
			Roots: []any{nodev1.RuntimeClass{}, nodev1.RuntimeClassList{}}},
		{Dir: "storage", File: "types.proto", GoAlias: "storagev1", GoPkgs: []string{"k8s.io/api/storage/v1"},
			Doc: "holds Kubernetes' storage.k8s.io/v1 resources",
			Roots: []any{storagev1.StorageClass{}, storagev1.StorageClassList{}, storagev1.CSIDriver{}, storagev1.CSIDriverList{}, storagev1.CSINode{}, storagev1.CSINodeList{},
				storagev1.VolumeAttachment{}, storagev1.VolumeAttachmentList{}, storagev1.CSIStorageCapacity{}, storagev1.CSIStorageCapacityList{}}},
		{Dir: "flowcontrol", File: "types.proto", GoAlias: "flowcontrolv1", GoPkgs: []string{"k8s.io/api/flowcontrol/v1"},
			Doc: "holds Kubernetes' flowcontrol.apiserver.k8s.io/v1 resources (API Priority and Fairness)",
			Roots: []any{flowcontrolv1.FlowSchema{}, flowcontrolv1.FlowSchemaList{},
				flowcontrolv1.PriorityLevelConfiguration{}, flowcontrolv1.PriorityLevelConfigurationList{}}},
		{Dir: "scheduling", File: "types.proto", GoAlias: "schedulingv1", GoPkgs: []string{"k8s.io/api/scheduling/v1"},
			Doc:   "holds Kubernetes' scheduling.k8s.io/v1 resources",
			Roots: []any{schedulingv1.PriorityClass{}, schedulingv1.PriorityClassList{}}},
	}
}

var (
	typeMeta   = reflect.TypeOf(metav1.TypeMeta{})
	timeT      = reflect.TypeOf(metav1.Time{})
	microTimeT = reflect.TypeOf(metav1.MicroTime{})
	durationT  = reflect.TypeOf(metav1.Duration{})
	quantityT  = reflect.TypeOf(resource.Quantity{})
	intOrStrT  = reflect.TypeOf(intstr.IntOrString{})
	fieldsV1T  = reflect.TypeOf(metav1.FieldsV1{})
	rawExtT    = reflect.TypeOf(runtime.RawExtension{})
	resListT   = reflect.TypeOf(corev1.ResourceList{})
	// A CRD's openAPIV3Schema is kept as its JSON document: JSONSchemaProps
	// recurses through types with their own JSON shapes (schema or array,
	// schema or bool, arbitrary JSON values) that a message cannot mirror,
	// and every reader (validation, pruning, defaulting) wants it as
	// apiextensions' Go type anyway, which the JSON gives directly.
	schemaPropsT = reflect.TypeOf(apiextensionsv1.JSONSchemaProps{})
)

// The field numbers of api_version and kind in top-level kinds and lists.
const (
	apiVersionN = 1000
	kindN       = 1001
)

// message is one generated message.
type message struct {
	Name   string
	Doc    string
	Fields []field
	Raw    string // verbatim body, for the hand-shaped specials
	// inline lists the fields written inline in JSON: kubegen writes Go
	// getters on this message that reach through them.
	inline []*field
	goType reflect.Type
}

// field is one generated field.
type field struct {
	Name     string
	Type     string
	Number   int
	JSONName string
	Label    string // "", "optional", "repeated"
	Options  []string
	Doc      string
}

// gen holds the state of one run: the messages per proto package and the
// docs parsed from the modules' sources.
type gen struct {
	pkgOf    map[string]*protoPkg // Go import path → proto package
	messages map[string][]*message
	seen     map[reflect.Type]bool
	imports  map[string]map[string]bool // proto pkg dir → imported files
	docs     map[string]map[string]typeDoc
	modDirs  map[string]string
}

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	if err := run(*root); err != nil {
		slog.Error("kubegen", "err", err)
		os.Exit(1)
	}
}

func run(root string) error {
	pkgs := packages()
	g := &gen{
		pkgOf:    map[string]*protoPkg{},
		messages: map[string][]*message{},
		seen:     map[reflect.Type]bool{},
		imports:  map[string]map[string]bool{},
		docs:     map[string]map[string]typeDoc{},
		modDirs:  map[string]string{},
	}
	for i := range pkgs {
		for _, gp := range pkgs[i].GoPkgs {
			g.pkgOf[gp] = &pkgs[i]
		}
		g.imports[pkgs[i].key()] = map[string]bool{}
	}
	for _, mod := range []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/apiextensions-apiserver", "k8s.io/metrics"} {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", mod).Output()
		if err != nil {
			return fmt.Errorf("locating %s: %w", mod, err)
		}
		g.modDirs[mod] = strings.TrimSpace(string(out))
	}
	for _, p := range pkgs {
		for _, r := range p.Roots {
			if err := g.visit(reflect.TypeOf(r)); err != nil {
				return err
			}
		}
	}
	g.addIntOrString()
	for _, p := range pkgs {
		path := filepath.Join(root, "proto", "kplane", p.Dir, p.version(), p.File)
		if err := os.WriteFile(path, g.render(p), 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		docs, err := g.renderDocs(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, "proto", "kplane", p.Dir, p.version(), "zz_generated_docs.go"), docs, 0o644); err != nil {
			return fmt.Errorf("writing %s docs: %w", p.Dir, err)
		}
		acc, err := g.renderAccessors(p)
		if err != nil {
			return err
		}
		path = filepath.Join(root, "proto", "kplane", p.Dir, p.version(), "zz_generated_inline.go")
		if acc == nil {
			if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
				return fmt.Errorf("removing %s: %w", path, err)
			}
			continue
		}
		if err := os.WriteFile(path, acc, 0o644); err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// addIntOrString writes kplane.meta.v1.IntOrString: Kubernetes' field
// numbers for the two values, as a oneof (Kubernetes' type=1 is implied by
// which one is set).
func (g *gen) addIntOrString() {
	g.messages["meta"] = append(g.messages["meta"], &message{
		Name: "IntOrString",
		Doc: "IntOrString holds either an integer or a string, and is written in JSON as\n" +
			"a bare number or a bare string, as in Kubernetes (kubejson does this).\n" +
			"Kubernetes' field numbers; its type=1 is implied by which value is set.",
		Raw: "  reserved 1;\n  oneof value {\n    int32 int_val = 2;\n    string str_val = 3;\n  }\n",
	})
}

// visit generates the message of struct t and of every struct it reaches.
func (g *gen) visit(t reflect.Type) error {
	if g.seen[t] {
		return nil
	}
	g.seen[t] = true
	p := g.pkgOf[t.PkgPath()]
	if p == nil {
		return fmt.Errorf("%s.%s: Go package %s has no proto package", t.PkgPath(), t.Name(), t.PkgPath())
	}
	td := g.doc(t.PkgPath(), t.Name())
	m := &message{Name: t.Name(), Doc: td.Doc, goType: t}
	g.messages[p.key()] = append(g.messages[p.key()], m)
	var later []reflect.Type
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		jsonTag := sf.Tag.Get("json")
		jsonName, _, _ := strings.Cut(jsonTag, ",")
		if jsonName == "-" {
			continue
		}
		if sf.Anonymous && sf.Type == typeMeta {
			// Kubernetes carries these in its protobuf envelope, not in
			// the message (see the package comment).
			tm := g.doc(metaGo, "TypeMeta")
			m.Fields = append(m.Fields,
				field{Name: "api_version", Type: "string", Number: apiVersionN, JSONName: "apiVersion", Doc: tm.Fields["APIVersion"]},
				field{Name: "kind", Type: "string", Number: kindN, JSONName: "kind", Doc: tm.Fields["Kind"]})
			continue
		}
		pb := sf.Tag.Get("protobuf")
		if pb == "" || pb == "-" {
			return fmt.Errorf("%s.%s: field %s has no protobuf tag", t.PkgPath(), t.Name(), sf.Name)
		}
		num, err := strconv.Atoi(strings.Split(pb, ",")[1])
		if err != nil {
			return fmt.Errorf("%s.%s: field %s: protobuf tag %q: %w", t.PkgPath(), t.Name(), sf.Name, pb, err)
		}
		f := field{Name: snake(sf.Name), Number: num, JSONName: jsonName, Doc: td.Fields[sf.Name]}
		if sf.Anonymous && jsonName != "" {
			// Embedded but not inline (Status' ListMeta is "metadata"):
			// named after its JSON name, as kplane's Go code knows it.
			f.Name = snake(jsonName)
		} else if sf.Anonymous {
			f.Name = snake(sf.Type.Name())
			f.JSONName = ""
			f.Options = append(f.Options, "(kplane.meta.v1.inline) = true")
			g.useOptions(p.key())
		}
		typ, label, opts, next, err := g.fieldType(p.key(), sf.Type, t.Name()+"."+sf.Name)
		if err != nil {
			return err
		}
		f.Type, f.Label = typ, label
		f.Options = append(f.Options, opts...)
		if f.Label == "" && !strings.Contains(jsonTag, ",omitempty") && scalar(typ) {
			// Kubernetes writes this field even when zero ("ready": false).
			f.Options = append(f.Options, "(kplane.meta.v1.emit_empty) = true")
			g.useOptions(p.key())
		}
		m.Fields = append(m.Fields, f)
		if sf.Anonymous && jsonName == "" {
			m.inline = append(m.inline, &m.Fields[len(m.Fields)-1])
		}
		later = append(later, next...)
	}
	for _, n := range later {
		if err := g.visit(n); err != nil {
			return err
		}
	}
	return nil
}

func (g *gen) useOptions(dir string) { g.imports[dir][optionsImp] = true }

// snake turns a Go field name into a proto field name: HostIP → host_ip,
// PodIPs → pod_ips, DNSConfig → dns_config, TTLSeconds → ttl_seconds.
func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i := 0; i < len(r); i++ {
		c := r[i]
		if unicode.IsUpper(c) && i > 0 {
			prev := r[i-1]
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			// An acronym's plural: IPs, CIDRs, WWNs stay one word.
			plural := i+1 < len(r) && r[i+1] == 's' && (i+2 == len(r) || unicode.IsUpper(r[i+2])) && unicode.IsUpper(prev)
			if unicode.IsLower(prev) || unicode.IsDigit(prev) || (nextLower && !plural) {
				b.WriteByte('_')
			}
		}
		b.WriteRune(unicode.ToLower(c))
	}
	return b.String()
}

// defaultJSON is protoc's JSON name of a snake_case field name.
func defaultJSON(name string) string {
	var b strings.Builder
	up := false
	for _, c := range name {
		if c == '_' {
			up = true
			continue
		}
		if up {
			b.WriteRune(unicode.ToUpper(c))
			up = false
		} else {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// render writes the .proto file of package p.
func (g *gen) render(p protoPkg) []byte {
	var b bytes.Buffer
	b.WriteString("// Code generated by proto/internal/kubegen from k8s.io/api and k8s.io/apimachinery. DO NOT EDIT.\n\n")
	b.WriteString("syntax = \"proto3\";\n\n")
	fmt.Fprintf(&b, "// Package %s %s\n// (generated from Kubernetes' Go types: Kubernetes' field numbers and JSON names).\n", p.name(), p.Doc)
	fmt.Fprintf(&b, "package %s;\n\n", p.name())
	var imps []string
	for imp := range g.imports[p.key()] {
		if imp != p.importPath() {
			imps = append(imps, imp)
		}
	}
	sort.Strings(imps)
	for _, imp := range imps {
		fmt.Fprintf(&b, "import %q;\n", imp)
	}
	if len(imps) > 0 {
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "option go_package = \"github.com/kplane/kplane/proto/kplane/%s/%s;%s\";\n", p.Dir, p.version(), p.GoAlias)
	for _, m := range g.messages[p.key()] {
		b.WriteString("\n")
		writeComment(&b, "", m.Doc)
		fmt.Fprintf(&b, "message %s {\n", m.Name)
		if m.Raw != "" {
			b.WriteString(m.Raw)
		}
		for i, f := range m.Fields {
			if i > 0 {
				b.WriteString("\n")
			}
			writeComment(&b, "  ", f.Doc)
			b.WriteString("  ")
			if f.Label != "" {
				b.WriteString(f.Label + " ")
			}
			fmt.Fprintf(&b, "%s %s = %d", f.Type, f.Name, f.Number)
			opts := f.Options
			if f.JSONName != "" && f.JSONName != defaultJSON(f.Name) {
				opts = append([]string{fmt.Sprintf("json_name = %q", f.JSONName)}, opts...)
			}
			if len(opts) > 0 {
				fmt.Fprintf(&b, " [%s]", strings.Join(opts, ", "))
			}
			b.WriteString(";\n")
		}
		b.WriteString("}\n")
	}
	return b.Bytes()
}
