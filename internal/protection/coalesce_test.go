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
		return len(n.next.asked)
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

func heldCM(name, rv string) heldObject {
	return heldObject{key: cmKey(name), resourceVersion: rv, query: Query{Ref: cmRef(name)}}
}

// One look answers every held object of a namespace: an uninstall deleting thousands of objects at
// once reads the namespace a few times, not once per object. The object that asked gets its answer;
// each other one found unused is released by its own sync with no look; one found in use is looked
// at again by its sync.
func TestOneLookAnswersEveryHeldObjectOfTheNamespace(t *testing.T) {
	var configs []*metav1.PartialObjectMetadata
	for i := range 5 {
		configs = append(configs, config(fmt.Sprintf("cfg-%d", i), true, true, true))
	}
	f := newFixture(t, nil, nil, configs)
	lister := &heldLister{users: liveUsers{pod("web-1", []string{"cfg-2"}, corev1.PodRunning)}, started: make(chan struct{}), release: make(chan struct{})}
	close(lister.release)
	f.c.live.looker = lister
	for i := range 5 {
		f.sync(fmt.Sprintf("cfg-%d", i))
	}
	if len(lister.looks) != 2 || len(lister.looks[0]) != 5 {
		t.Errorf("looks %v, want one for all five, then one for cfg-2 (in use when the first looked)", lister.looks)
	}
	for i := range 5 {
		name := fmt.Sprintf("cfg-%d", i)
		if held := api.HasFinalizer(f.get(name).Finalizers, api.InUseFinalizer); held != (name == "cfg-2") {
			t.Errorf("%s: held %v, want held only while pod/web-1 uses it", name, held)
		}
	}
}

// An object asking while a look is under way waits for the next look (the look under way may have
// read the namespace before its user was created); the objects that asked meanwhile share it.
func TestObjectsAskingDuringALookShareTheNext(t *testing.T) {
	lister := &heldLister{users: liveUsers{pod("web-1", []string{"cfg-2"}, corev1.PodRunning)}, started: make(chan struct{}), release: make(chan struct{})}
	l := newLiveChecks(lister, nil, nil)
	var wg sync.WaitGroup
	got := make([]*caches.User, 5)
	ask := func(i int) {
		wg.Go(func() {
			u, err := l.user(context.Background(), testutil.Namespace, heldCM(fmt.Sprintf("cfg-%d", i), "1"))
			if err != nil {
				t.Errorf("cfg-%d: %v", i, err)
			}
			got[i] = u
		})
	}
	ask(0)
	<-lister.started
	for i := 1; i < 5; i++ {
		ask(i)
	}
	waitUntil(t, "four objects wait for the next look", func() bool { return l.gathered(testutil.Namespace) == 4 })
	close(lister.release)
	wg.Wait()
	if len(lister.looks) != 2 || len(lister.looks[0]) != 1 || len(lister.looks[1]) != 4 {
		t.Errorf("looks %v, want one for cfg-0, then one for the four others", lister.looks)
	}
	for i, u := range got {
		if (u != nil) != (i == 2) {
			t.Errorf("cfg-%d: user %v, want pod/web-1 for cfg-2 only", i, u)
		}
	}
	if n := len(l.ns); n != 0 {
		t.Errorf("%d namespaces still kept after every look ended", n)
	}
}

// What a look found of an object is used only at the version it read (a snapshot given an owner since
// is looked at again), once, and not after the object went.
func TestAnAnswerIsForTheVersionItRead(t *testing.T) {
	var looks int
	held := []heldObject{heldCM("a", "1"), heldCM("b", "1"), heldCM("c", "1")}
	l := newLiveChecks(lookerFunc(func(_ context.Context, _ string, q []Query) (Answer, error) {
		looks++
		return Answer{Users: make([]*caches.User, len(q))}, nil
	}), func(string) []heldObject { return held }, nil)
	ask := func(h heldObject) {
		t.Helper()
		if u, err := l.user(context.Background(), testutil.Namespace, h); err != nil || u != nil {
			t.Fatalf("%s: %v, %v; want unused", h.key, u, err)
		}
	}
	ask(heldCM("a", "1")) // a look, answering b and c too
	ask(heldCM("b", "1"))
	if looks != 1 {
		t.Errorf("%d looks; b at the version read needs none", looks)
	}
	ask(heldCM("b", "1")) // a look, answering a and c
	if looks != 2 {
		t.Errorf("%d looks; an answer is used once", looks)
	}
	ask(heldCM("c", "2")) // a look, answering a and b
	if looks != 3 {
		t.Errorf("%d looks; c changed since the look read it, it needs a look of its own", looks)
	}
	l.drop(testutil.Namespace, cmKey("b"))
	held = nil
	ask(heldCM("b", "1"))
	if looks != 4 {
		t.Errorf("%d looks; b went and came again: what a look found of it before is forgotten", looks)
	}
	if n := len(l.ns); n != 0 {
		t.Errorf("%d namespaces still kept with nothing to answer", n)
	}
}

// A look that fails fails every object that shared it (each is retried), and the next look starts
// afresh.
func TestALookThatFailsFailsEveryObjectSharingIt(t *testing.T) {
	failing := lookerFunc(func(context.Context, string, []Query) (Answer, error) {
		return Answer{}, fmt.Errorf("the API server is away")
	})
	l := newLiveChecks(failing, nil, nil)
	if _, err := l.user(context.Background(), testutil.Namespace, heldCM("a", "1")); err == nil {
		t.Error("no error from a failed look")
	}
	l.looker = lookerOf(liveUsers{pod("web-1", []string{"a"}, corev1.PodRunning)})
	u, err := l.user(context.Background(), testutil.Namespace, heldCM("a", "1"))
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
	}), nil, func(kind caches.Kind, n int) { got[kind] += n })
	if _, err := l.user(context.Background(), testutil.Namespace, heldCM("a", "1")); err != nil {
		t.Fatal(err)
	}
	if got[caches.ControllerRevision] != 2 {
		t.Errorf("counted %v, want 2 ControllerRevisions", got)
	}
}
