package doccheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// values are the charts' value schemas (charts/*/values.schema.json).
type values struct {
	charts []*schema
}

// schema is the part of a JSON schema that says which keys exist.
type schema struct {
	Ref                  string             `json:"$ref"`
	Type                 json.RawMessage    `json:"type"`
	Properties           map[string]*schema `json:"properties"`
	AdditionalProperties json.RawMessage    `json:"additionalProperties"`
	Items                *schema            `json:"items"`
	Definitions          map[string]*schema `json:"definitions"`
	Defs                 map[string]*schema `json:"$defs"`
	AnyOf                []*schema          `json:"anyOf"`
	OneOf                []*schema          `json:"oneOf"`
	AllOf                []*schema          `json:"allOf"`
}

func loadValues(root string) (*values, error) {
	files, err := filepath.Glob(filepath.Join(root, "charts", "*", "values.schema.json"))
	if err != nil {
		return nil, err
	}
	v := &values{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var s schema
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		v.charts = append(v.charts, &s)
	}
	return v, nil
}

var indexRE = regexp.MustCompile(`\[[0-9]+\]`)

// segments splits a value path (a.b[0].c) into its keys, an index as "[]".
func segments(key string) []string {
	return strings.Split(indexRE.ReplaceAllString(key, ".[]"), ".")
}

// topLevel reports whether a chart has the path's first key.
func (v *values) topLevel(key string) bool {
	first := segments(key)[0]
	for _, root := range v.charts {
		if _, ok := root.Properties[first]; ok {
			return true
		}
	}
	return false
}

// exists reports whether some chart's schema admits the path.
func (v *values) exists(key string) bool {
	for _, root := range v.charts {
		if root.admits(root, segments(key)) {
			return true
		}
	}
	return false
}

func (s *schema) admits(root *schema, path []string) bool {
	if s == nil {
		return false
	}
	if len(path) == 0 {
		return true
	}
	if s.Ref != "" {
		return root.resolve(s.Ref).admits(root, path)
	}
	for _, alts := range [][]*schema{s.AnyOf, s.OneOf, s.AllOf} {
		for _, a := range alts {
			if a.admits(root, path) {
				return true
			}
		}
	}
	if t := string(s.Type); t != "" && !strings.Contains(t, `"object"`) && !strings.Contains(t, `"array"`) {
		return false // a scalar has no keys
	}
	if path[0] == "[]" {
		if s.Items == nil {
			return true // an array of anything
		}
		return s.Items.admits(root, path[1:])
	}
	if p, ok := s.Properties[path[0]]; ok {
		return p.admits(root, path[1:])
	}
	switch a := strings.TrimSpace(string(s.AdditionalProperties)); {
	case a == "false":
		return false
	case a == "" || a == "true":
		// A map of anything, or an object the schema does not describe key by key.
		return len(s.Properties) == 0 || a == "true"
	default:
		var extra schema
		if err := json.Unmarshal(s.AdditionalProperties, &extra); err != nil {
			return false
		}
		return extra.admits(root, path[1:])
	}
}

func (s *schema) resolve(ref string) *schema {
	for _, prefix := range []string{"#/definitions/", "#/$defs/"} {
		if name, ok := strings.CutPrefix(ref, prefix); ok {
			if d, ok := s.Definitions[name]; ok {
				return d
			}
			return s.Defs[name]
		}
	}
	return nil
}
