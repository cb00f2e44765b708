package caches

import (
	"sync"

	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/cache/synctrack"
	"k8s.io/utils/buffer"
)

// listener hands one handler the changes its informer stores, on a goroutine of its own, as
// client-go's processorListener does (and as client-go's informers have since 1.36, with their queue
// unlocked while handlers run). A handler may take long (protection's looks through a namespace's
// users of nine kinds for each event), and while it ran under the queue's lock the reflector could not
// queue what the watch brought: a watch left undrained is closed by kube-apiserver, and when its
// resourceVersion is compacted by then, the whole resource is listed again. A handler may also call
// back into the caches (HasSynced, AddEventHandler) without waiting on a lock its caller holds.
//
// What waits for the handler is a pointer per change, in a ring that shrinks back when the handler
// has caught up: a first list of 150,000 Pods is no burst left behind.
type listener struct {
	handler cache.ResourceEventHandler
	// afterFirstList: the handler wants none of the first list's adds (firstListSkipper); they are
	// not queued for it at all.
	afterFirstList bool

	mu      sync.Mutex
	cond    sync.Cond
	pending *buffer.Ring[notification]
	stopped bool

	// synced is done once the informer has synced and the handler has been handed every add of the
	// first list: its HasSynced is the registration's.
	synced *synctrack.SingleFileTracker
}

// notification is one change for a handler: an add (old nil), an update, or a delete (cur nil).
type notification struct {
	old, cur any
	initial  bool
}

// firstListSkipper is a handler that does nothing with the adds of the first list
// (Informer.AddEventHandlerAfterFirstList).
type firstListSkipper interface{ skipsFirstList() bool }

func newListener(h cache.ResourceEventHandler, name string) *listener {
	l := &listener{handler: h, pending: buffer.NewRing[notification](buffer.RingOptions{InitialSize: 16, NormalSize: 16}),
		synced: synctrack.NewSingleFileTracker(name)}
	if s, ok := h.(firstListSkipper); ok {
		l.afterFirstList = s.skipsFirstList()
	}
	l.cond.L = &l.mu
	return l
}

var _ cache.ResourceEventHandlerRegistration = (*listener)(nil)

// HasSynced reports whether the informer has synced and the handler has had every add of its first
// list: what WaitForSync waits for.
func (l *listener) HasSynced() bool                     { return l.synced.HasSynced() }
func (l *listener) HasSyncedChecker() cache.DoneChecker { return l.synced }

// add queues a change for the handler; an add of the first list the handler skips is dropped.
func (l *listener) add(n notification) {
	if n.initial && l.afterFirstList {
		return
	}
	if n.initial {
		l.synced.Start()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.pending.WriteOne(n)
	l.cond.Signal()
}

// run hands the queued changes to the handler, in order, until stop.
func (l *listener) run() {
	for {
		l.mu.Lock()
		for l.pending.Len() == 0 && !l.stopped {
			l.cond.Wait()
		}
		if l.stopped {
			l.mu.Unlock()
			return
		}
		n, _ := l.pending.ReadOne()
		l.mu.Unlock()
		switch {
		case n.cur == nil:
			l.handler.OnDelete(n.old)
		case n.old == nil:
			l.handler.OnAdd(n.cur, n.initial)
			if n.initial {
				l.synced.Finished()
			}
		default:
			l.handler.OnUpdate(n.old, n.cur)
		}
	}
}

// stop ends run; what is still queued is dropped.
func (l *listener) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stopped = true
	l.cond.Broadcast()
}
