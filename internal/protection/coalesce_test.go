package protection

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

// heldLister answers from what it holds, one look for several objects; its first look waits for
// release.
type heldLister struct {
	users   liveUsers
	started chan struct{}
	release chan struct{}
	mu      sync.Mutex
	looks   [][]Query
}

func (h *heldLister) Users(context.Context, string, refs.Ref, ...metav1.OwnerReference) ([]*caches.User, error) {
	panic("a Looker is asked to Look")
}

func (h *heldLister) Look(ctx context.Context, ns string, queries []Query) (Answer, error) {
	h.mu.Lock()
	h.looks = append(h.looks, slices.Clone(queries))
	first := len(h.looks) == 1
	h.mu.Unlock()
	if first {
		close(h.started)
		<-h.release
	}
	return oneByOne{h.users}.Look(ctx, ns, queries)
}

// gathered counts the objects of namespace waiting for the next look.
func (l *liveChecks) gathered(namespace string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := l.ns[namespace]; n != nil && n.next != nil {
		return len(n.next.queries)
	}
	return 0
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// The deletions of one namespace waiting for the live check at once share one look: an uninstall
// releasing thousands of objects reads the namespace once per look, not once per object. An object
// asking while a look is under way waits for the next one (the look under way may have read the
// namespace before its user was created).
func TestDeletionsWaitingAtOnceShareOneLook(t *testing.T) {
	var configs []*metav1.PartialObjectMetadata
	for i := range 5 {
		configs = append(configs, config(fmt.Sprintf("cfg-%d", i), true, true, true))
	}
	f := newFixture(t, nil, nil, configs)
	lister := &heldLister{users: liveUsers{pod("web-1", []string{"cfg-2"}, corev1.PodRunning)}, started: make(chan struct{}), release: make(chan struct{})}
	f.c.live = newLiveChecks(lister, nil)
	var wg sync.WaitGroup
	start := func(name string) {
		wg.Go(func() {
			if _, err := f.c.sync(context.Background(), cmKey(name)); err != nil {
				t.Errorf("sync %s: %v", name, err)
			}
		})
	}
	start("cfg-0")
	<-lister.started
	for i := 1; i < 5; i++ {
		start(fmt.Sprintf("cfg-%d", i))
	}
	waitUntil(t, "four deletions wait for the next look", func() bool { return f.c.live.gathered(testutil.Namespace) == 4 })
	close(lister.release)
	wg.Wait()

	if len(lister.looks) != 2 || len(lister.looks[0]) != 1 || len(lister.looks[1]) != 4 {
		t.Errorf("looks %v, want one for cfg-0, then one for the four others", lister.looks)
	}
	for i := range 5 {
		name := fmt.Sprintf("cfg-%d", i)
		if held := api.HasFinalizer(f.get(name).Finalizers, api.InUseFinalizer); held != (name == "cfg-2") {
			t.Errorf("%s: held %v, want held only while pod/web-1 uses it", name, held)
		}
	}
	if n := len(f.c.live.ns); n != 0 {
		t.Errorf("%d namespaces still kept after every look ended", n)
	}
}

// A look that fails fails every object that shared it (each is retried), and the next look starts
// afresh.
func TestALookThatFailsFailsEveryObjectSharingIt(t *testing.T) {
	failing := lookerFunc(func(context.Context, string, []Query) (Answer, error) {
		return Answer{}, fmt.Errorf("the API server is away")
	})
	l := newLiveChecks(failing, nil)
	if _, err := l.user(context.Background(), testutil.Namespace, Query{Ref: cmRef("a")}); err == nil {
		t.Error("no error from a failed look")
	}
	l.looker = lookerOf(liveUsers{pod("web-1", []string{"a"}, corev1.PodRunning)})
	u, err := l.user(context.Background(), testutil.Namespace, Query{Ref: cmRef("a")})
	if err != nil || u == nil || u.Name != "web-1" {
		t.Errorf("the next look: %v, %v; want pod/web-1", u, err)
	}
}

// lookerFunc is a Looker.
type lookerFunc func(context.Context, string, []Query) (Answer, error)

func (f lookerFunc) Look(ctx context.Context, ns string, q []Query) (Answer, error) {
	return f(ctx, ns, q)
}

func (f lookerFunc) Users(context.Context, string, refs.Ref, ...metav1.OwnerReference) ([]*caches.User, error) {
	panic("a Looker is asked to Look")
}

// What a look skipped is counted by kind.
func TestALookCountsWhatItSkipped(t *testing.T) {
	got := map[caches.Kind]int{}
	l := newLiveChecks(lookerFunc(func(_ context.Context, _ string, q []Query) (Answer, error) {
		return Answer{Users: make([]*caches.User, len(q)), Unreadable: map[caches.Kind]int{caches.ControllerRevision: 2}}, nil
	}), func(kind caches.Kind, n int) { got[kind] += n })
	if _, err := l.user(context.Background(), testutil.Namespace, Query{Ref: cmRef("a")}); err != nil {
		t.Fatal(err)
	}
	if got[caches.ControllerRevision] != 2 {
		t.Errorf("counted %v, want 2 ControllerRevisions", got)
	}
}
