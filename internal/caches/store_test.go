package caches

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// The store keeps a namespace's objects sorted while few, in a map beyond bucketMax, and finds each
// by key and by namespace whichever it is.
func TestStoreFindsEveryObjectByKeyAndNamespace(t *testing.T) {
	s := newStore(nil)
	n := bucketMax + 50
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("pod-%04d", i)
	}
	rand.Shuffle(n, func(i, j int) { names[i], names[j] = names[j], names[i] })
	for i, name := range names {
		if _, existed := s.put("big/"+name, &User{Namespace: "big", Name: name}); existed {
			t.Fatalf("put %s: existed", name)
		}
		if i%10 == 0 {
			s.put("small/"+name, &User{Namespace: "small", Name: name})
		}
	}
	for _, name := range names {
		if o, ok := s.getByKey("big/" + name); !ok || o.(*User).Name != name {
			t.Fatalf("big/%s: %v %v", name, o, ok)
		}
	}
	if got, _ := s.ByIndex(cache.NamespaceIndex, "big"); len(got) != n {
		t.Errorf("namespace big: %d objects, want %d", len(got), n)
	}
	small, _ := s.ByIndex(cache.NamespaceIndex, "small")
	if len(small) != (n+9)/10 {
		t.Errorf("namespace small: %d objects", len(small))
	}
	for _, name := range names[:n/2] {
		if _, ok := s.remove("big/" + name); !ok {
			t.Fatalf("remove %s: not there", name)
		}
	}
	if _, ok := s.getByKey("big/" + names[0]); ok {
		t.Error("a removed object is still there")
	}
	if got := len(s.ListKeys()); got != n-n/2+len(small) {
		t.Errorf("%d keys, want %d", got, n-n/2+len(small))
	}
	for _, o := range small {
		s.remove("small/" + o.(*User).Name)
	}
	if _, ok := s.buckets["small"]; ok {
		t.Error("an empty namespace keeps its bucket")
	}
}

// An index keeps the keys of the objects that have a value, and follows their changes.
func TestStoreSparseIndex(t *testing.T) {
	s := newStore(UserIndexers())
	ro := func(ref string) *User {
		return &User{TypeMeta: metav1.TypeMeta{Kind: string(Rollout)}, Namespace: "ns", Name: "demo", Status: &WorkloadStatus{TemplateRef: ref}}
	}
	_ = s.Add(ro("web"))
	_ = s.Add(&User{TypeMeta: metav1.TypeMeta{Kind: string(Rollout)}, Namespace: "ns", Name: "plain", Status: &WorkloadStatus{}})
	if got, _ := s.ByIndex(ByTemplateRef, "ns/web"); len(got) != 1 {
		t.Fatalf("ByTemplateRef ns/web: %v", got)
	}
	_ = s.Update(ro("api"))
	if got, _ := s.ByIndex(ByTemplateRef, "ns/web"); len(got) != 0 {
		t.Errorf("the old value still finds it: %v", got)
	}
	if got, _ := s.ByIndex(ByTemplateRef, "ns/api"); len(got) != 1 {
		t.Errorf("the new value does not find it: %v", got)
	}
	_ = s.Delete(ro("api"))
	if vals := s.ListIndexFuncValues(ByTemplateRef); len(vals) != 0 || len(s.values) != 0 {
		t.Errorf("values left after the delete: %v, %v", vals, s.values)
	}
}

// recordingHandler notes the events a handler of users gets as "add x", "update x finished=…",
// "delete x", "delete (unseen) x".
type recordingHandler struct{ notes }

func (r *recordingHandler) handler() cache.ResourceEventHandler {
	name := func(obj any) string {
		u, _ := UserOf(obj)
		return u.Name
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { r.note("add " + name(obj)) },
		UpdateFunc: func(_, cur any) {
			u, _ := UserOf(cur)
			r.note(fmt.Sprintf("update %s finished=%v", u.Name, u.Finished))
		},
		DeleteFunc: func(obj any) {
			if _, tomb := obj.(cache.DeletedFinalStateUnknown); tomb {
				r.note("delete (unseen) " + name(obj))
				return
			}
			r.note("delete " + name(obj))
		},
	}
}

// The caches' informer stores what it lists and watches, and hands each change to the handlers as a
// view; what a new list no longer holds is deleted.
func TestStoreInformerFollowsListAndWatch(t *testing.T) {
	pod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		p := benchPod(0)
		p.Name, p.Status.Phase, p.ResourceVersion = name, phase, "2"
		return p
	}
	var mu sync.Mutex
	lists := [][]corev1.Pod{{*pod("a", corev1.PodRunning), *pod("b", corev1.PodRunning)}, {*pod("a", corev1.PodRunning)}}
	watches := make(chan *watch.FakeWatcher, 2)
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			items := lists[0]
			if len(lists) > 1 {
				lists = lists[1:]
			}
			return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "2"}, Items: items}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			watches <- w
			return w, nil
		},
	}, noWatchList{})
	r := newReducer(nil, false, false)
	inf := newStoreInformer(lw, &corev1.Pod{}, r.transform, nil)
	users := newViewInformer(userView, inf)
	var rec recordingHandler
	if err := users.AddEventHandler(rec.handler()); err != nil {
		t.Fatal(err)
	}
	go inf.RunWithContext(t.Context())
	if !cache.WaitForCacheSync(t.Context().Done(), inf.HasSynced) {
		t.Fatal("not synced")
	}
	w := <-watches
	w.Add(pod("c", corev1.PodRunning))
	w.Modify(pod("a", corev1.PodSucceeded))
	w.Delete(pod("c", corev1.PodRunning))
	// The watch ends with 410 Gone: the informer lists again, and b is gone from the list.
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"})
	want := []string{"add a", "add b", "add c", "update a finished=true", "delete c", "delete (unseen) b", "update a finished=false"}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Equal(rec.events(), want) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := rec.events(); !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if _, ok, _ := users.Get("tenant-0000", "b"); ok {
		t.Error("b is still cached")
	}
	if got, _ := users.InNamespace("tenant-0000", func(*User) bool { return true }); len(got) != 1 || got[0].Name != "a" {
		t.Errorf("cached: %v, want a", got)
	}
	// A handler added now gets what is cached as adds, first.
	var late recordingHandler
	if err := users.AddEventHandler(late.handler()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a handler added late gets what is cached", func() bool { return slices.Equal(late.events(), []string{"add a"}) })
}

// noWatchList is a client that does not serve watch-lists: the reflector lists.
type noWatchList struct{}

func (noWatchList) IsWatchListSemanticsUnSupported() bool { return true }

// The queue lets go of the array its first list grew it to once it has popped it, and is synced then.
func TestFIFOLetsGoOfItsFirstList(t *testing.T) {
	s := newStore(nil)
	_ = s.Add(&User{Namespace: "ns", Name: "gone"})
	f := newFIFO(s, nil)
	list := make([]any, 1000)
	for i := range list {
		list[i] = &User{Namespace: "ns", Name: fmt.Sprintf("u-%04d", i)}
	}
	if err := f.Replace(list, "1"); err != nil {
		t.Fatal(err)
	}
	var popped []string
	for range len(list) + 1 {
		if f.HasSynced() {
			t.Fatal("synced before the first list was popped")
		}
		_, err := f.Pop(func(obj any, initial bool) error {
			d := obj.(cache.Deltas)[0]
			if !initial {
				t.Errorf("%s %s: not in the initial list", d.Type, keyOf(d.Object))
			}
			popped = append(popped, string(d.Type)+" "+keyOf(d.Object))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if !f.HasSynced() || f.items != nil {
		t.Errorf("synced %v, items %d (cap %d) after the first list", f.HasSynced(), len(f.items), cap(f.items))
	}
	if popped[0] != "Deleted ns/gone" || popped[1] != "Replaced ns/u-0000" || len(popped) != len(list)+1 {
		t.Errorf("popped %v..., %d", popped[:2], len(popped))
	}
}
