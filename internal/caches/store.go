package caches

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
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

// storeInformer lists and watches one resource into a store, and hands each stored change to every
// handler's listener (listener.go).
type storeInformer struct {
	store *store
	queue *fifo
	ctl   cache.Controller
	what  string // the type it holds, for messages
	// refused is set from a list refused for good (forbidden, or the resource not served) to the next
	// attempt: the informer may never sync (see Caches.Start).
	refused atomic.Bool

	// mu orders the handlers' events: each change is stored and queued for every listener under it,
	// and a listener added meanwhile gets what is stored as adds first.
	mu        sync.Mutex
	listeners []*listener
	running   bool
	stopped   bool
	// synced: the queue has synced, and every listener has been told (listener.synced).
	synced bool
}

// newStoreInformer makes the informer of a resource (example its type) listed and watched through lw,
// transform applied to each object before it is queued, and to a watch-list's initial events before
// the reflector sees them (initial.go). The reflector is told no type: it checks each event's type
// against it, and the initial events carry records.
func newStoreInformer(lw cache.ListerWatcher, example runtime.Object, transform cache.TransformFunc, indexers cache.Indexers) *storeInformer {
	i := &storeInformer{store: newStore(indexers), what: fmt.Sprintf("%T", example)}
	i.queue = newFIFO(i.store, transform)
	i.ctl = cache.New(&cache.Config{Queue: i.queue, ListerWatcher: reducingWatcher{lw: lw, reduce: transform, skipped: i.queue.skipped, refused: &i.refused},
		ObjectDescription: i.what, Process: i.process, WatchErrorHandlerWithContext: i.watchError})
	return i
}

// RunWithContext runs the informer and its handlers' listeners until ctx ends.
func (i *storeInformer) RunWithContext(ctx context.Context) {
	i.queue.skipped.log = logging.FromContext(ctx)
	i.startListeners()
	defer i.stopListeners()
	go func() {
		select {
		case <-i.queue.Done():
			i.markSynced()
		case <-ctx.Done():
		}
	}()
	i.ctl.RunWithContext(ctx)
}

// startListeners starts handing changes to the handlers, each on its goroutine.
func (i *storeInformer) startListeners() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.running = true
	for _, l := range i.listeners {
		go l.run()
	}
}

// stopListeners stops them; no handler can be added any more.
func (i *storeInformer) stopListeners() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.stopped = true
	for _, l := range i.listeners {
		l.stop()
	}
}

// markSynced tells every listener the queue has synced: each has been handed, or has queued, every add
// of the first list (the queue is synced once the last of them is processed).
func (i *storeInformer) markSynced() {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.synced = true
	for _, l := range i.listeners {
		l.synced.UpstreamHasSynced()
	}
}

// watchError notes whether the reflector's lists are refused for good, and logs the error as
// client-go's informers do.
func (i *storeInformer) watchError(ctx context.Context, r *cache.Reflector, err error) {
	i.refused.Store(apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err))
	cache.DefaultWatchErrorHandler(ctx, r, err)
}

// runner is an informer the caches start: a storeInformer or a sharedInformer.
type runner interface {
	Source
	RunWithContext(ctx context.Context)
	// handlersSynced reports whether every handler added so far has been handed the first list.
	handlersSynced() bool
}

// sharedInformer is a SharedIndexInformer of the caches (the pinning caches) that keeps the
// registrations of its handlers, so that WaitForSync waits for them too.
type sharedInformer struct {
	cache.SharedIndexInformer
	mu   sync.Mutex
	regs []cache.ResourceEventHandlerRegistration
}

func (s *sharedInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	reg, err := s.SharedIndexInformer.AddEventHandler(h)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.regs = append(s.regs, reg)
	return reg, nil
}

func (s *sharedInformer) handlersSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return allSynced(s.regs)
}

// allSynced reports whether every registration has synced.
func allSynced[R cache.ResourceEventHandlerRegistration](regs []R) bool {
	for _, r := range regs {
		if !r.HasSynced() {
			return false
		}
	}
	return true
}

// HasSynced reports whether the first list is stored; an informer of tests, which is never run, has.
// It takes no lock (handlers may ask).
func (i *storeInformer) HasSynced() bool { return i.ctl == nil || i.queue.HasSynced() }

// newTestInformer is an informer that is never run: unit tests fill its store.
func newTestInformer(indexers cache.Indexers) *storeInformer {
	return &storeInformer{store: newStore(indexers), what: "tests"}
}

func (i *storeInformer) GetIndexer() cache.Indexer { return i.store }

// AddEventHandler adds h, with a listener of its own; one added once the informer runs gets each object
// stored so far as an add of the first list first, as a SharedIndexInformer's does. The registration
// has synced once h has been handed the whole first list.
func (i *storeInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	l := newListener(h, fmt.Sprintf("caches informer of %s: handler %T", i.what, h))
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.stopped {
		return nil, fmt.Errorf("handler %T not added: the informer of %s has stopped", h, i.what)
	}
	if i.running {
		i.store.each(func(obj any) { l.add(notification{cur: obj, initial: true}) })
		go l.run()
	}
	i.listeners = append(i.listeners, l)
	if i.synced || i.ctl == nil {
		l.synced.UpstreamHasSynced()
	}
	return l, nil
}

// unreadable counts the objects of kind the informer skips (ErrUnreadable).
func (i *storeInformer) unreadable(kind Kind) int {
	if i.queue == nil {
		return 0
	}
	return i.queue.skipped.count(kind)
}

// handlersSynced reports whether every handler added so far has been handed the first list.
func (i *storeInformer) handlersSynced() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return allSynced(i.listeners)
}

// process stores one queued change and queues it for every handler, as client-go's informers do.
func (i *storeInformer) process(obj any, initial bool) error {
	deltas, ok := obj.(cache.Deltas)
	if !ok {
		return fmt.Errorf("queued a %T, not Deltas", obj)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, d := range deltas {
		key := keyOf(d.Object)
		var n notification
		switch d.Type {
		case cache.Sync, cache.Replaced, cache.Added, cache.Updated:
			old, existed := i.store.put(key, d.Object)
			n = notification{cur: d.Object, initial: initial && !existed}
			if existed {
				n.old = old
			}
		case cache.Deleted:
			i.store.remove(key)
			n = notification{old: d.Object}
		default:
			return fmt.Errorf("unexpected delta %s", d.Type)
		}
		for _, l := range i.listeners {
			l.add(n)
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

// Replace swaps in a store made of list: readers see the old objects or the new ones, never an empty
// store between them.
func (s *store) Replace(list []any, _ string) error {
	s.mu.RLock()
	fresh := newStore(s.indexers)
	s.mu.RUnlock()
	for _, o := range list {
		if err := fresh.Add(o); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buckets, s.indices, s.values = fresh.buckets, fresh.indices, fresh.values
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
	s.mu.RLock()
	f, ok := s.indexers[indexName]
	s.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("index %q does not exist", indexName)
	}
	vals, err := f(obj)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []any
	seen := map[string]bool{}
	for _, v := range vals {
		for k := range s.indices[indexName][v] {
			if seen[k] {
				continue
			}
			seen[k] = true
			ns, name := splitStoreKey(k)
			if b, ok := s.buckets[ns]; ok {
				if o, ok := b.get(name); ok {
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
	s.mu.RLock()
	defer s.mu.RUnlock()
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
