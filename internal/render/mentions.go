package render

import (
	"maps"
	"slices"
	"strings"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Names also travel inside strings the reference table cannot rewrite: a container argument
// (`--configmap=$(POD_NAMESPACE)/ingress-nginx-controller`), an environment variable's value, a
// ConfigMap value naming another object (`add-headers: ns/custom-headers`). Renaming such an object
// would leave that string naming the old one, so the renderer refuses, naming the field. It looks only
// where names are passed in practice, and matches a whole name (after "=", "/" or a space, or the
// whole value), so an object named "config" is not found inside "configuration".

// mention is a string field that names an object.
type mention struct {
	path []any
	name string
}

// mentions lists, for the names given, the string fields of o that name one: in its pod specs the
// containers' (and initContainers') command, args and env values; in a ConfigMap its one-line data
// values of the form namespace/name.
func mentions(o *object, names map[string]bool) []mention {
	var obj map[string]any
	if err := utiljson.Unmarshal(o.raw, &obj); err != nil {
		return nil
	}
	sorted := make([]string, 0, len(names)) // the first mention reported must not depend on map order
	for n := range names {
		sorted = append(sorted, n)
	}
	slices.Sort(sorted)
	var out []mention
	check := func(v any, path []any) {
		s, ok := v.(string)
		if !ok {
			return
		}
		for _, name := range sorted {
			if mentionsName(s, name) {
				out = append(out, mention{path: path, name: name})
			}
		}
	}
	// In ConfigMap data, objects are named namespace-qualified (ingress-nginx's add-headers: ns/name):
	// a bare value is as likely a word as a name.
	checkQualified := func(v any, path []any) {
		if s, ok := v.(string); ok {
			for _, name := range sorted {
				if i := strings.LastIndexByte(s, '/'); i > 0 && s[i+1:] == name {
					out = append(out, mention{path: path, name: name})
				}
			}
		}
	}
	for _, p := range refs.PodSpecPaths(o.apiVersion, o.kind, obj) {
		spec, _ := get(obj, p).(map[string]any)
		for _, field := range []string{"initContainers", "containers"} {
			for i, c := range asList(spec[field]) {
				cm, _ := c.(map[string]any)
				for _, list := range []string{"command", "args"} {
					for j, a := range asList(cm[list]) {
						check(a, append(append([]any{}, p...), field, i, list, j))
					}
				}
				for j, e := range asList(cm["env"]) {
					em, _ := e.(map[string]any)
					check(em["value"], append(append([]any{}, p...), field, i, "env", j, "value"))
				}
			}
		}
	}
	if o.apiVersion == "v1" && o.kind == "ConfigMap" {
		data, _ := obj["data"].(map[string]any)
		for _, k := range slices.Sorted(maps.Keys(data)) {
			if s, ok := data[k].(string); ok && !strings.Contains(s, "\n") { // a value, not a file
				checkQualified(s, []any{"data", k})
			}
		}
	}
	return out
}

// mentionsName reports whether s names name as a whole: the whole string, or a token after "=", "/",
// "," or a space and before the end, a ",", a space or "/".
func mentionsName(s, name string) bool {
	for i := 0; ; {
		j := strings.Index(s[i:], name)
		if j < 0 {
			return false
		}
		start, end := i+j, i+j+len(name)
		before := start == 0 || strings.ContainsRune("=/, ", rune(s[start-1]))
		after := end == len(s) || strings.ContainsRune(", /", rune(s[end]))
		if before && after {
			return true
		}
		i = start + 1
	}
}

func get(v any, path []any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			s, _ := v.([]any)
			if k >= len(s) {
				return nil
			}
			v = s[k]
		}
	}
	return v
}

func asList(v any) []any {
	s, _ := v.([]any)
	return s
}
