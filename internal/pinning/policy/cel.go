package policy

import (
	"fmt"
	"strings"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// CEL generated from the Patterns. For each pattern, one list comprehension per list on the way
// (transformList with a filter, flatten() for the nested ones), ending in an expression built from
// the name found and its JSON Pointer:
//
//	volumes.*.projected.sources.*.configMap.name
//
// becomes
//
//	object.spec.?volumes.orValue([]).transformList(i0, v0, has(v0.projected) && has(v0.projected.sources),
//	  v0.projected.sources.transformList(i1, v1, has(v1.configMap) && has(v1.configMap.name) && <cond>,
//	    <emit>)).flatten()
//
// where <emit> sees the name as v1.configMap.name and the pointer as
// '/spec/volumes/' + string(i0) + '/projected/sources/' + string(i1) + '/configMap/name'.

// forEach is the CEL list of emit(name, pointer) over every place p names an object for which
// cond(name) holds.
func forEach(p Pattern, cond, emit func(name, pointer string) string) string {
	groups := [][]string{{}}
	for _, s := range p.Segments {
		if s == Wildcard {
			groups = append(groups, nil)
			continue
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], s)
	}
	// groups[0] leads from spec to the first list, the last one from the last list's element to the name.
	list := "object.spec"
	for _, f := range groups[0] {
		list += ".?" + f
	}
	list += ".orValue([])"
	pointer := "'/spec/" + strings.Join(groups[0], "/") + "/'"
	return level(list, pointer, groups[1:], 0, cond, emit)
}

func level(list, pointer string, groups [][]string, depth int, cond, emit func(name, pointer string) string) string {
	i, v := fmt.Sprintf("i%d", depth), fmt.Sprintf("v%d", depth)
	pointer += " + string(" + i + ")"
	fields := groups[0]
	if len(groups) == 1 { // the element's fields lead to the name
		name := v + "." + strings.Join(fields, ".")
		p := pointer + " + '/" + strings.Join(fields, "/") + "'"
		return fmt.Sprintf("%s.transformList(%s, %s, %s && %s, %s)", list, i, v, hasChain(v, fields), cond(name, p), emit(name, p))
	}
	inner := level(v+"."+strings.Join(fields, "."), pointer+" + '/"+strings.Join(fields, "/")+"/'", groups[1:], depth+1, cond, emit)
	return fmt.Sprintf("%s.transformList(%s, %s, %s, %s).flatten()", list, i, v, hasChain(v, fields), inner)
}

// hasChain is has(v.a) && has(v.a.b) ... for the fields.
func hasChain(v string, fields []string) string {
	parts := make([]string, len(fields))
	for i := range fields {
		parts[i] = "has(" + v + "." + strings.Join(fields[:i+1], ".") + ")"
	}
	return strings.Join(parts, " && ")
}

// mapVariable is the policy variable holding an entry's map for a kind: original name -> snapshot.
func mapVariable(k refs.Kind) string {
	if k == refs.Secret {
		return "variables.secrets"
	}
	return "variables.configMaps"
}

// patchExpression is the JSONPatch mutation: every reference to an object the pod's revision has a
// snapshot of is replaced by the snapshot's name; nothing for a revision without an entry.
func patchExpression(patterns []Pattern) string {
	parts := make([]string, len(patterns))
	for i, p := range patterns {
		m := mapVariable(p.Kind)
		parts[i] = forEach(p,
			func(name, _ string) string { return name + " in " + m },
			func(name, pointer string) string {
				return fmt.Sprintf("JSONPatch{op: 'replace', path: %s, value: %s[%s]}", pointer, m, name)
			})
	}
	return "!variables.hasEntry ? [] :\n" + strings.Join(parts, " +\n")
}

// injectedConfigMaps are the ConfigMaps the API server itself adds to pods (the ServiceAccount
// admission plugin's kube-root-ca.crt, OpenShift's service CA), never a user's config: a pod reading
// only those does not wait for its revision's entry.
var injectedConfigMaps = []string{"kube-root-ca.crt", "openshift-service-ca.crt"}

// readsExpression lists the names of the objects of kind the pod reads, but the injected ConfigMaps.
func readsExpression(patterns []Pattern, kind refs.Kind) string {
	var parts []string
	for _, p := range patterns {
		if p.Kind != kind {
			continue
		}
		parts = append(parts, forEach(p,
			func(name, _ string) string {
				if p.Kind == refs.ConfigMap {
					return "!(" + name + " in " + celStrings(injectedConfigMaps) + ")"
				}
				return "true"
			},
			func(name, _ string) string { return name }))
	}
	return strings.Join(parts, " +\n")
}

// celStrings is a CEL list literal of plain strings (no quotes or backslashes in them).
func celStrings(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = "'" + v + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}
