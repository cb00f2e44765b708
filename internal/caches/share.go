package caches

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// sharing makes the objects of one set of caches share what they have in common instead of keeping
// each the copy its decoding made: a Pod reads the config of its ReplicaSet's template and names that
// ReplicaSet as controller, a ReplicaSet the same of its Deployment, and nearly every opted-in config
// object has the same labels and finalizer. With 150,000 Pods, each copy of a few hundred bytes is
// tens of MiB. nil shares nothing (Reduce, tests).
//
// Shared values are never modified (cached objects are never modified anyway).
type sharing struct {
	// owner returns the cached User of a controller (nil when not cached, e.g. not yet at start).
	owner      func(kind Kind, namespace, name string) *User
	labels     *table[map[string]string]
	finalizers *table[[]string]
	yes, no    *bool
}

func newSharing(owner func(kind Kind, namespace, name string) *User) *sharing {
	yes, no := true, false
	return &sharing{owner: owner, labels: &table[map[string]string]{m: map[string]map[string]string{}},
		finalizers: &table[[]string]{m: map[string][]string{}}, yes: &yes, no: &no}
}

// controller fills u's namespace, owner and references from its controller's cached User where they
// are the same (the references of a pod not pinned are its revision's template's): pointers into
// what the controller already holds. Otherwise u keeps copies of its own.
func (s *sharing) controller(u *User, ref *metav1.OwnerReference, used []refs.Ref) {
	u.Refs = used
	if ref == nil {
		return
	}
	if s != nil && s.owner != nil {
		if o := s.owner(Kind(ref.Kind), u.Namespace, ref.Name); o != nil && o.UID == ref.UID && o.self != nil {
			u.Namespace, u.Owner = o.Namespace, o.self
			if slices.Equal(o.Refs, used) {
				u.Refs = o.Refs
			}
			return
		}
	}
	u.Owner = &metav1.OwnerReference{APIVersion: unique.Make(ref.APIVersion).Value(), Kind: unique.Make(ref.Kind).Value(),
		Name: ref.Name, UID: ref.UID, Controller: s.flag(ref.Controller)}
}

// flag shares the pointer to true or false (nil stays nil).
func (s *sharing) flag(b *bool) *bool {
	switch {
	case b == nil:
		return nil
	case s == nil:
		v := *b
		return &v
	case *b:
		return s.yes
	}
	return s.no
}

// tableMax bounds a table: its values are never dropped, and what they hold comes from users.
const tableMax = 64

// table hands out one copy of the small values that nearly every cached config object repeats: the
// label map {configmap-attacher.io/revisioned: "true"}, the finalizer list [our finalizer]. A Go map
// of one entry costs ~300 bytes. A table keeps its values for good, so it holds at most tableMax of
// them and hands the rest back unshared.
type table[V any] struct {
	mu sync.Mutex
	m  map[string]V
}

func (t *table[V]) get(key string, v V) V {
	t.mu.Lock()
	defer t.mu.Unlock()
	if shared, ok := t.m[key]; ok {
		return shared
	}
	if len(t.m) < tableMax {
		t.m[key] = v
	}
	return v
}

// configMeta makes a config object's trimmed metadata share what it has in common with the others:
// namespace, kind, label map, finalizer list, the kind and flags of its owner references. m is the
// object just decoded, which nothing else holds yet.
func (s *sharing) configMeta(m *metav1.PartialObjectMetadata) {
	m.APIVersion, m.Kind = unique.Make(m.APIVersion).Value(), unique.Make(m.Kind).Value()
	m.Namespace = unique.Make(m.Namespace).Value()
	if len(m.Labels) > 0 {
		var b strings.Builder
		for _, k := range slices.Sorted(maps.Keys(m.Labels)) {
			b.WriteString(k)
			b.WriteByte(0)
			b.WriteString(m.Labels[k])
			b.WriteByte(0)
		}
		m.Labels = s.labels.get(b.String(), m.Labels)
	}
	if len(m.Finalizers) > 0 {
		m.Finalizers = s.finalizers.get(strings.Join(m.Finalizers, "\x00"), m.Finalizers)
	}
	for i := range m.OwnerReferences {
		o := &m.OwnerReferences[i]
		o.APIVersion, o.Kind = unique.Make(o.APIVersion).Value(), unique.Make(o.Kind).Value()
		o.Controller, o.BlockOwnerDeletion = s.flag(o.Controller), s.flag(o.BlockOwnerDeletion)
	}
}

// trueFlag is the shared pointer to true.
func (s *sharing) trueFlag() *bool {
	if s == nil {
		t := true
		return &t
	}
	return s.yes
}
