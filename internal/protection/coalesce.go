package protection

import (
	"context"
	"sync"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
)

// liveChecks coalesces the live checks of a namespace: the objects of one namespace waiting for a
// check at the same moment are answered by one look through it. An uninstall releasing thousands of
// objects in one namespace made one look through the whole namespace per object, up to one per
// worker at once; it makes one at a time, each answering every object that came meanwhile.
//
// A look answers only the objects that asked before it started: a look already under way may have
// read the namespace before the pod that holds a later object was created (what the live check is
// for), so a later object waits for the next look, which starts when this one ends. The first object
// of each look runs it, on its own worker, with its own context.
type liveChecks struct {
	looker Looker
	// skipped counts, by kind, the objects a look skipped (nil: not counted).
	skipped func(kind caches.Kind, n int)

	mu sync.Mutex
	ns map[string]*namespaceChecks
}

// namespaceChecks are the looks through one namespace: the one under way, and the one gathering the
// objects that asked since it started.
type namespaceChecks struct {
	running, next *look
}

type look struct {
	queries []Query
	done    chan struct{}
	answer  Answer
	err     error
}

func newLiveChecks(live UserLister, skipped func(caches.Kind, int)) *liveChecks {
	return &liveChecks{looker: lookerOf(live), skipped: skipped, ns: map[string]*namespaceChecks{}}
}

// user returns a live user the API server holds for q in namespace, nil when none, from a look that
// started after this call.
func (l *liveChecks) user(ctx context.Context, namespace string, q Query) (*caches.User, error) {
	l.mu.Lock()
	n, ok := l.ns[namespace]
	if !ok {
		n = &namespaceChecks{}
		l.ns[namespace] = n
	}
	lk := n.next
	first := lk == nil
	if first {
		lk = &look{done: make(chan struct{})}
		n.next = lk
	}
	i := len(lk.queries)
	lk.queries = append(lk.queries, q)
	before := n.running
	l.mu.Unlock()

	if first {
		l.run(ctx, namespace, n, lk, before)
	}
	select {
	case <-lk.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if lk.err != nil {
		return nil, lk.err
	}
	return lk.answer.Users[i], nil
}

// run waits for the look under way in namespace, if any, then makes lk (which stops gathering objects
// as it starts) and hands its answer to every object that asked.
func (l *liveChecks) run(ctx context.Context, namespace string, n *namespaceChecks, lk, before *look) {
	defer close(lk.done)
	if before != nil {
		select {
		case <-before.done:
		case <-ctx.Done():
			l.mu.Lock()
			if n.next == lk {
				n.next = nil
			}
			l.forget(namespace, n)
			l.mu.Unlock()
			lk.err = ctx.Err()
			return
		}
	}
	l.mu.Lock()
	n.running, n.next = lk, nil
	l.mu.Unlock()

	lk.answer, lk.err = l.looker.Look(ctx, namespace, lk.queries)
	if lk.err == nil && l.skipped != nil {
		for kind, count := range lk.answer.Unreadable {
			l.skipped(kind, count)
		}
	}

	l.mu.Lock()
	n.running = nil
	l.forget(namespace, n)
	l.mu.Unlock()
}

// forget drops a namespace no look is under way or gathering for (under mu).
func (l *liveChecks) forget(namespace string, n *namespaceChecks) {
	if n.running == nil && n.next == nil {
		delete(l.ns, namespace)
	}
}
