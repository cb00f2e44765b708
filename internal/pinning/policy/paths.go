package policy

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Wildcard stands for every index of a list in a Pattern.
const Wildcard = "*"

// Pattern is where a pod spec names a config object, every list index a Wildcard: e.g.
// volumes.*.projected.sources.*.configMap.name for ConfigMaps.
type Pattern struct {
	Kind     refs.Kind
	Segments []string
}

func (p Pattern) String() string { return string(p.Kind) + " " + strings.Join(p.Segments, ".") }

// Patterns are the places where a pod spec names a config object its containers read (volumes and
// env: refs.Path.InVolumesOrEnv), as internal/refs' table gives them: the admission policies are
// generated from these, so the webhook and the policy rewrite exactly the same fields. They are found
// by asking refs.Uses about a pod spec that fills every field once (every volume source in a volume of
// its own, since a volume has one source): what the table reports is what it knows. Sorted.
func Patterns() []Pattern {
	seen := map[string]Pattern{}
	for _, u := range refs.Uses(probeSpec()) {
		if !u.Path.InVolumesOrEnv() {
			continue
		}
		p := Pattern{Kind: u.Kind}
		for _, e := range u.Path {
			switch v := e.(type) {
			case int:
				p.Segments = append(p.Segments, Wildcard)
			default:
				p.Segments = append(p.Segments, fmt.Sprint(v))
			}
		}
		seen[p.String()] = p
	}
	out := make([]Pattern, 0, len(seen))
	for _, p := range seen {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Pattern) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// probeSpec is a pod spec naming config everywhere a pod spec can: one volume per volume source,
// each filled in whole, and an init container and a container filled in whole.
func probeSpec() *corev1.PodSpec {
	spec := &corev1.PodSpec{}
	sources := reflect.TypeOf(corev1.VolumeSource{})
	for i := range sources.NumField() {
		v := corev1.Volume{Name: fmt.Sprintf("v%d", i)}
		fill(reflect.ValueOf(&v.VolumeSource).Elem().Field(i), 0)
		spec.Volumes = append(spec.Volumes, v)
	}
	var c corev1.Container
	fill(reflect.ValueOf(&c).Elem(), 0)
	spec.InitContainers = []corev1.Container{c}
	spec.Containers = []corev1.Container{c}
	fill(reflect.ValueOf(&spec.ImagePullSecrets).Elem(), 0)
	return spec
}

// fill sets every settable field below v: strings to a name, pointers and one list element allocated,
// recursively (pod spec types are not recursive; depth bounds it anyway).
func fill(v reflect.Value, depth int) {
	if depth > 16 || !v.CanSet() {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Ptr:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // []byte: no names there
		}
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	}
}
