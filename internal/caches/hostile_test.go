package caches

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// A ControllerRevision of a StatefulSet: its data holds the pod template, which names app-config.
func readableCR(name, rv string) *appsv1.ControllerRevision {
	return &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv},
		Data: runtime.RawExtension{Raw: []byte(`{"spec":{"template":{"spec":{"volumes":[{"name":"c","configMap":{"name":"app-config"}}]}}}}`)}}
}

// A ControllerRevision another controller wrote, whose data is not a pod template.
func unreadableCR(name, rv string) *appsv1.ControllerRevision {
	cr := readableCR(name, rv)
	cr.Data.Raw = []byte(`{"spec":"a shape of its own"}`)
	return cr
}

// source serves lists (each call the next, the last again) and watches; with watchList, every watch
// asking for initial events streams the next list and ends it with the bookmark, and lists are refused.
type source struct {
	watchList bool
	mu        sync.Mutex
	lists     [][]runtime.Object
	watches   chan *watch.FakeWatcher
}

func newSource(watchList bool, lists ...[]runtime.Object) *source {
	return &source{watchList: watchList, lists: lists, watches: make(chan *watch.FakeWatcher, 10)}
}

func (s *source) next() []runtime.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lists[0]
	if len(s.lists) > 1 {
		s.lists = s.lists[1:]
	}
	return l
}

func (s *source) lw() cache.ListerWatcher {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if s.watchList {
				return nil, fmt.Errorf("served as a watch-list only")
			}
			l := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: "5"}}
			for _, o := range s.next() {
				l.Items = append(l.Items, runtime.RawExtension{Object: o})
			}
			return l, nil
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFakeWithChanSize(100, false)
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				for _, obj := range s.next() {
					w.Add(obj)
				}
				w.Action(watch.Bookmark, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "5",
					Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
			}
			s.watches <- w
			return w, nil
		},
	}
	if s.watchList {
		return lw
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, noWatchList{})
}

// runRecorded runs an informer of users of src's objects (example their type) with a recording handler
// until the test ends, and returns them once it has synced, with its watch.
func runRecorded(t *testing.T, src *source, example runtime.Object) (*storeInformer, *recordingHandler, *watch.FakeWatcher) {
	t.Helper()
	inf := newStoreInformer(src.lw(), example, newReducer(nil, false, false).transform, nil)
	rec := &recordingHandler{}
	if err := newViewInformer(userView, inf).AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(t.Context())
	waitFor(t, "the informer syncs", inf.HasSynced)
	return inf, rec, <-src.watches
}

// stored lists the keys an informer holds, sorted.
func stored(i *storeInformer) []string {
	keys := i.store.ListKeys()
	slices.Sort(keys)
	return keys
}

// One ControllerRevision the reducer cannot read, listed beside a readable one, is skipped and
// counted; the list is not refused for it: the other is stored and the informer syncs, from a list
// as from a watch-list.
func TestAListWithAnUnreadableObjectSyncs(t *testing.T) {
	for _, watchList := range []bool{false, true} {
		t.Run(map[bool]string{false: "a list", true: "a watch-list"}[watchList], func(t *testing.T) {
			src := newSource(watchList, []runtime.Object{readableCR("web-1", "4"), unreadableCR("odd", "3")})
			inf := newStoreInformer(src.lw(), &appsv1.ControllerRevision{}, newReducer(nil, false, false).transform, nil)
			go inf.RunWithContext(t.Context())
			waitFor(t, "the informer syncs", inf.HasSynced)
			if got := stored(inf); !slices.Equal(got, []string{"ns/web-1"}) {
				t.Errorf("stored %v, want only ns/web-1", got)
			}
			if n := inf.unreadable(ControllerRevision); n != 1 {
				t.Errorf("%d ControllerRevisions counted as skipped, want 1", n)
			}
		})
	}
}

// The queue's Replace, given one readable and one unreadable ControllerRevision, returns no error,
// queues the readable one only, and the informer has synced once it is processed.
func TestReplaceSkipsAnUnreadableObject(t *testing.T) {
	inf := newTestInformer(nil)
	q := newFIFO(inf.store, newReducer(nil, false, false).transform)
	if err := q.Replace([]any{readableCR("web-1", "4"), unreadableCR("odd", "3")}, "5"); err != nil {
		t.Fatalf("Replace: %v", err)
	}
	if _, err := q.Pop(inf.process); err != nil {
		t.Fatal(err)
	}
	if !q.HasSynced() {
		t.Error("not synced once the readable object is processed")
	}
	if got := stored(inf); !slices.Equal(got, []string{"ns/web-1"}) {
		t.Errorf("stored %v, want only ns/web-1", got)
	}
}

// A watch event that makes a stored object unreadable deletes what the informer held of it (it makes
// no pods any more), and a later readable version brings it back; its deletion ends its count.
func TestAnObjectBecomingUnreadableLeavesTheCache(t *testing.T) {
	src := newSource(false, []runtime.Object{readableCR("web-1", "4")})
	inf, rec, w := runRecorded(t, src, &appsv1.ControllerRevision{})
	w.Modify(unreadableCR("web-1", "6"))
	want := []string{"add web-1", "delete (unseen) web-1"}
	rec.waitFor(t, want)
	if n := inf.unreadable(ControllerRevision); n != 1 {
		t.Errorf("%d skipped, want 1", n)
	}
	w.Modify(readableCR("web-1", "7"))
	want = append(want, "add web-1")
	rec.waitFor(t, want)
	if n := inf.unreadable(ControllerRevision); n != 0 {
		t.Errorf("%d skipped once readable again, want 0", n)
	}
	w.Modify(unreadableCR("web-1", "8"))
	w.Delete(unreadableCR("web-1", "9"))
	want = append(want, "delete (unseen) web-1")
	rec.waitFor(t, want)
	waitFor(t, "the deleted object is no longer counted", func() bool { return inf.unreadable(ControllerRevision) == 0 })
}

// A handler runs off the queue's path: it may ask HasSynced and add a handler while it handles an
// event (under the queue's lock, both waited for ever).
func TestAHandlerMayCallBackIntoTheInformer(t *testing.T) {
	src := newSource(false, []runtime.Object{ownedPod("a"), ownedPod("b")})
	inf := newStoreInformer(src.lw(), &corev1.Pod{}, newReducer(nil, false, false).transform, nil)
	users := newViewInformer(userView, inf)
	var asked atomic.Int32
	var late recordingHandler
	var once sync.Once
	err := users.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
		users.HasSynced()
		asked.Add(1)
		once.Do(func() {
			if err := users.AddEventHandler(late.handler()); err != nil {
				t.Error(err)
			}
		})
	}})
	if err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(t.Context())
	waitFor(t, "the handler handles both adds, asking HasSynced", func() bool { return asked.Load() == 2 })
	waitFor(t, "the handler it added gets both objects", func() bool { return len(late.events()) == 2 })
}

// A registration has synced once its handler has been handed the whole first list, not when the store
// has it; WaitForSync waits for it.
func TestWaitForSyncWaitsForTheHandlers(t *testing.T) {
	src := newSource(false, []runtime.Object{ownedPod("a")})
	inf := newStoreInformer(src.lw(), &corev1.Pod{}, newReducer(nil, false, false).transform, nil)
	release := make(chan struct{})
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { <-release }})
	if err != nil {
		t.Fatal(err)
	}
	c := &Caches{informers: []runner{inf}}
	go inf.RunWithContext(t.Context())
	waitFor(t, "the store syncs", inf.HasSynced)
	if reg.HasSynced() {
		t.Error("the registration has synced while its handler holds the first list's add")
	}
	quick, cancel := context.WithCancel(t.Context())
	cancel()
	if c.WaitForSync(quick.Done()) {
		t.Error("WaitForSync returned true while a handler holds the first list's add")
	}
	close(release)
	waitFor(t, "the registration syncs", reg.HasSynced)
	if !c.WaitForSync(t.Context().Done()) {
		t.Error("WaitForSync: false")
	}
}

// Replace with changes still queued (an add of k1, the deletion of k3, which is stored): a tombstone
// for k1 after its add, no second deletion of k3, then k2.
func TestReplaceWithChangesStillQueued(t *testing.T) {
	user := func(name string) *User { return &User{Namespace: "ns", Name: name} }
	s := newStore(nil)
	_ = s.Add(user("k3"))
	f := newFIFO(s, nil)
	_ = f.Add(user("k1"))
	_ = f.Delete(user("k3"))
	if err := f.Replace([]any{user("k2")}, "9"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(f.items) > 0 {
		_, _ = f.Pop(func(obj any, _ bool) error {
			d := obj.(cache.Deltas)[0]
			_, tomb := d.Object.(cache.DeletedFinalStateUnknown)
			got = append(got, fmt.Sprintf("%s %s tombstone=%v", d.Type, keyOf(d.Object), tomb))
			return nil
		})
	}
	want := []string{"Added ns/k1 tombstone=false", "Deleted ns/k3 tombstone=false", "Deleted ns/k1 tombstone=true", "Replaced ns/k2 tombstone=false"}
	if !slices.Equal(got, want) {
		t.Errorf("queued\n%q\nwant\n%q", got, want)
	}
}

// A watch-list after the watch expired no longer holds an object: its deletion reaches the handlers.
func TestAWatchListRelistDeliversTheDeletionOfWhatItMisses(t *testing.T) {
	src := newSource(true, []runtime.Object{ownedPod("a"), ownedPod("b")}, []runtime.Object{ownedPod("a")})
	inf, rec, w := runRecorded(t, src, &corev1.Pod{})
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"})
	// A watch-list's objects come in any order.
	waitFor(t, "the handler gets four events", func() bool { return len(rec.events()) >= 4 })
	got := rec.events()
	slices.Sort(got[:2])
	if want := []string{"add a", "add b", "delete (unseen) b", "update a finished=false"}; !slices.Equal(got, want) {
		t.Errorf("the handler got %q, want %q", got, want)
	}
	if got := stored(inf); !slices.Equal(got, []string{"ns/a"}) {
		t.Errorf("stored %v, want ns/a", got)
	}
}

// The store's Replace swaps the whole content: a reader sees the old objects or the new ones, never an
// empty store or a part of the new one.
func TestStoreReplaceNeverShowsAnEmptyStore(t *testing.T) {
	s := newStore(nil)
	list := make([]any, 500)
	for i := range list {
		list[i] = &User{Namespace: "ns", Name: fmt.Sprintf("u-%03d", i)}
	}
	if err := s.Replace(list, "1"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var seen sync.Map
	go func() {
		defer close(done)
		for range 50 {
			_ = s.Replace(list, "1")
		}
	}()
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		if n := len(s.List()); n != len(list) {
			seen.Store(n, true)
		}
	}
	seen.Range(func(n, _ any) bool {
		t.Errorf("a reader saw %d objects during Replace, want %d", n, len(list))
		return true
	})
}

// Readers of every kind run against an informer processing changes, lists replacing its content, and
// indexes being added: under -race, no data race.
func TestConcurrentReadersAgainstProcessingAndReplace(t *testing.T) {
	rs := func(name, ref string, rv int) *appsv1.ReplicaSet {
		return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: fmt.Sprint(rv)},
			Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "c",
				VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: ref}}}}}}}}}
	}
	inf := newTestInformer(UserIndexers())
	q := newFIFO(inf.store, newReducer(nil, true, true).transform)
	running(t, inf)
	users := newViewInformer(userView, inf)
	var handled atomic.Int64
	if err := users.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { handled.Add(1) },
		UpdateFunc: func(_, cur any) { _ = cur.(*User).Refs; handled.Add(1) },
		DeleteFunc: func(any) { handled.Add(1) },
	}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	// The queue's consumer, as the reflector's controller runs it.
	wg.Go(func() {
		for ctx.Err() == nil {
			_, _ = q.Pop(inf.process)
		}
	})
	readers := []func(){
		func() { _, _, _ = users.Get("ns", "web-1") },
		func() { _, _ = users.InNamespace("ns", Using(refs.Ref{Kind: refs.ConfigMap, Name: "app-config"})) },
		func() { _ = users.List() },
		func() { _, _ = users.ByIndex(ByTemplateRef, "ns/web") },
		func() { _, _ = inf.store.Index(ByReloadList, &User{Namespace: "ns", Name: "x"}) },
		func() { _ = inf.store.ListIndexFuncValues(ByReloadList) },
		func() { _ = inf.store.GetIndexers() },
		func() { _ = q.HasSynced() },
	}
	for _, read := range readers {
		wg.Go(func() {
			for ctx.Err() == nil {
				read()
			}
		})
	}
	for i := range 200 {
		name := fmt.Sprintf("web-%d", i%7)
		switch i % 5 {
		case 0, 1:
			_ = q.Add(rs(name, fmt.Sprint("cfg-", i), i))
		case 2:
			_ = q.Update(rs(name, "app-config", i))
		case 3:
			_ = q.Delete(rs(name, "app-config", i))
		case 4:
			_ = q.Replace([]any{rs("web-1", "app-config", i), rs("web-2", "other", i)}, fmt.Sprint(i))
			_ = inf.store.Replace([]any{}, "") // a reader's Replace, as the Indexer allows
		}
		if i%20 == 0 { // an index added while readers read (the Indexer allows it)
			_ = inf.store.AddIndexers(cache.Indexers{fmt.Sprint("late-", i): func(any) ([]string, error) { return []string{"x"}, nil }})
		}
	}
	waitFor(t, "the handler handles changes", func() bool { return handled.Load() > 0 })
	q.Close()
	stop()
	wg.Wait()
}

// sources of caches whose every list is empty, but for the kinds refused (forbidden).
type refusingSources struct{ refused map[string]bool }

func (r refusingSources) lw(what string) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if r.refused[what] {
				return nil, apierrors.NewForbidden(schema.GroupResource{Resource: what}, "", fmt.Errorf("no RBAC"))
			}
			return &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}, noWatchList{})
}

func (r refusingSources) users(kind Kind, _ string) (cache.ListerWatcher, runtime.Object) {
	return r.lw(string(kind)), &corev1.Pod{}
}

func (r refusingSources) metadata(gvr schema.GroupVersionResource, _, _ string) (cache.ListerWatcher, runtime.Object) {
	return r.lw(gvr.Resource), &metav1.PartialObjectMetadata{}
}

// The table of identities the first lists share is dropped once every other informer has synced,
// though one (a kind the controller may not list) never will: it is not kept, and grown, for ever.
func TestTheStartupIdentitiesGoThoughAnInformerCannotSync(t *testing.T) {
	c, err := build(refusingSources{refused: map[string]bool{string(CronJob): true}}, Options{ConfigKinds: []refs.Kind{refs.ConfigMap}})
	if err != nil {
		t.Fatal(err)
	}
	c.reducer.ids.of("ns", ptr.To(ownerRef("apps/v1", "ReplicaSet", "web-1", "uid-web-1", true))) // one identity from a first list
	c.Start(t.Context())
	waitFor(t, "the startup identities are dropped", func() bool {
		c.reducer.ids.mu.Lock()
		defer c.reducer.ids.mu.Unlock()
		return c.reducer.ids.starting == nil
	})
	if c.Users[CronJob].HasSynced() {
		t.Error("the refused informer synced")
	}
}
