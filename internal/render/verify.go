package render

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"

	yaml "go.yaml.in/yaml/v3"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// verify re-reads the output as kubectl would and checks that every document means its input plus
// the planned changes and nothing else. It guards against the YAML round trip itself (quoting, tags,
// anchors) as much as against the renderer's own bugs: a wrong manifest is worse than no manifest.
// Empty documents carry no objects and are left out of the comparison.
func verify(out []byte, docs []*document) error {
	var want []*document
	for _, d := range docs {
		if !isJSONNull(d.json) {
			want = append(want, d)
		}
	}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	i := 0
	for n := 1; ; n++ {
		var root yaml.Node
		if err := dec.Decode(&root); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("%w: the output document %d does not parse: %w", ErrUnsafe, n, err)
		}
		var v any
		if err := root.Decode(&v); err != nil {
			return fmt.Errorf("%w: the output document %d does not parse: %w", ErrUnsafe, n, err)
		}
		got, err := jsonOf(&root)
		if err != nil {
			return fmt.Errorf("%w: the output document %d does not read back: %w", ErrUnsafe, n, err)
		}
		if isJSONNull(got) {
			continue
		}
		if i >= len(want) {
			return fmt.Errorf("%w: the output has more documents than the input", ErrUnsafe)
		}
		d := want[i]
		i++
		exp, err := d.expectedJSON()
		if err != nil {
			return d.errorf(0, ErrUnsafe, "%w", err)
		}
		if !jsonEqual(got, exp) {
			return d.errorf(0, ErrUnsafe, "its rewritten YAML would not read back as the intended changes only")
		}
	}
	if i != len(want) {
		return fmt.Errorf("%w: the output has %d documents with objects, the input %d", ErrUnsafe, i, len(want))
	}
	return nil
}

// expectedJSON is the document's input JSON with the planned changes made.
func (d *document) expectedJSON() ([]byte, error) {
	var v any
	if err := utiljson.Unmarshal(d.json, &v); err != nil {
		return nil, err
	}
	for _, c := range d.changes {
		var err error
		if v, err = setJSON(v, c.path, c.value); err != nil {
			return nil, fmt.Errorf("%s: %w", pathString(c.path), err)
		}
	}
	return json.Marshal(v)
}

// setJSON sets path in v to value, creating objects for missing or null keys as set does in YAML.
func setJSON(v any, path []any, value any) (any, error) {
	if len(path) == 0 {
		return value, nil
	}
	switch p := path[0].(type) {
	case string:
		if v == nil {
			v = map[string]any{}
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%q: not an object", p)
		}
		child, err := setJSON(m[p], path[1:], value)
		if err != nil {
			return nil, err
		}
		m[p] = child
		return m, nil
	case int:
		s, ok := v.([]any)
		if !ok || p < 0 || p >= len(s) {
			return nil, fmt.Errorf("[%d]: no such list item", p)
		}
		child, err := setJSON(s[p], path[1:], value)
		if err != nil {
			return nil, err
		}
		s[p] = child
		return s, nil
	}
	return nil, fmt.Errorf("bad path element %v", path[0])
}

func jsonEqual(a, b []byte) bool {
	var va, vb any
	if utiljson.Unmarshal(a, &va) != nil || utiljson.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
