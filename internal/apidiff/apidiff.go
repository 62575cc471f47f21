// Package apidiff runs a corpus of API cases against an API (kube-apiserver
// when recording, kplane's gateway in a test) so their answers can be
// compared: each case gets a namespace of its own (with the labels it asks
// for) and its default ServiceAccount, creates its setup objects (writes
// their status when given, as a controller would; waits for a CRD's
// resource to be served), sends its requests in order and keeps each
// answer — the code, the Status of a refusal, the Warning headers, and
// the fields the case names of an object accepted — then deletes what it
// made. The corpora: gateway/testdata/admission (admission plugins) and
// services/controllers/kubectltest/testdata/crcases (custom resources of
// published CRDs).
package apidiff

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Object is one object a case creates: its resource ("v1/pods",
// "scheduling.k8s.io/v1/priorityclasses") and its JSON; Status, if set, is
// written through the status subresource after the create.
type Object struct {
	Resource string `json:"resource"`
	Cluster  bool   `json:"cluster,omitempty"`
	// Object is the object; File, instead, names a YAML file holding it
	// (relative to the corpus).
	Object map[string]any `json:"object,omitempty"`
	File   string         `json:"file,omitempty"`
	Status map[string]any `json:"status,omitempty"`
	// Query is added to the request's URL ("fieldValidation=Strict").
	Query string `json:"query,omitempty"`
	// Served, on a setup object (a CRD), is a resource ("group/version/
	// plural") to wait for until its collection answers in the case's
	// namespace.
	Served string `json:"served,omitempty"`
}

// Case is one admission case.
type Case struct {
	Name            string            `json:"name"`
	NamespaceLabels map[string]string `json:"namespaceLabels,omitempty"`
	Setup           []Object          `json:"setup,omitempty"`
	Requests        []Object          `json:"requests"`
	// Fields are the dot paths ("spec.containers.0.resources") compared
	// of an object a request created.
	Fields []string `json:"fields,omitempty"`
}

// Answer is what the API answered one request.
type Answer struct {
	Code     int               `json:"code"`
	Status   *Status           `json:"status,omitempty"`
	Warnings []string          `json:"warnings,omitempty"`
	Fields   map[string]string `json:"fields,omitempty"`
}

// Status is the part of a refusal compared.
type Status struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	Details *struct {
		Causes []Cause `json:"causes,omitempty"`
	} `json:"details,omitempty"`
}

// Cause is one cause of a refusal.
type Cause struct {
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
	Field   string `json:"field,omitempty"`
}

// Same reports whether two answers say the same: equal, or refusals whose
// messages list the same causes in another order (schema validation
// reports a structure's fields in no fixed order, kube-apiserver's too).
func Same(a, b Answer) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) == string(jb) {
		return true
	}
	if a.Status == nil || b.Status == nil || a.Status.Details == nil || b.Status.Details == nil {
		return false
	}
	key := func(x Answer) string {
		causes := slices.Clone(x.Status.Details.Causes)
		slices.SortFunc(causes, func(p, q Cause) int { return strings.Compare(p.Field+p.Message, q.Field+q.Message) })
		c := x
		st := *x.Status
		st.Message = ""
		st.Details = &struct {
			Causes []Cause `json:"causes,omitempty"`
		}{Causes: causes}
		c.Status = &st
		j, _ := json.Marshal(c)
		return string(j)
	}
	return key(a) == key(b) && len(a.Status.Message) == len(b.Status.Message)
}

// Outcome is a case's answers, in request order.
type Outcome struct {
	Name    string   `json:"name"`
	Answers []Answer `json:"answers"`
}

// Send sends one request (body JSON, or nil) and returns the code, the
// response's headers and its body.
type Send func(method, path string, body any) (int, http.Header, []byte, error)

// Namespace is the namespace case i runs in.
func Namespace(i int) string { return "admission-" + strconv.Itoa(i) }

// collection is the REST path of resource's collection in ns.
func collection(resource string, cluster bool, ns string) string {
	parts := strings.Split(resource, "/")
	var prefix string
	if len(parts) == 2 { // v1/pods
		prefix = "/api/" + parts[0]
	} else {
		prefix = "/apis/" + parts[0] + "/" + parts[1]
	}
	res := parts[len(parts)-1]
	if cluster {
		return prefix + "/" + res
	}
	return prefix + "/namespaces/" + ns + "/" + res
}

func nameOf(o map[string]any) string {
	m, _ := o["metadata"].(map[string]any)
	n, _ := m["name"].(string)
	return n
}

// Load reads the corpus file: its cases, with every File read in.
func Load(path string) ([]Case, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var cases []Case
	if err := yaml.Unmarshal(raw, &cases); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range cases {
		for _, objs := range [][]Object{cases[i].Setup, cases[i].Requests} {
			for j := range objs {
				if objs[j].File == "" {
					continue
				}
				b, err := os.ReadFile(filepath.Join(filepath.Dir(path), objs[j].File))
				if err != nil {
					return nil, err
				}
				if err := yaml.Unmarshal(b, &objs[j].Object); err != nil {
					return nil, fmt.Errorf("%s: %w", objs[j].File, err)
				}
			}
		}
	}
	return cases, nil
}

// Run runs every case with send and returns their outcomes.
func Run(cases []Case, send Send) ([]Outcome, error) {
	var out []Outcome
	for i, c := range cases {
		o, err := runCase(i, c, send)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		out = append(out, o)
	}
	return out, nil
}

func runCase(i int, c Case, send Send) (Outcome, error) {
	ns := Namespace(i)
	labels := map[string]any{}
	for k, v := range c.NamespaceLabels {
		labels[k] = v
	}
	code, _, body, err := send(http.MethodPost, "/api/v1/namespaces", map[string]any{"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": ns, "labels": labels}})
	if err != nil {
		return Outcome{}, err
	}
	if code != http.StatusCreated {
		return Outcome{}, fmt.Errorf("namespace %s: %d %s", ns, code, body)
	}
	// Pods need their ServiceAccount (the ServiceAccount admission plugin
	// refuses them otherwise; no controller makes it here).
	code, _, body, err = send(http.MethodPost, "/api/v1/namespaces/"+ns+"/serviceaccounts", map[string]any{"apiVersion": "v1", "kind": "ServiceAccount",
		"metadata": map[string]any{"name": "default"}})
	if err != nil {
		return Outcome{}, err
	}
	if code != http.StatusCreated && code != http.StatusConflict {
		return Outcome{}, fmt.Errorf("serviceaccount %s/default: %d %s", ns, code, body)
	}
	var clusterMade []string
	defer func() {
		for _, p := range clusterMade {
			_, _, _, _ = send(http.MethodDelete, p, nil)
		}
		_, _, _, _ = send(http.MethodDelete, "/api/v1/namespaces/"+ns, nil)
	}()
	for _, s := range c.Setup {
		coll := collection(s.Resource, s.Cluster, ns)
		code, _, body, err := send(http.MethodPost, coll, s.Object)
		if err != nil {
			return Outcome{}, err
		}
		if code != http.StatusCreated {
			return Outcome{}, fmt.Errorf("setup %s: %d %s", s.Resource, code, body)
		}
		if s.Cluster {
			clusterMade = append(clusterMade, coll+"/"+nameOf(s.Object))
		}
		if s.Served != "" {
			if err := waitServed(send, collection(s.Served, true, ns)); err != nil {
				return Outcome{}, err
			}
		}
		if s.Status != nil {
			var live map[string]any
			if err := json.Unmarshal(body, &live); err != nil {
				return Outcome{}, err
			}
			live["status"] = s.Status
			code, _, body, err := send(http.MethodPut, coll+"/"+nameOf(s.Object)+"/status", live)
			if err != nil {
				return Outcome{}, err
			}
			if code != http.StatusOK {
				return Outcome{}, fmt.Errorf("setup %s status: %d %s", s.Resource, code, body)
			}
		}
	}
	o := Outcome{Name: c.Name}
	for _, r := range c.Requests {
		coll := collection(r.Resource, r.Cluster, ns)
		path := coll
		if r.Query != "" {
			path += "?" + r.Query
		}
		code, hdr, body, err := send(http.MethodPost, path, r.Object)
		if err != nil {
			return Outcome{}, err
		}
		a := Answer{Code: code, Warnings: hdr.Values("Warning")}
		slices.Sort(a.Warnings)
		if code >= 300 {
			a.Status = &Status{}
			if err := json.Unmarshal(body, a.Status); err != nil {
				return Outcome{}, fmt.Errorf("refusal %d %s: %w", code, body, err)
			}
		} else {
			if r.Cluster {
				clusterMade = append(clusterMade, coll+"/"+nameOf(r.Object))
			}
			var obj map[string]any
			if err := json.Unmarshal(body, &obj); err != nil {
				return Outcome{}, err
			}
			a.Fields = map[string]string{}
			for _, f := range c.Fields {
				a.Fields[f] = field(obj, f)
			}
		}
		o.Answers = append(o.Answers, a)
	}
	return o, nil
}

// waitServed polls path (a collection) until it answers 200, for at most
// a minute.
func waitServed(send Send, path string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		code, _, body, err := send(http.MethodGet, path, nil)
		if err != nil {
			return err
		}
		if code == http.StatusOK {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not served after a minute: %d %s", path, code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// field is the JSON of the value at the dot path p of obj ("" when absent).
func field(obj any, p string) string {
	v := obj
	for _, k := range strings.Split(p, ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i >= len(x) {
				return ""
			}
			v = x[i]
		default:
			return ""
		}
	}
	if v == nil {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}
