package caches

import (
	"slices"
	"sync"

	"k8s.io/client-go/tools/cache"
)

// fifo is the queue between a storeInformer's reflector and its store: client-go's RealFIFO (without
// atomic events) as far as the reflector and the informer can tell, but for two things. RealFIFO pops
// by reslicing its items, so the array a first list of 150,000 Pods grew it to (~5 MiB) stays
// reachable until later events have filled what remains of it, which in a quiet cluster is never; fifo
// lets go of its array each time it runs empty. And an object the transform refuses is skipped, not
// an error that fails the whole list (Replace).
type fifo struct {
	mu        sync.Mutex
	cond      sync.Cond
	items     []cache.Delta
	known     cache.KeyListerGetter
	transform cache.TransformFunc
	// populated: the first list (Replace) or an event came; initial: what remains to pop of the first
	// list. synced is closed once both say the first list is popped.
	populated    bool
	initial      int
	synced       chan struct{}
	syncedClosed bool
	closed       bool
	// skipped are the objects the transform refused.
	skipped *skipped
}

var _ cache.Queue = (*fifo)(nil)

func newFIFO(known cache.KeyListerGetter, transform cache.TransformFunc) *fifo {
	f := &fifo{known: known, transform: transform, synced: make(chan struct{}), skipped: newSkipped()}
	f.cond.L = &f.mu
	return f
}

// push queues one change as it is (transformed already, or a tombstone).
func (f *fifo) push(t cache.DeltaType, obj any) {
	f.items = append(f.items, cache.Delta{Type: t, Object: obj})
	f.cond.Broadcast()
}

// event queues a change the reflector saw, transformed. An object the transform refuses (one the
// caches cannot read, ErrUnreadable) is skipped rather than failed: a failed event is dropped by the
// reflector all the same, but the informer would keep what it held of the object before, which it no
// longer is. What it held goes instead, as a deletion: an object that cannot be read makes no pods.
func (f *fifo) event(t cache.DeltaType, obj any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.populated = true
	f.checkSynced()
	if _, tomb := obj.(cache.DeletedFinalStateUnknown); f.transform != nil && !tomb {
		key := keyOf(obj)
		reduced, err := f.transform(obj)
		switch {
		case err == nil:
			obj = reduced
			f.skipped.drop(key)
		case t == cache.Deleted:
			f.skipped.drop(key)
			f.forget(key)
			return nil
		default:
			f.skipped.add(key, err)
			f.forget(key)
			return nil
		}
	}
	f.push(t, obj)
	return nil
}

// forget queues the deletion of what the informer holds, or will hold once its queued changes are
// processed, under key; nothing if that is nothing.
func (f *fifo) forget(key string) {
	for i := len(f.items) - 1; i >= 0; i-- {
		if d := f.items[i]; keyOf(d.Object) == key {
			if d.Type != cache.Deleted {
				f.push(cache.Deleted, cache.DeletedFinalStateUnknown{Key: key, Obj: d.Object})
			}
			return
		}
	}
	if obj, exists, err := f.known.GetByKey(key); err == nil && exists {
		f.push(cache.Deleted, cache.DeletedFinalStateUnknown{Key: key, Obj: obj})
	}
}

func (f *fifo) Add(obj any) error    { return f.event(cache.Added, obj) }
func (f *fifo) Update(obj any) error { return f.event(cache.Updated, obj) }
func (f *fifo) Delete(obj any) error { return f.event(cache.Deleted, obj) }

// Replace queues a list as RealFIFO does: a deletion (a tombstone) for every object queued or stored
// that the list no longer holds, then the list's objects. The list is transformed first: an object the
// transform refuses is skipped (ErrUnreadable), so that the list is not refused whole for one object
// (RealFIFO's Replace stops at the first error: a first list never synced, a relist left the informer
// stale without a watch), and counts as not listed: what the informer held of it goes.
func (f *fifo) Replace(list []any, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.transform != nil {
		var refused map[string]error
		kept := list[:0]
		for _, obj := range list {
			reduced, err := f.transform(obj)
			if err != nil {
				if refused == nil {
					refused = map[string]error{}
				}
				refused[keyOf(obj)] = err
				continue
			}
			kept = append(kept, reduced)
		}
		clear(list[len(kept):])
		list = kept
		f.skipped.replace(refused)
	}
	known := f.known.ListKeys()
	// A first list, into an empty queue and store, deletes nothing: no set of its keys is made (at
	// 150,000 Pods, 150,000 entries, made as every other informer's first list ends too).
	var listed map[string]struct{}
	if len(f.items) > 0 || len(known) > 0 {
		listed = make(map[string]struct{}, len(list))
		for _, obj := range list {
			listed[keyOf(obj)] = struct{}{}
		}
	}
	// The last change queued for each key.
	var queuedKeys []string
	last := map[string]cache.Delta{}
	for _, d := range f.items {
		k := keyOf(d.Object)
		if _, seen := last[k]; !seen {
			queuedKeys = append(queuedKeys, k)
		}
		last[k] = d
	}
	for _, k := range queuedKeys {
		if _, ok := listed[k]; ok || last[k].Type == cache.Deleted {
			continue
		}
		f.push(cache.Deleted, cache.DeletedFinalStateUnknown{Key: k, Obj: last[k].Object})
	}
	for _, k := range known {
		if _, ok := listed[k]; ok {
			continue
		}
		if _, queued := last[k]; queued {
			continue
		}
		obj, exists, err := f.known.GetByKey(k)
		if err != nil || !exists {
			obj = nil
		}
		f.push(cache.Deleted, cache.DeletedFinalStateUnknown{Key: k, Obj: obj})
	}
	f.items = slices.Grow(f.items, len(list))
	for _, obj := range list {
		f.push(cache.Replaced, obj)
	}
	if !f.populated {
		f.populated = true
		f.initial = len(f.items)
		f.checkSynced()
	}
	return nil
}

// Resync queues a Sync of every stored object that has no change queued (the caches' informers have no
// resync period: the reflector never calls it).
func (f *fifo) Resync() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	queued := map[string]struct{}{}
	for _, d := range f.items {
		queued[keyOf(d.Object)] = struct{}{}
	}
	for _, k := range f.known.ListKeys() {
		if _, ok := queued[k]; ok {
			continue
		}
		if obj, exists, err := f.known.GetByKey(k); err == nil && exists {
			f.push(cache.Sync, obj)
		}
	}
	return nil
}

// Pop waits for a change and processes it, under the queue's lock (as RealFIFO does without
// UnlockWhileProcessing, so that Replace compares a list with a store no change is being made to):
// processing only stores the change and hands it to the handlers' own queues (listener.go), so the
// lock is held for that long, never while a handler runs.
func (f *fifo) Pop(process cache.PopProcessFunc) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.items) == 0 {
		if f.closed {
			return nil, cache.ErrFIFOClosed
		}
		f.cond.Wait()
	}
	initial := !f.syncedClosed
	item := f.items[0]
	f.items[0] = cache.Delta{}
	f.items = f.items[1:]
	if len(f.items) == 0 {
		f.items = nil // what this is for
	}
	defer func() {
		if f.initial > 0 {
			f.initial--
			f.checkSynced()
		}
	}()
	err := process(cache.Deltas{item}, initial)
	return cache.Deltas{item}, err
}

func (f *fifo) checkSynced() {
	if f.populated && f.initial == 0 && !f.syncedClosed {
		f.syncedClosed = true
		close(f.synced)
	}
}

// HasSynced takes no lock: a handler, or anything else that runs while the queue is locked, may ask.
func (f *fifo) HasSynced() bool {
	select {
	case <-f.synced:
		return true
	default:
		return false
	}
}

func (f *fifo) HasSyncedChecker() cache.DoneChecker { return f }
func (f *fifo) Name() string                        { return "caches fifo" }
func (f *fifo) Done() <-chan struct{}               { return f.synced }

func (f *fifo) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.cond.Broadcast()
}

// Transformer makes the reflector transform the objects of a watch-list's first list as they stream
// in, in the store it keeps them in until the list ends, and not only once queued.
func (f *fifo) Transformer() cache.TransformFunc { return f.transform }
