package protection

import (
	"context"
	"sync"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
)

// liveChecks shares the live checks of a namespace: one look through it answers every held object of
// the namespace at that moment. An uninstall releasing thousands of objects in one namespace made one
// look through the whole namespace per object, up to one per worker at once (each a full LIST of its
// Pods); it makes a few.
//
// A look is valid for an object whose deletion the caches showed before the look started: the pod
// that holds it, if any, was created before its deletion, so the look's consistent read has it (what
// the live check is for). So a look answers the objects that asked before it started, and every other
// object the caches show held when it starts (heldIn): one of those found unused is released by its
// own sync without a look of its own, if it is still at the version the look read (a version changed
// since, a snapshot's owner added, is looked at again). An object asking while a look is under way
// waits for the next look, which starts when this one ends. The first object of each look runs it, on
// its own worker, with its own context.
type liveChecks struct {
	looker Looker
	// heldIn lists the held objects of a namespace, as the caches show them (nil: none is added).
	heldIn func(namespace string) []heldObject
	// skipped counts, by kind, the objects a look skipped (nil: not counted).
	skipped func(kind caches.Kind, n int)

	mu sync.Mutex
	ns map[string]*namespaceChecks
}

// heldObject is a held object as the caches show it, and what a look asks of it.
type heldObject struct {
	key, resourceVersion string
	query                Query
}

// namespaceChecks are the looks through one namespace: the one under way, the one gathering the
// objects that asked since it started, and what the last look found unused (key → the version read).
type namespaceChecks struct {
	running, next *look
	unused        map[string]string
}

type look struct {
	asked  []heldObject
	done   chan struct{}
	answer Answer // for asked, in order
	err    error
}

func newLiveChecks(live UserLister, heldIn func(string) []heldObject, skipped func(caches.Kind, int)) *liveChecks {
	return &liveChecks{looker: lookerOf(live), heldIn: heldIn, skipped: skipped, ns: map[string]*namespaceChecks{}}
}

// user returns a live user the API server holds for the held object h of namespace, nil when none,
// from a look that started after the caches showed it held.
func (l *liveChecks) user(ctx context.Context, namespace string, h heldObject) (*caches.User, error) {
	l.mu.Lock()
	n, ok := l.ns[namespace]
	if !ok {
		n = &namespaceChecks{}
		l.ns[namespace] = n
	}
	if rv, ok := n.unused[h.key]; ok {
		delete(n.unused, h.key)
		if rv == h.resourceVersion {
			l.forget(namespace, n)
			l.mu.Unlock()
			return nil, nil
		}
	}
	lk := n.next
	first := lk == nil
	if first {
		lk = &look{done: make(chan struct{})}
		n.next = lk
	}
	i := len(lk.asked)
	lk.asked = append(lk.asked, h)
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
// as it starts) and hands its answer to every object that asked; what it found of the other held
// objects is kept for their syncs.
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

	queries := make([]Query, 0, len(lk.asked))
	asked := make(map[string]bool, len(lk.asked))
	for _, h := range lk.asked {
		queries = append(queries, h.query)
		asked[h.key] = true
	}
	var others []heldObject
	if l.heldIn != nil {
		for _, h := range l.heldIn(namespace) {
			if !asked[h.key] {
				others = append(others, h)
				queries = append(queries, h.query)
			}
		}
	}
	answer, err := l.looker.Look(ctx, namespace, queries)
	lk.err = err
	var unused map[string]string
	if err == nil {
		lk.answer = Answer{Users: answer.Users[:len(lk.asked)], Unreadable: answer.Unreadable}
		for i, h := range others {
			if answer.Users[len(lk.asked)+i] == nil {
				if unused == nil {
					unused = map[string]string{}
				}
				unused[h.key] = h.resourceVersion
			}
		}
		if l.skipped != nil {
			for kind, count := range answer.Unreadable {
				l.skipped(kind, count)
			}
		}
	}

	l.mu.Lock()
	n.running = nil
	if err == nil {
		n.unused = unused // the last look's answers replace the earlier ones
	}
	l.forget(namespace, n)
	l.mu.Unlock()
}

// drop forgets what a look found of an object that is gone (or no longer opted in).
func (l *liveChecks) drop(namespace, key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n, ok := l.ns[namespace]; ok {
		delete(n.unused, key)
		l.forget(namespace, n)
	}
}

// forget drops a namespace no look is under way or gathering for, and with no answer kept (under mu).
func (l *liveChecks) forget(namespace string, n *namespaceChecks) {
	if n.running == nil && n.next == nil && len(n.unused) == 0 {
		delete(l.ns, namespace)
	}
}
