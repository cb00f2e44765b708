package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// document is one YAML document of the input. The node tree is what gets written back, so whatever
// the renderer does not change keeps its key order, quoting and most comments; the JSON is what
// Kubernetes clients read from it, and is what the renderer reasons about.
type document struct {
	source  string
	index   int // 1-based, as users count documents in `helm template` output
	root    *yaml.Node
	json    []byte
	objects []*object
	changes []change
}

// object is a Kubernetes object: a whole document, or an item of a List.
type object struct {
	doc   *document
	items []int // 1-based item indexes, one per enclosing List
	path  []any // from the document's top node to this object
	line  int

	apiVersion   string
	kind         string
	name         string
	generateName string
	namespace    string
	labels       map[string]any
	annotations  map[string]any
	raw          json.RawMessage
}

func (o *object) String() string {
	name := o.name
	switch {
	case name == "" && o.generateName == "":
		return o.kind
	case name == "":
		name = o.generateName + "*"
	}
	if o.namespace != "" {
		return fmt.Sprintf("%s %s/%s", o.kind, o.namespace, name)
	}
	return fmt.Sprintf("%s %s", o.kind, name)
}

func (o *object) errorf(sentinel error, format string, args ...any) error {
	return &DocError{Source: o.doc.source, Doc: o.doc.index, Items: o.items, Line: o.line, Object: o.String(),
		Err: kindError(sentinel, format, args...)}
}

// header is the part of every object the renderer needs to classify it.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name         string         `json:"name"`
		GenerateName string         `json:"generateName"`
		Namespace    string         `json:"namespace"`
		Labels       map[string]any `json:"labels"`
		Annotations  map[string]any `json:"annotations"`
	} `json:"metadata"`
}

// parseStream reads every document of r. The first problem stops it: a half-understood input must
// not be half rendered.
func parseStream(source string, r io.Reader) ([]*document, error) {
	dec := yaml.NewDecoder(r)
	var docs []*document
	for i := 1; ; i++ {
		var root yaml.Node
		if err := dec.Decode(&root); errors.Is(err, io.EOF) {
			return docs, nil
		} else if err != nil {
			return nil, &DocError{Source: source, Doc: i, Err: fmt.Errorf("%w: %w", ErrInvalidYAML, err)}
		}
		d := &document{source: source, index: i, root: &root}
		if err := d.load(); err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
}

func (d *document) errorf(line int, sentinel error, format string, args ...any) error {
	return &DocError{Source: d.source, Doc: d.index, Line: line, Err: kindError(sentinel, format, args...)}
}

// top is the document's single top-level node.
func (d *document) top() *yaml.Node {
	if d.root.Kind == yaml.DocumentNode && len(d.root.Content) == 1 {
		return d.root.Content[0]
	}
	return d.root
}

func (d *document) empty() bool {
	t := d.top()
	return t.Kind == yaml.DocumentNode || isNull(t)
}

func (d *document) load() error {
	top := d.top()
	// yaml.v3 refuses duplicate keys and self-referencing or exploding aliases only when decoding
	// values, not when building nodes; kubectl refuses them too.
	var v any
	if err := d.root.Decode(&v); err != nil {
		return d.errorf(top.Line, ErrInvalidYAML, "%w", err)
	}
	j, err := jsonOf(d.root)
	if err != nil {
		return d.errorf(top.Line, ErrInvalidYAML, "not readable as Kubernetes reads YAML: %w", err)
	}
	d.json = j
	if d.empty() {
		return nil
	}
	if top.Kind != yaml.MappingNode {
		return d.errorf(top.Line, ErrNotObject, "a document must be a mapping with apiVersion, kind and metadata")
	}
	return d.collect(j, nil, nil)
}

// collect adds the object in raw, or the items of a List, at path.
func (d *document) collect(raw json.RawMessage, path []any, items []int) error {
	line := d.top().Line
	if n, err := at(d.top(), path); err == nil {
		line = n.Line
	}
	o := &object{doc: d, items: items, path: path, line: line, raw: raw}
	var h header
	if err := utiljson.Unmarshal(raw, &h); err != nil {
		return o.errorf(ErrNotObject, "apiVersion, kind and metadata do not read as a Kubernetes object: %w", err)
	}
	o.apiVersion, o.kind = h.APIVersion, h.Kind
	o.name, o.generateName, o.namespace = h.Metadata.Name, h.Metadata.GenerateName, h.Metadata.Namespace
	o.labels, o.annotations = h.Metadata.Labels, h.Metadata.Annotations
	if o.kind == "" {
		return o.errorf(ErrNotObject, "no kind")
	}
	if list, err := listItems(o.kind, raw); err != nil {
		return o.errorf(ErrNotObject, "%w", err)
	} else if list != nil {
		for i, it := range *list {
			itemPath := append(append([]any{}, path...), "items", i)
			if err := d.collect(it, itemPath, append(append([]int{}, items...), i+1)); err != nil {
				return err
			}
		}
		return nil
	}
	if o.name == "" && o.generateName == "" {
		return o.errorf(ErrNotObject, "no metadata.name")
	}
	d.objects = append(d.objects, o)
	return nil
}

// listItems returns the items of a List (kind List, or any *List kind that has items, like
// ConfigMapList), or nil when the object is not a list.
func listItems(kind string, raw json.RawMessage) (*[]json.RawMessage, error) {
	if !strings.HasSuffix(kind, "List") {
		return nil, nil
	}
	var fields map[string]json.RawMessage
	if err := utiljson.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	itemsRaw, ok := fields["items"]
	if !ok && kind != "List" {
		return nil, nil
	}
	items := []json.RawMessage{}
	if ok {
		if err := utiljson.Unmarshal(itemsRaw, &items); err != nil {
			return nil, fmt.Errorf("items of a %s must be a list of objects: %w", kind, err)
		}
	}
	return &items, nil
}

// jsonAt returns the value at path in a JSON object, or nil when a key along the way is absent or null.
func jsonAt(raw json.RawMessage, path []any) (json.RawMessage, error) {
	for i, p := range path {
		if isJSONNull(raw) {
			return nil, nil
		}
		key, ok := p.(string)
		if !ok {
			return nil, fmt.Errorf("jsonAt: index in path %s", pathString(path))
		}
		var m map[string]json.RawMessage
		if err := utiljson.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", pathString(path[:i]), err)
		}
		raw = m[key]
	}
	if isJSONNull(raw) {
		return nil, nil
	}
	return raw, nil
}

func isJSONNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
