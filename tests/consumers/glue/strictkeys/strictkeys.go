// Package strictkeys finds the keys of a decoded JSON document that the Go type it is decoded into does not
// declare. The consumers' own decoders ignore such keys: NVIDIA's device plugin reads its sharing blocks
// through custom UnmarshalJSON methods that look up only the keys they know (k8s-device-plugin
// api/config/v1/replicas.go, every release from v0.12.0), so even a strict encoding/json decoder, which does
// not reach inside a custom unmarshaller, lets a misspelt key inside sharing.timeSlicing through. Walking the
// document beside the type's json tags catches those keys too.
//
// It depends on the standard library only, so a harness that uses it keeps the module versions its consumer
// release was built with.
package strictkeys

import (
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Unknown returns the path of every object key in doc (as encoding/json decodes into interface{}) that no
// field of t declares, exactly as spelt (a case-insensitive match, which encoding/json would accept for a
// plain struct, still counts as unknown: a compiled config spells every key as the consumer does). Values
// that are not objects where t is a struct (a custom unmarshaller's other forms: "all", a count, a list)
// are not descended into.
func Unknown(doc interface{}, t reflect.Type) []string {
	var found []string
	walk(doc, t, "", &found)
	sort.Strings(found)
	return found
}

func walk(doc interface{}, t reflect.Type, path string, found *[]string) {
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	switch value := doc.(type) {
	case map[string]interface{}:
		switch t.Kind() {
		case reflect.Struct:
			fields := map[string]reflect.Type{}
			collect(t, fields)
			for key, item := range value {
				field, ok := fields[key]
				if !ok {
					*found = append(*found, join(path, key))
					continue
				}
				walk(item, field, join(path, key), found)
			}
		case reflect.Map:
			for key, item := range value {
				walk(item, t.Elem(), join(path, key), found)
			}
		}
	case []interface{}:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, item := range value {
				walk(item, t.Elem(), path+"["+strconv.Itoa(i)+"]", found)
			}
		}
	}
}

// collect maps each JSON key of struct t to its field's type, flattening untagged embedded structs as
// encoding/json does (the plugin's Flags embeds CommandLineFlags).
func collect(t reflect.Type, fields map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name := strings.Split(tag, ",")[0]
		if f.Anonymous && name == "" {
			embedded := f.Type
			for embedded.Kind() == reflect.Ptr {
				embedded = embedded.Elem()
			}
			if embedded.Kind() == reflect.Struct {
				collect(embedded, fields)
				continue
			}
		}
		if f.PkgPath != "" { // unexported: encoding/json never sets it
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
