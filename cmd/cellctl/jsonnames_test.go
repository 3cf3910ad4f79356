package main

import (
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/cellstore/cell/drill"
	"github.com/cellstore/cell/internal/buildinfo"
	"github.com/cellstore/cell/locality/sim"
)

// Every JSON output of cellctl names its fields in snake_case: the types
// printed with -w json, walked by reflection, have a json tag on every
// field, without upper-case letters.
func TestJSONFieldNames(t *testing.T) {
	for _, v := range []any{
		kvResult{}, errorResult{}, rangeResult{}, statusResult{}, []memberJSON{}, []regionJSON{},
		meganodesResult{}, checkResult{}, nodeDump{}, meganodeDump{}, benchResult{}, adminResult{},
		&drill.Report{}, table2Result{}, sim.SpikeResult{}, buildinfo.Info{},
	} {
		for _, bad := range untaggedFields(reflect.TypeOf(v), map[reflect.Type]bool{}) {
			t.Errorf("%T: %s", v, bad)
		}
	}
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// untaggedFields lists the fields of t (and of the types it holds) whose
// JSON name is not a snake_case tag.
func untaggedFields(t reflect.Type, seen map[reflect.Type]bool) []string {
	if seen[t] {
		return nil
	}
	seen[t] = true
	if t.Implements(jsonMarshaler) || t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		return nil
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
		return untaggedFields(t.Elem(), seen)
	case reflect.Struct:
	default:
		return nil
	}
	var bad []string
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case name == "" && f.Anonymous:
		case name == "" || strings.ToLower(name) != name:
			bad = append(bad, t.String()+"."+f.Name+" (json "+strings.TrimSpace(f.Tag.Get("json"))+")")
		}
		bad = append(bad, untaggedFields(f.Type, seen)...)
	}
	return bad
}
