package caches

import "sync"

// newReducer is the reducer of one set of caches: it shares identities through ids (nil: none) and
// the label maps and finalizer lists of config objects through its tables; keepLabels and keepReads
// say what else to keep (reducer).
func newReducer(ids *identities, keepLabels, keepReads bool) *reducer {
	return &reducer{ids: ids, keepLabels: keepLabels, keepReads: keepReads, labels: &table[map[string]string]{m: map[string]map[string]string{}},
		finalizers: &table[*[]string]{m: map[string]*[]string{}}}
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
