// This file holds how a Go field of a Kubernetes type becomes a proto
// field: its proto type and label, the options it carries, and the types
// it leads the generator to visit next.

package main

import (
	"fmt"
	"reflect"
)

// protoRef returns the proto name of struct t as seen from proto package
// dir, recording the import it needs.
func (g *gen) protoRef(from string, t reflect.Type) (string, error) {
	p := g.pkgOf[t.PkgPath()]
	if p == nil {
		return "", fmt.Errorf("%s.%s: Go package %s has no proto package", t.PkgPath(), t.Name(), t.PkgPath())
	}
	if p.key() == from {
		return t.Name(), nil
	}
	g.imports[from][p.importPath()] = true
	return p.name() + "." + t.Name(), nil
}

// fieldType maps Go type t of a field to its proto type, label and options,
// and returns the structs it reaches.
func (g *gen) fieldType(from string, t reflect.Type, where string) (typ, label string, opts []string, next []reflect.Type, err error) {
	ptr := false
	if t.Kind() == reflect.Pointer {
		ptr = true
		t = t.Elem()
	}
	switch t {
	case timeT:
		g.imports[from]["google/protobuf/timestamp.proto"] = true
		return "google.protobuf.Timestamp", "", nil, nil, nil
	case microTimeT:
		g.imports[from]["google/protobuf/timestamp.proto"] = true
		g.useOptions(from)
		return "google.protobuf.Timestamp", "", []string{"(kplane.meta.v1.micro_time) = true"}, nil, nil
	case durationT, quantityT:
		if ptr {
			return "string", "optional", nil, nil, nil
		}
		return "string", "", nil, nil, nil
	case intOrStrT:
		ref := "IntOrString"
		if from != "meta" {
			g.imports[from]["kplane/meta/v1/meta.proto"] = true
			ref = "kplane.meta.v1.IntOrString"
		}
		return ref, "", nil, nil, nil
	case resListT:
		return "map<string, string>", "", nil, nil, nil
	case fieldsV1T, rawExtT, schemaPropsT:
		if err := g.rawMessage(t); err != nil {
			return "", "", nil, nil, err
		}
		ref, err := g.protoRef(from, t)
		return ref, "", nil, nil, err
	}
	switch t.Kind() {
	case reflect.Struct:
		ref, err := g.protoRef(from, t)
		return ref, "", nil, []reflect.Type{t}, err
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes", "", nil, nil, nil
		}
		et, elabel, eopts, enext, err := g.fieldType(from, t.Elem(), where)
		if err != nil {
			return "", "", nil, nil, err
		}
		if elabel != "" || t.Elem().Kind() == reflect.Pointer && t.Elem().Elem().Kind() != reflect.Struct {
			return "", "", nil, nil, fmt.Errorf("%s: unsupported slice of %s", where, t.Elem())
		}
		return et, "repeated", eopts, enext, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return "", "", nil, nil, fmt.Errorf("%s: unsupported map key %s", where, t.Key())
		}
		vt := t.Elem()
		if vt.Kind() == reflect.Slice && vt.Elem().Kind() != reflect.Uint8 {
			// A list as map value: a wrapper message, as Kubernetes' own
			// generated.proto does (authorization's ExtraValue).
			if vt.Name() == "" {
				return "", "", nil, nil, fmt.Errorf("%s: map of unnamed slices", where)
			}
			et, _, _, enext, err := g.fieldType(from, vt.Elem(), where)
			if err != nil {
				return "", "", nil, nil, err
			}
			if !g.seen[vt] {
				g.seen[vt] = true
				p := g.pkgOf[vt.PkgPath()]
				td := g.doc(vt.PkgPath(), vt.Name())
				g.useOptions(p.key())
				g.messages[p.key()] = append(g.messages[p.key()], &message{
					Name: vt.Name(), Doc: td.Doc,
					Raw: "  option (kplane.meta.v1.list_wrapper) = true;\n\n  repeated " + et + " items = 1;\n",
				})
			}
			ref, err := g.protoRef(from, vt)
			return "map<string, " + ref + ">", "", nil, enext, err
		}
		vtyp, vlabel, _, vnext, err := g.fieldType(from, vt, where)
		if err != nil {
			return "", "", nil, nil, err
		}
		if vlabel != "" {
			return "", "", nil, nil, fmt.Errorf("%s: unsupported map value %s", where, vt)
		}
		return "map<string, " + vtyp + ">", "", nil, vnext, nil
	}
	var s string
	switch t.Kind() {
	case reflect.String:
		s = "string"
	case reflect.Bool:
		s = "bool"
	case reflect.Int32:
		s = "int32"
	case reflect.Int64, reflect.Int:
		s = "int64"
	case reflect.Uint32:
		s = "uint32"
	case reflect.Uint64:
		s = "uint64"
	case reflect.Float64:
		s = "double"
	default:
		return "", "", nil, nil, fmt.Errorf("%s: unsupported type %s", where, t)
	}
	if ptr {
		return s, "optional", nil, nil, nil
	}
	return s, "", nil, nil, nil
}

func scalar(typ string) bool {
	switch typ {
	case "string", "bool", "int32", "int64", "uint32", "uint64", "double":
		return true
	}
	return false
}

// rawMessage generates FieldsV1 or RawExtension: Kubernetes' {bytes raw=1},
// whose bytes kubejson writes as embedded JSON.
func (g *gen) rawMessage(t reflect.Type) error {
	if g.seen[t] {
		return nil
	}
	g.seen[t] = true
	p := g.pkgOf[t.PkgPath()]
	if p == nil {
		return fmt.Errorf("%s.%s: no proto package", t.PkgPath(), t.Name())
	}
	td := g.doc(t.PkgPath(), t.Name())
	g.useOptions(p.key())
	g.messages[p.key()] = append(g.messages[p.key()], &message{
		Name: t.Name(), Doc: td.Doc,
		Raw: "  option (kplane.meta.v1.raw_json) = true;\n\n  // raw is the JSON document, written inline in JSON.\n  bytes raw = 1;\n",
	})
	return nil
}
