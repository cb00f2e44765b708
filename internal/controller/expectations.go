package controller

import (
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// expectations remember the ownerReferences we just wrote until the config informer shows them, so a
// ReplicaSet synced again in between (its status changes constantly during a rollout) does not send a
// second, conflicting write. Entries expire so a lost watch event cannot block an attach forever.
type expectations struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[[2]types.UID]time.Time
}

func newExpectations(ttl time.Duration) *expectations {
	return &expectations{ttl: ttl, m: map[[2]types.UID]time.Time{}}
}

// expect records a write whose effect the cache does not show yet. shown reads the cache: under the
// lock, so a watch event that arrived before the write returned (its observe came first) cannot leave
// behind an expectation nothing will clear, which would make the next sync skip the object for a TTL
// (an ownerReference stripped meanwhile, e.g. by Argo CD's Replace=true, would stay missing that long).
func (e *expectations) expect(object, owner types.UID, shown func() bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if shown() {
		return
	}
	e.m[[2]types.UID{object, owner}] = time.Now()
}

func (e *expectations) has(object, owner types.UID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	k := [2]types.UID{object, owner}
	t, ok := e.m[k]
	if ok && time.Since(t) > e.ttl {
		delete(e.m, k)
		return false
	}
	return ok
}

// observe clears the expectations a cached object now satisfies.
func (e *expectations) observe(m *metav1.PartialObjectMetadata) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.m) == 0 {
		return
	}
	for _, ref := range m.OwnerReferences {
		delete(e.m, [2]types.UID{m.UID, ref.UID})
	}
}
