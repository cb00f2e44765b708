package caches

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func ownedPod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: "7",
		OwnerReferences: []metav1.OwnerReference{ownerRef("apps/v1", "ReplicaSet", "rs", "rs-uid", true)}}}
}

func initialEventsEndBookmark() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
}

// A watch-list's initial events reach the reflector as records (its store keys them by the record's
// own string); the bookmark that ends them, and every event after it, whole (the reflector reads
// their resourceVersion, the queue reduces them); a watch without initial events, whole.
func TestWatchListInitialEventsReachTheReflectorAsRecords(t *testing.T) {
	r := newReducer(nil, false, false)
	for _, c := range []struct {
		name    string
		initial *bool
		send    []watch.Event
		want    []string
	}{
		{"a watch-list", ptr.To(true),
			[]watch.Event{{Type: watch.Added, Object: ownedPod("a")}, {Type: watch.Added, Object: ownedPod("b")},
				{Type: watch.Bookmark, Object: initialEventsEndBookmark()}, {Type: watch.Added, Object: ownedPod("c")},
				{Type: watch.Modified, Object: ownedPod("a")}},
			[]string{"ADDED *caches.podStub", "ADDED *caches.podStub", "BOOKMARK *v1.Pod", "ADDED *v1.Pod", "MODIFIED *v1.Pod"}},
		{"a watch from a list's resourceVersion", nil,
			[]watch.Event{{Type: watch.Added, Object: ownedPod("a")}, {Type: watch.Bookmark, Object: initialEventsEndBookmark()}},
			[]string{"ADDED *v1.Pod", "BOOKMARK *v1.Pod"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := watch.NewFake()
			lw := reducingWatcher{reduce: r.transform, lw: &cache.ListWatch{
				WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fake, nil }}}
			w, err := lw.WatchWithContext(t.Context(), metav1.ListOptions{SendInitialEvents: c.initial})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			go func() {
				for _, e := range c.send {
					fake.Action(e.Type, e.Object)
				}
			}()
			for i, want := range c.want {
				select {
				case e := <-w.ResultChan():
					if got := fmt.Sprintf("%s %T", e.Type, e.Object); got != want {
						t.Errorf("event %d: %s, want %s", i, got, want)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("event %d never came", i)
				}
			}
		})
	}
}

// An informer fed by a watch-list stores what its initial events carried and syncs: the reflector,
// told no type, takes records.
func TestStoreInformerSyncsFromAWatchList(t *testing.T) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return nil, fmt.Errorf("served as a watch-list only")
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			if o.SendInitialEvents != nil && *o.SendInitialEvents {
				go func() {
					for _, name := range []string{"a", "b", "c"} {
						w.Add(ownedPod(name))
					}
					w.Action(watch.Bookmark, initialEventsEndBookmark())
				}()
			}
			return w, nil
		},
	}
	r := newReducer(nil, false, false)
	inf := newStoreInformer(lw, &corev1.Pod{}, r.transform, nil)
	go inf.RunWithContext(t.Context())
	timeout := make(chan struct{})
	timer := time.AfterFunc(10*time.Second, func() { close(timeout) })
	defer timer.Stop()
	if !cache.WaitForCacheSync(timeout, inf.HasSynced) {
		t.Fatal("not synced in 10 s")
	}
	stored := inf.store.List()
	if len(stored) != 3 {
		t.Fatalf("%d objects stored, want 3", len(stored))
	}
	for _, obj := range stored {
		if _, ok := obj.(*podStub); !ok {
			t.Errorf("stored a %T, want a *podStub", obj)
		}
	}
}
