package caches

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// The caches' own informer: client-go's reflector (cache.New) and a queue (fifo.go) filling a store
// of the caches' own, whose handlers are called as the queue is processed. A SharedIndexInformer keeps,
// besides the objects, a map of every key and a set of keys per namespace and index value: at 150,000
// Pods, with records of 60–100 bytes, that bookkeeping (~110 bytes an object) weighed more than the
// objects. The store groups objects by namespace instead (which is the namespace index), in a slice
// kept sorted by name: ~16 bytes an object.

// Source is what Informer reads: a SharedIndexInformer (the pinning caches, tests) or a storeInformer.
type Source interface {
	GetIndexer() cache.Indexer
	AddEventHandler(cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error)
	HasSynced() bool
}

// storeInformer lists and watches one resource into a store.
type storeInformer struct {
	store *store
	ctl   cache.Controller
	// mu orders the handlers' events: each delta is stored and handed to every handler under it.
	mu       sync.Mutex
	handlers []cache.ResourceEventHandler
	started  bool
}

// newStoreInformer makes the informer of a resource (example its type) listed and watched through lw,
// transform applied to each object before it is queued, and to a watch-list's initial events before
// the reflector sees them (initial.go). The reflector is told no type: it checks each event's type
// against it, and the initial events carry records.
func newStoreInformer(lw cache.ListerWatcher, example runtime.Object, transform cache.TransformFunc, indexers cache.Indexers) *storeInformer {
	i := &storeInformer{store: newStore(indexers)}
	i.ctl = cache.New(&cache.Config{Queue: newFIFO(i.store, transform), ListerWatcher: reducingWatcher{lw: lw, reduce: transform},
		ObjectDescription: fmt.Sprintf("%T", example), Process: i.process})
	return i
}

func (i *storeInformer) Run(stop <-chan struct{}) {
	i.mu.Lock()
	i.started = true
	i.mu.Unlock()
	i.ctl.Run(stop)
}

// runner is an informer the caches start: a SharedIndexInformer or a storeInformer.
type runner interface {
	Source
	Run(stop <-chan struct{})
}

// HasSynced reports whether the first list is stored; an informer of tests, which is never run, has.
func (i *storeInformer) HasSynced() bool { return i.ctl == nil || i.ctl.HasSynced() }

// newTestInformer is an informer that is never run: unit tests fill its store.
func newTestInformer(indexers cache.Indexers) *storeInformer {
	return &storeInformer{store: newStore(indexers)}
}

func (i *storeInformer) GetIndexer() cache.Indexer { return i.store }

// AddEventHandler adds h; one added once the informer runs gets each object stored so far as an add
// first, as a SharedIndexInformer's does.
func (i *storeInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.started {
		for _, obj := range i.store.List() {
			h.OnAdd(obj, true)
		}
	}
	i.handlers = append(i.handlers, h)
	return nil, nil
}

// process stores one queued change and hands it to the handlers, as client-go's informers do.
func (i *storeInformer) process(obj any, initial bool) error {
	deltas, ok := obj.(cache.Deltas)
	if !ok {
		return fmt.Errorf("queued a %T, not Deltas", obj)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, d := range deltas {
		key := keyOf(d.Object)
		switch d.Type {
		case cache.Sync, cache.Replaced, cache.Added, cache.Updated:
			old, existed := i.store.put(key, d.Object)
			for _, h := range i.handlers {
				if existed {
					h.OnUpdate(old, d.Object)
				} else {
					h.OnAdd(d.Object, initial)
				}
			}
		case cache.Deleted:
			i.store.remove(key)
			for _, h := range i.handlers {
				h.OnDelete(d.Object)
			}
		default:
			return fmt.Errorf("unexpected delta %s", d.Type)
		}
	}
	return nil
}

// store holds objects by namespace, each namespace's sorted by name (a map once it holds more than
// bucketMax of them, where a sorted slice would make every insertion long), and the sparse indexes
// (a set of keys for each value: every index but the namespace's is kept by few objects). It is a
// cache.Indexer, which unit tests fill directly.
type store struct {
	mu       sync.RWMutex
	buckets  map[string]*bucket
	indexers cache.Indexers
	indices  map[string]map[string]map[string]struct{} // index name → value → keys
	// values are the index values of each key that has any.
	values map[string]map[string][]string
}

// bucketMax is the size beyond which a namespace's objects are kept in a map.
const bucketMax = 256

type bucket struct {
	sorted []any          // by nameOf
	big    map[string]any // by name, once more than bucketMax
}

func newStore(indexers cache.Indexers) *store {
	s := &store{buckets: map[string]*bucket{}, indexers: cache.Indexers{}, indices: map[string]map[string]map[string]struct{}{},
		values: map[string]map[string][]string{}}
	for name, f := range indexers {
		if name != cache.NamespaceIndex { // the buckets are the namespace index
			s.indexers[name] = f
		}
	}
	return s
}

// nameOf is the name an object is stored under in its namespace's bucket.
func nameOf(obj any) string {
	switch o := obj.(type) {
	case *User:
		return o.Name
	case *metav1.PartialObjectMetadata:
		return o.Name
	case *podStub:
		_, name := splitKey(o.key)
		return name
	case *entry:
		return o.id.name()
	case *configRecord:
		_, name := splitKey(o.key)
		return name
	}
	if m, err := meta.Accessor(obj); err == nil {
		return m.GetName()
	}
	return ""
}

// keyOf is the key of a stored object, or of the object a tombstone holds (its key).
func keyOf(obj any) string {
	switch o := obj.(type) {
	case cache.DeletedFinalStateUnknown:
		return o.Key
	case *podStub:
		return o.key
	case *entry:
		return o.id.key
	case *configRecord:
		return o.key
	}
	k, _ := cache.MetaNamespaceKeyFunc(obj)
	return k
}

func splitStoreKey(key string) (namespace, name string) {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i], key[i+1:]
	}
	return "", key
}

func (b *bucket) get(name string) (any, bool) {
	if b.big != nil {
		obj, ok := b.big[name]
		return obj, ok
	}
	i, found := slices.BinarySearchFunc(b.sorted, name, func(o any, n string) int { return strings.Compare(nameOf(o), n) })
	if !found {
		return nil, false
	}
	return b.sorted[i], true
}

func (b *bucket) put(name string, obj any) (any, bool) {
	if b.big != nil {
		old, ok := b.big[name]
		b.big[name] = obj
		return old, ok
	}
	i, found := slices.BinarySearchFunc(b.sorted, name, func(o any, n string) int { return strings.Compare(nameOf(o), n) })
	if found {
		old := b.sorted[i]
		b.sorted[i] = obj
		return old, true
	}
	if len(b.sorted) >= bucketMax {
		b.big = make(map[string]any, len(b.sorted)+1)
		for _, o := range b.sorted {
			b.big[nameOf(o)] = o
		}
		b.big[name] = obj
		b.sorted = nil
		return nil, false
	}
	b.sorted = slices.Insert(b.sorted, i, obj)
	return nil, false
}

func (b *bucket) remove(name string) (any, bool) {
	if b.big != nil {
		old, ok := b.big[name]
		delete(b.big, name)
		return old, ok
	}
	i, found := slices.BinarySearchFunc(b.sorted, name, func(o any, n string) int { return strings.Compare(nameOf(o), n) })
	if !found {
		return nil, false
	}
	old := b.sorted[i]
	b.sorted = slices.Delete(b.sorted, i, i+1)
	if cap(b.sorted) > 2*len(b.sorted)+8 {
		b.sorted = slices.Clip(slices.Clone(b.sorted))
	}
	return old, true
}

func (b *bucket) len() int {
	if b.big != nil {
		return len(b.big)
	}
	return len(b.sorted)
}

func (b *bucket) each(fn func(any)) {
	if b.big != nil {
		for _, o := range b.big {
			fn(o)
		}
		return
	}
	for _, o := range b.sorted {
		fn(o)
	}
}

// put stores obj under key, returning what it replaces.
func (s *store) put(key string, obj any) (any, bool) {
	ns, name := splitStoreKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[ns]
	if !ok {
		b = &bucket{}
		s.buckets[ns] = b
	}
	old, existed := b.put(name, obj)
	s.reindex(key, obj)
	return old, existed
}

// remove deletes what is stored under key.
func (s *store) remove(key string) (any, bool) {
	ns, name := splitStoreKey(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.buckets[ns]
	if !ok {
		return nil, false
	}
	old, existed := b.remove(name)
	if b.len() == 0 {
		delete(s.buckets, ns)
	}
	s.reindex(key, nil)
	return old, existed
}

// reindex sets the index values of key to obj's (nil: none).
func (s *store) reindex(key string, obj any) {
	if len(s.indexers) == 0 {
		return
	}
	for name, vals := range s.values[key] {
		for _, v := range vals {
			keys := s.indices[name][v]
			delete(keys, key)
			if len(keys) == 0 {
				delete(s.indices[name], v)
			}
		}
	}
	delete(s.values, key)
	if obj == nil {
		return
	}
	for name, f := range s.indexers {
		vals, err := f(obj)
		if err != nil || len(vals) == 0 {
			continue
		}
		if s.values[key] == nil {
			s.values[key] = map[string][]string{}
		}
		s.values[key][name] = vals
		if s.indices[name] == nil {
			s.indices[name] = map[string]map[string]struct{}{}
		}
		for _, v := range vals {
			if s.indices[name][v] == nil {
				s.indices[name][v] = map[string]struct{}{}
			}
			s.indices[name][v][key] = struct{}{}
		}
	}
}

func (s *store) getByKey(key string) (any, bool) {
	ns, name := splitStoreKey(key)
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, ok := s.buckets[ns]
	if !ok {
		return nil, false
	}
	return b.get(name)
}

// The cache.Indexer methods.

func (s *store) Add(obj any) error {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	s.put(key, obj)
	return nil
}

func (s *store) Update(obj any) error { return s.Add(obj) }

func (s *store) Delete(obj any) error {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return err
	}
	s.remove(key)
	return nil
}

func (s *store) List() []any {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []any
	for _, b := range s.buckets {
		b.each(func(o any) { out = append(out, o) })
	}
	return out
}

// each calls fn for every stored object under the read lock, with no list made of them: fn must only
// read the object, and must not call the store.
func (s *store) each(fn func(any)) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, b := range s.buckets {
		b.each(fn)
	}
}

func (s *store) ListKeys() []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []string
	for _, b := range s.buckets {
		b.each(func(o any) { out = append(out, keyOf(o)) })
	}
	return out
}

func (s *store) Get(obj any) (any, bool, error) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, err
	}
	item, ok := s.getByKey(key)
	return item, ok, nil
}

func (s *store) GetByKey(key string) (any, bool, error) {
	item, ok := s.getByKey(key)
	return item, ok, nil
}

func (s *store) Replace(list []any, _ string) error {
	s.mu.Lock()
	s.buckets, s.indices, s.values = map[string]*bucket{}, map[string]map[string]map[string]struct{}{}, map[string]map[string][]string{}
	s.mu.Unlock()
	for _, o := range list {
		if err := s.Add(o); err != nil {
			return err
		}
	}
	return nil
}

func (s *store) Resync() error { return nil }

// LastStoreSyncResourceVersion is not kept: nothing waits for the store to hold a version.
func (s *store) LastStoreSyncResourceVersion() string { return "" }

func (s *store) Bookmark(string) {}

func (s *store) Index(indexName string, obj any) ([]any, error) {
	if indexName == cache.NamespaceIndex {
		return s.ByIndex(indexName, keyNamespace(obj))
	}
	f, ok := s.indexers[indexName]
	if !ok {
		return nil, fmt.Errorf("index %q does not exist", indexName)
	}
	vals, err := f(obj)
	if err != nil {
		return nil, err
	}
	var out []any
	seen := map[string]bool{}
	for _, v := range vals {
		keys, _ := s.IndexKeys(indexName, v)
		for _, k := range keys {
			if !seen[k] {
				seen[k] = true
				if o, ok := s.getByKey(k); ok {
					out = append(out, o)
				}
			}
		}
	}
	return out, nil
}

func keyNamespace(obj any) string {
	ns, _ := splitStoreKey(keyOf(obj))
	return ns
}

func (s *store) IndexKeys(indexName, value string) ([]string, error) {
	objs, err := s.ByIndex(indexName, value)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = keyOf(o)
	}
	return out, nil
}

func (s *store) ListIndexFuncValues(indexName string) []string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if indexName == cache.NamespaceIndex {
		out := make([]string, 0, len(s.buckets))
		for ns := range s.buckets {
			out = append(out, ns)
		}
		return out
	}
	var out []string
	for v := range s.indices[indexName] {
		out = append(out, v)
	}
	return out
}

func (s *store) ByIndex(indexName, value string) ([]any, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []any
	if indexName == cache.NamespaceIndex {
		if b, ok := s.buckets[value]; ok {
			out = make([]any, 0, b.len())
			b.each(func(o any) { out = append(out, o) })
		}
		return out, nil
	}
	if _, ok := s.indexers[indexName]; !ok {
		return nil, fmt.Errorf("index %q does not exist", indexName)
	}
	for k := range s.indices[indexName][value] {
		ns, name := splitStoreKey(k)
		if b, ok := s.buckets[ns]; ok {
			if o, ok := b.get(name); ok {
				out = append(out, o)
			}
		}
	}
	return out, nil
}

func (s *store) GetIndexers() cache.Indexers {
	out := cache.Indexers{cache.NamespaceIndex: func(obj any) ([]string, error) { return []string{keyNamespace(obj)}, nil }}
	for k, v := range s.indexers {
		out[k] = v
	}
	return out
}

func (s *store) AddIndexers(indexers cache.Indexers) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range indexers {
		if _, ok := s.indexers[name]; ok {
			return errors.New("indexer conflict: " + name)
		}
	}
	for name, f := range indexers {
		if name != cache.NamespaceIndex {
			s.indexers[name] = f
		}
	}
	for _, b := range s.buckets {
		b.each(func(o any) { s.reindex(keyOf(o), o) })
	}
	return nil
}
