package caches

import (
	"context"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
)

// client-go's reflector keeps the objects of a watch-list's first list in a store of its own until the
// list ends, keyed by a string it makes from each object as it arrives, before transforming it: at
// 150,000 Pods (~400,000 objects in all) that key is one more copy of every namespace and name,
// ~9 MiB held at the start's peak. reducingWatcher reduces the objects of a watch-list's initial
// events to their records before the reflector sees them, and a record's key is its own string
// (storeKey). After the initial events end, events pass whole: the queue reduces them (fifo.go),
// and the reflector reads their resourceVersion. A paged LIST reduced page by page held less again
// (no store of client-go's at all) but took kube-apiserver twice the CPU of a watch-list, and the
// caches twice as long to sync (docs/benchmarks.md, "sixth run").

// reducingWatcher is a lister-watcher whose watch-lists' initial events carry records.
type reducingWatcher struct {
	lw     cache.ListerWatcher
	reduce cache.TransformFunc
	// skipped learns which objects of a watch-list's initial events the reducer refused (nil: none is
	// told): they never reach the reflector, whose store would fail them one by one.
	skipped *skipped
	// refused is cleared as each list starts (nil: none is kept); storeInformer.watchError sets it.
	refused *atomic.Bool
}

func (l reducingWatcher) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(l.lw)
}

func (l reducingWatcher) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l reducingWatcher) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	l.listing()
	return cache.ToListerWithContext(l.lw).ListWithContext(ctx, o)
}

func (l reducingWatcher) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

func (l reducingWatcher) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	initialEvents := o.SendInitialEvents != nil && *o.SendInitialEvents
	if initialEvents {
		l.listing()
	}
	w, err := cache.ToWatcherWithContext(l.lw).WatchWithContext(ctx, o)
	if err != nil || !initialEvents {
		return w, err
	}
	// Only the filter's goroutine reads and writes these.
	initial := true
	var refused map[string]error
	return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
		switch {
		case !initial:
		case e.Type == watch.Added:
			r, err := l.reduce(e.Object)
			if err != nil {
				// Skipped, as the queue skips it in a list (fifo.Replace), and told to it when the
				// list is handed over.
				if refused == nil {
					refused = map[string]error{}
				}
				refused[keyOf(e.Object)] = err
				return e, false
			}
			if record, ok := r.(runtime.Object); ok {
				e.Object = record
			}
		case e.Type == watch.Bookmark && initialEventsEnd(e.Object):
			initial = false
			if l.skipped != nil {
				l.skipped.stream(refused) // before the reflector, which reads the bookmark next, hands the list over
			}
		}
		return e, true
	}), nil
}

// listing notes that a list (or a watch-list) starts: whether it is refused is yet to be seen.
func (l reducingWatcher) listing() {
	if l.refused != nil {
		l.refused.Store(false)
	}
}

// initialEventsEnd reports whether a bookmark ends a watch-list's initial events.
func initialEventsEnd(obj runtime.Object) bool {
	m, ok := obj.(metav1.Object)
	return ok && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
}
