package render

import (
	"bytes"
	"fmt"

	yaml "go.yaml.in/yaml/v3"
	sigsyaml "sigs.k8s.io/yaml"
)

// maxExpandedNodes bounds alias expansion. The YAML decoder already refuses alias bombs; this is the
// renderer's own cap, far above any real manifest.
const maxExpandedNodes = 1 << 20

// jsonOf returns what Kubernetes clients see in a document: kubectl and Helm read YAML with
// sigs.k8s.io/yaml (YAML 1.1 scalars: yes/no/on/off are booleans), so so does the renderer, and the
// renderer's output is checked with the same reader. It encodes as the output is encoded (indent 2):
// at its default indent of 4, yaml.v3 writes a block scalar that starts with an empty line, in a
// sequence, with an indentation indicator (`- |4`) that go-yaml v2 reads as a syntax error.
func jsonOf(doc *yaml.Node) ([]byte, error) {
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(outputIndent)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return sigsyaml.YAMLToJSON(buf.Bytes())
}

// needsExpansion reports whether n uses aliases or merge keys, which make one YAML node stand for
// several places: rewriting such a node in place would change places the renderer never meant to.
func needsExpansion(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode {
		return true
	}
	for i, c := range n.Content {
		if n.Kind == yaml.MappingNode && i%2 == 0 && isMergeKey(c) {
			return true
		}
		if needsExpansion(c) {
			return true
		}
	}
	return false
}

func isMergeKey(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Value == "<<" && n.ShortTag() == "!!merge"
}

// expand returns a copy of n with every alias replaced by a copy of its target and every merge key
// replaced by the keys it merges (explicit keys win, then earlier merged mappings), so each node of
// the copy appears in exactly one place. The caller checks the copy means the same as the original.
func expand(n *yaml.Node, budget *int) (*yaml.Node, error) {
	*budget--
	if *budget < 0 {
		return nil, fmt.Errorf("more than %d nodes once YAML aliases are expanded", maxExpandedNodes)
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			return nil, fmt.Errorf("alias *%s has no target", n.Value)
		}
		return expand(n.Alias, budget)
	}
	c := *n
	c.Anchor = ""
	c.Alias = nil
	c.Content = nil
	if n.Kind != yaml.MappingNode {
		for _, child := range n.Content {
			e, err := expand(child, budget)
			if err != nil {
				return nil, err
			}
			c.Content = append(c.Content, e)
		}
		return &c, nil
	}
	if len(n.Content)%2 != 0 {
		return nil, fmt.Errorf("line %d: mapping has a key without a value", n.Line)
	}
	pairs := make([][2]*yaml.Node, 0, len(n.Content)/2)
	explicit := map[string]bool{}
	for i := 0; i < len(n.Content); i += 2 {
		k, err := expand(n.Content[i], budget)
		if err != nil {
			return nil, err
		}
		if !isMergeKey(k) && k.Kind == yaml.ScalarNode {
			explicit[k.Value] = true
		}
		pairs = append(pairs, [2]*yaml.Node{k, n.Content[i+1]})
	}
	merged := map[string]bool{}
	for _, p := range pairs {
		if !isMergeKey(p[0]) {
			v, err := expand(p[1], budget)
			if err != nil {
				return nil, err
			}
			c.Content = append(c.Content, p[0], v)
			continue
		}
		v, err := expand(p[1], budget)
		if err != nil {
			return nil, err
		}
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, m := range sources {
			if m.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("line %d: merge key (<<) value is not a mapping", p[0].Line)
			}
			for j := 0; j+1 < len(m.Content); j += 2 {
				mk := m.Content[j]
				if mk.Kind == yaml.ScalarNode {
					if explicit[mk.Value] || merged[mk.Value] {
						continue
					}
					merged[mk.Value] = true
				}
				c.Content = append(c.Content, mk, m.Content[j+1])
			}
		}
	}
	return &c, nil
}

// lookup returns the value of key in mapping m, or nil when absent.
func lookup(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i]
		if k.Kind == yaml.ScalarNode && k.Value == key && k.ShortTag() == "!!str" {
			return m.Content[i+1]
		}
	}
	return nil
}

// at walks a path of mapping keys and sequence indexes.
func at(n *yaml.Node, path []any) (*yaml.Node, error) {
	for i, p := range path {
		var next *yaml.Node
		switch p := p.(type) {
		case string:
			next = lookup(n, p)
		case int:
			if n.Kind == yaml.SequenceNode && p >= 0 && p < len(n.Content) {
				next = n.Content[p]
			}
		}
		if next == nil {
			return nil, fmt.Errorf("%w: %s not found in the YAML", ErrUnsafe, pathString(path[:i+1]))
		}
		n = next
	}
	return n, nil
}

// set writes value (a string or a bool) at path, creating mappings for missing keys on the way, so
// that labels and annotations can be added to objects that have none.
func set(n *yaml.Node, path []any, value any) error {
	parent := n
	for i, p := range path[:len(path)-1] {
		key, ok := p.(string)
		if !ok {
			next, err := at(parent, path[i:i+1])
			if err != nil {
				return err
			}
			parent = next
			continue
		}
		next := lookup(parent, key)
		switch {
		case next == nil:
			if parent.Kind != yaml.MappingNode {
				return fmt.Errorf("%w: %s is not a mapping", ErrUnsafe, pathString(path[:i]))
			}
			next = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			parent.Content = append(parent.Content, strNode(key), next)
		case isNull(next):
			*next = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", LineComment: next.LineComment}
		}
		parent = next
	}
	key, ok := path[len(path)-1].(string)
	if !ok || parent.Kind != yaml.MappingNode {
		return fmt.Errorf("%w: %s is not a mapping key", ErrUnsafe, pathString(path))
	}
	old := lookup(parent, key)
	if old == nil {
		parent.Content = append(parent.Content, strNode(key), valueNode(value))
		return nil
	}
	if old.Kind != yaml.ScalarNode {
		return fmt.Errorf("%w: %s is not a scalar", ErrUnsafe, pathString(path))
	}
	nv := valueNode(value)
	// Keep the author's quoting and comments: only the value changes.
	if old.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) != 0 && nv.Tag == "!!str" {
		nv.Style = old.Style &^ yaml.TaggedStyle
	}
	old.Kind, old.Tag, old.Value, old.Style = nv.Kind, nv.Tag, nv.Value, nv.Style
	return nil
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func valueNode(v any) *yaml.Node {
	switch v := v.(type) {
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: fmt.Sprint(v)}
	case string:
		return strNode(v)
	}
	panic(fmt.Sprintf("render: unsupported value %T", v))
}

// strNode returns a string scalar that every Kubernetes client reads back as that same string: plain
// when both YAML 1.2 (yaml.v3) and YAML 1.1 (sigs.k8s.io/yaml) agree it is a string, quoted otherwise
// (a name like "on" or "1e-0123456789" would be read as a boolean or a number).
func strNode(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if !plainIsString(s) {
		n.Style = yaml.DoubleQuotedStyle
	}
	return n
}

func plainIsString(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '/' || r == '_') {
			return false
		}
	}
	doc := []byte("k: " + s + "\n")
	var v3 map[string]any
	if err := yaml.Unmarshal(doc, &v3); err != nil || v3["k"] != s {
		return false
	}
	var v1 map[string]any
	if err := sigsyaml.Unmarshal(doc, &v1); err != nil || v1["k"] != s {
		return false
	}
	return true
}

// pathString prints a path the way kubectl explain would: spec.template.spec.volumes[0].name.
func pathString(path []any) string {
	var b bytes.Buffer
	for _, p := range path {
		switch p := p.(type) {
		case int:
			fmt.Fprintf(&b, "[%d]", p)
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			fmt.Fprint(&b, p)
		}
	}
	return b.String()
}
