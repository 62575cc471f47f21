// This file holds the translation between kplane's protobuf of an object
// and Kubernetes' where the two differ on the wire though the field
// numbers agree: a Quantity (a string in kplane, a message holding the
// string in Kubernetes), an IntOrString (Kubernetes writes its type as
// field 1), and a zero Time (Kubernetes writes an empty message, which
// protobuf-go reads as the epoch). Which fields need it is found once per
// kind by walking kplane's message descriptors beside client-go's Go types
// (their protobuf struct tags give the field numbers).

package apiserver

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
)

// wireFix is what a field needs between the two encodings.
type wireFix uint8

const (
	fixNested      wireFix = iota // a message (or map of messages) with fixes inside
	fixQuantity                   // string ↔ Quantity{1: string}
	fixQuantityMap                // map<string, string> ↔ map<string, Quantity>
	fixIntOrString                // {2|3} ↔ {1: type, 2: intVal, 3: strVal}
	fixTime                       // an empty Timestamp from Kubernetes is unset
)

// wirePlan is what the fields of one message need; nil: nothing.
type wirePlan struct {
	fields map[protowire.Number]wireField
}

type wireField struct {
	fix wireFix
	sub *wirePlan // fixNested: the message's (a map's value's) plan
	// mapValue: the field is a map whose values sub describes.
	mapValue bool
}

// wirePlans caches the plan of each stored resource's message (by
// resource; a nil *wirePlan: kplane's bytes are Kubernetes').
type wirePlans struct {
	plans sync.Map
}

// planFor is the plan of r's objects (nil: kplane's bytes are
// Kubernetes').
func (w *wirePlans) planFor(r *resourceInfo) *wirePlan {
	st := r.storedAs()
	if p, ok := w.plans.Load(st); ok {
		return p.(*wirePlan)
	}
	var p *wirePlan
	if obj, err := scheme.Scheme.New(schema.GroupVersionKind{Group: st.Group, Version: st.Version, Kind: st.Kind}); err == nil {
		p = buildWirePlan(st.New().ProtoReflect().Descriptor(), reflect.TypeOf(obj).Elem(), map[protoreflect.FullName]*wirePlan{})
	}
	w.plans.Store(st, p)
	return p
}

// buildWirePlan walks md beside Kubernetes' struct t. seen holds the plans
// being built (recursive types).
func buildWirePlan(md protoreflect.MessageDescriptor, t reflect.Type, seen map[protoreflect.FullName]*wirePlan) *wirePlan {
	if p, ok := seen[md.FullName()]; ok {
		return p
	}
	quantityType, intOrStringType := reflect.TypeOf(resource.Quantity{}), reflect.TypeOf(intstr.IntOrString{})
	p := &wirePlan{fields: map[protowire.Number]wireField{}}
	seen[md.FullName()] = p
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("protobuf")
		parts := strings.Split(tag, ",")
		if len(parts) < 2 {
			continue
		}
		n, err := strconv.Atoi(parts[1])
		if err != nil {
			continue
		}
		fd := md.Fields().ByNumber(protowire.Number(n))
		if fd == nil {
			continue
		}
		ft := sf.Type
		for ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8 {
			ft = ft.Elem()
		}
		switch {
		case ft == quantityType && fd.Kind() == protoreflect.StringKind:
			p.fields[fd.Number()] = wireField{fix: fixQuantity}
		case ft.Kind() == reflect.Map && ft.Elem() == quantityType && fd.IsMap() && fd.MapValue().Kind() == protoreflect.StringKind:
			p.fields[fd.Number()] = wireField{fix: fixQuantityMap}
		case ft == intOrStringType && fd.Message() != nil && fd.Message().FullName() == intOrStringName:
			p.fields[fd.Number()] = wireField{fix: fixIntOrString}
		case fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Timestamp":
			p.fields[fd.Number()] = wireField{fix: fixTime}
		case ft.Kind() == reflect.Map && fd.IsMap() && fd.MapValue().Message() != nil:
			vt := ft.Elem()
			for vt.Kind() == reflect.Pointer {
				vt = vt.Elem()
			}
			if vt.Kind() == reflect.Struct {
				if sub := buildWirePlan(fd.MapValue().Message(), vt, seen); sub != nil {
					p.fields[fd.Number()] = wireField{fix: fixNested, sub: sub, mapValue: true}
				}
			}
		case ft.Kind() == reflect.Struct && fd.Message() != nil && !fd.IsMap():
			if sub := buildWirePlan(fd.Message(), ft, seen); sub != nil {
				p.fields[fd.Number()] = wireField{fix: fixNested, sub: sub}
			}
		}
	}
	if len(p.fields) == 0 {
		// Recursive references to p already taken stay harmless: an
		// empty plan copies every field.
		seen[md.FullName()] = nil
		return nil
	}
	return p
}

// intOrStringName is kplane's IntOrString message.
const intOrStringName protoreflect.FullName = "kplane.meta.v1.IntOrString"

// transcode appends src (one message's fields) to dst in the other
// encoding: Kubernetes' if toKube, else kplane's.
func (p *wirePlan) transcode(dst, src []byte, toKube bool) ([]byte, error) {
	for len(src) > 0 {
		num, typ, l := protowire.ConsumeTag(src)
		if l < 0 {
			return nil, protowire.ParseError(l)
		}
		f, ok := p.fields[num]
		if !ok || typ != protowire.BytesType {
			m := protowire.ConsumeFieldValue(num, typ, src[l:])
			if m < 0 {
				return nil, protowire.ParseError(m)
			}
			dst = append(dst, src[:l+m]...)
			src = src[l+m:]
			continue
		}
		v, m := protowire.ConsumeBytes(src[l:])
		if m < 0 {
			return nil, protowire.ParseError(m)
		}
		src = src[l+m:]
		var err error
		if dst, err = f.transcode(dst, num, v, toKube); err != nil {
			return nil, fmt.Errorf("field %d: %w", num, err)
		}
	}
	return dst, nil
}

// transcode appends field num, whose value is v, in the other encoding.
func (f wireField) transcode(dst []byte, num protowire.Number, v []byte, toKube bool) ([]byte, error) {
	switch f.fix {
	case fixTime:
		if !toKube && len(v) == 0 {
			return dst, nil // Kubernetes' zero Time: unset
		}
	case fixQuantity:
		q, err := quantityValue(v, toKube)
		if err != nil {
			return nil, err
		}
		return appendField(dst, num, q), nil
	case fixIntOrString:
		ios, err := intOrStringValue(v, toKube)
		if err != nil {
			return nil, err
		}
		return appendField(dst, num, ios), nil
	case fixQuantityMap, fixNested:
		var out []byte
		var err error
		switch {
		case f.fix == fixQuantityMap:
			out, err = mapEntry(v, func(val []byte) ([]byte, error) { return quantityValue(val, toKube) })
		case f.mapValue:
			out, err = mapEntry(v, func(val []byte) ([]byte, error) { return f.sub.transcode(nil, val, toKube) })
		default:
			out, err = f.sub.transcode(nil, v, toKube)
		}
		if err != nil {
			return nil, err
		}
		return appendField(dst, num, out), nil
	}
	return appendField(dst, num, v), nil
}

func appendField(dst []byte, num protowire.Number, v []byte) []byte {
	dst = protowire.AppendTag(dst, num, protowire.BytesType)
	return protowire.AppendBytes(dst, v)
}

// quantityValue turns a Quantity's string into Kubernetes' Quantity
// message (toKube) or back.
func quantityValue(v []byte, toKube bool) ([]byte, error) {
	if toKube {
		return protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), string(v)), nil
	}
	var s []byte
	err := eachField(v, func(num protowire.Number, typ protowire.Type, b []byte, _ uint64) {
		if num == 1 && typ == protowire.BytesType {
			s = b
		}
	})
	return s, err
}

// intOrStringValue turns kplane's IntOrString (int_val = 2 | str_val = 3)
// into Kubernetes' (type = 1, intVal = 2, strVal = 3, all written) or back.
func intOrStringValue(v []byte, toKube bool) ([]byte, error) {
	var typ uint64
	var iv uint64
	var sv []byte
	hasStr := false
	err := eachField(v, func(num protowire.Number, wt protowire.Type, b []byte, x uint64) {
		switch {
		case num == 1 && wt == protowire.VarintType:
			typ = x
		case num == 2 && wt == protowire.VarintType:
			iv, hasStr = x, false
		case num == 3 && wt == protowire.BytesType:
			sv, hasStr = b, true
		}
	})
	if err != nil {
		return nil, err
	}
	var out []byte
	if toKube {
		if hasStr {
			typ = uint64(intstr.String)
		} else {
			typ, sv = uint64(intstr.Int), nil
		}
		out = protowire.AppendVarint(protowire.AppendTag(out, 1, protowire.VarintType), typ)
		out = protowire.AppendVarint(protowire.AppendTag(out, 2, protowire.VarintType), iv)
		return protowire.AppendBytes(protowire.AppendTag(out, 3, protowire.BytesType), sv), nil
	}
	if typ == uint64(intstr.String) {
		return protowire.AppendBytes(protowire.AppendTag(out, 3, protowire.BytesType), sv), nil
	}
	return protowire.AppendVarint(protowire.AppendTag(out, 2, protowire.VarintType), iv), nil
}

// mapEntry rewrites a map entry's value (field 2) with fn.
func mapEntry(v []byte, fn func([]byte) ([]byte, error)) ([]byte, error) {
	var key, val []byte
	var hasKey bool
	err := eachField(v, func(num protowire.Number, wt protowire.Type, b []byte, _ uint64) {
		switch {
		case num == 1 && wt == protowire.BytesType:
			key, hasKey = b, true
		case num == 2 && wt == protowire.BytesType:
			val = b
		}
	})
	if err != nil {
		return nil, err
	}
	nv, err := fn(val)
	if err != nil {
		return nil, err
	}
	var out []byte
	if hasKey {
		out = appendField(out, 1, key)
	}
	return appendField(out, 2, nv), nil
}

// eachField calls fn for each field of a message: b is a bytes field's
// value, x a varint's.
func eachField(v []byte, fn func(num protowire.Number, typ protowire.Type, b []byte, x uint64)) error {
	for len(v) > 0 {
		num, typ, l := protowire.ConsumeTag(v)
		if l < 0 {
			return protowire.ParseError(l)
		}
		v = v[l:]
		switch typ {
		case protowire.BytesType:
			b, m := protowire.ConsumeBytes(v)
			if m < 0 {
				return protowire.ParseError(m)
			}
			fn(num, typ, b, 0)
			v = v[m:]
		case protowire.VarintType:
			x, m := protowire.ConsumeVarint(v)
			if m < 0 {
				return protowire.ParseError(m)
			}
			fn(num, typ, nil, x)
			v = v[m:]
		default:
			m := protowire.ConsumeFieldValue(num, typ, v)
			if m < 0 {
				return protowire.ParseError(m)
			}
			v = v[m:]
		}
	}
	return nil
}
