package protection

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

// queued drains the controller's queue and returns its keys, sorted.
func (f *fixture) queued() []string {
	var keys []string
	for f.c.loop.Queue.Len() > 0 {
		k, _ := f.c.loop.Queue.Get()
		f.c.loop.Queue.Done(k)
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func cmKey(name string) string { return configKey(refs.ConfigMap, testutil.Namespace, name) }

// The configs of the re-queue tests, around ReplicaSet web-5d8f whose template names app-config:
// what it could be holding (app-config by name, its pinning snapshot by ownership) and what it cannot.
func requeueConfigs() []*metav1.PartialObjectMetadata {
	heldByName := config("app-config", true, true, true)
	notOurs := snapshot("theirs-held", true, "web-5d8f")
	notOurs.Finalizers = []string{"example.com/keep"}
	return []*metav1.PartialObjectMetadata{
		heldByName,
		snapshot("app-config-1f2e", true, "web-5d8f"),             // held for the revision that owns it
		snapshot("app-config-3a4b", true, "web-7c9a", "web-5d8f"), // shared with another revision
		snapshot("app-config-5c6d", false, "web-5d8f"),            // owned, not being deleted
		snapshot("app-config-7e8f", true, "web-7c9a"),             // held for another revision
		config("unrelated", true, true, true),
		notOurs,
	}
}

// A user's deletion or change re-examines every held object it could have been holding: those it
// references and those that name it as owner (the order "snapshot deletion seen before its
// ReplicaSet's deletion" left the snapshot held forever when only the first were).
func TestUserEventsRequeueWhatTheUserCouldHold(t *testing.T) {
	rs := replicaSet("web-5d8f", []string{"app-config"})
	both := []string{cmKey("app-config"), cmKey("app-config-1f2e"), cmKey("app-config-3a4b")}
	podOfRS := pod("web-5d8f-x", []string{"app-config-1f2e"}, corev1.PodRunning)
	finished := pod("web-5d8f-x", []string{"app-config-1f2e"}, corev1.PodSucceeded)
	tests := []struct {
		name  string
		event func(cache.ResourceEventHandler)
		want  []string
	}{
		{name: "the ReplicaSet is deleted", event: func(h cache.ResourceEventHandler) { h.OnDelete(rs) }, want: both},
		{name: "its deletion arrives as a tombstone", event: func(h cache.ResourceEventHandler) {
			h.OnDelete(cache.DeletedFinalStateUnknown{Key: testutil.Namespace + "/web-5d8f", Obj: rs})
		}, want: both},
		{name: "it starts being deleted (orphan or foreground propagation)", event: func(h cache.ResourceEventHandler) { h.OnUpdate(rs, deleting(rs)) }, want: both},
		{name: "its template stops naming app-config", event: func(h cache.ResourceEventHandler) {
			h.OnUpdate(rs, replicaSet("web-5d8f", []string{"other"}))
		}, want: both},
		{name: "a status update: nothing it could hold changed", event: func(h cache.ResourceEventHandler) { h.OnUpdate(rs, rs) }},
		{name: "already being deleted: its deletion changes nothing more", event: func(h cache.ResourceEventHandler) {
			h.OnUpdate(deleting(rs), deleting(rs))
		}},
		{name: "a pod reading the snapshot by name finishes", event: func(h cache.ResourceEventHandler) { h.OnUpdate(podOfRS, finished) },
			want: []string{cmKey("app-config-1f2e")}},
		{name: "deleted and created again under its name while the watch was down (a relist's update)", event: func(h cache.ResourceEventHandler) {
			again := rs.DeepCopyObject().(*caches.User)
			again.UID = "uid-web-5d8f-again"
			h.OnUpdate(rs, again)
		}, want: both},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []*caches.User{rs}, nil, requeueConfigs())
			tt.event(f.c.userHandler())
			if got := f.queued(); !slices.Equal(got, tt.want) {
				t.Errorf("re-queued %v, want %v", got, tt.want)
			}
		})
	}
}

// The regression of issue 20 end to end in the controller: the snapshot's deletion is synced while
// its ReplicaSet is still cached (held), then the ReplicaSet's deletion arrives and lets it go.
func TestASnapshotHeldForItsRevisionGoesWithTheRevision(t *testing.T) {
	rs := replicaSet("web-5d8f", []string{"app-config"})
	snap := snapshot("app-config-1f2e", true, "web-5d8f")
	f := newFixture(t, []*caches.User{rs}, nil, []*metav1.PartialObjectMetadata{snap})
	f.sync("app-config-1f2e")
	if e := f.lastEvent(); e != "Normal DeletionHeld in use by replicaset/web-5d8f: deletion waits until nothing uses it" {
		t.Fatalf("first sync: event %q, want the hold for replicaset/web-5d8f", e)
	}

	// The ReplicaSet is deleted: gone from the API server and the cache, then its delete event.
	f.c.live.looker = lookerOf(liveUsers(nil))
	for _, idx := range f.c.caches.Users[caches.ReplicaSet].Indexers() {
		if err := idx.Delete(rs); err != nil {
			t.Fatal(err)
		}
	}
	f.c.userHandler().OnDelete(rs)
	keys := f.queued()
	if !slices.Equal(keys, []string{cmKey("app-config-1f2e")}) {
		t.Fatalf("the ReplicaSet's deletion re-queued %v, want the snapshot it held", keys)
	}
	f.sync("app-config-1f2e")
	if e := f.lastEvent(); e != "Normal DeletionReleased nothing uses it any more: deletion completes" {
		t.Errorf("second sync: event %q, want the release", e)
	}
	if got := f.get("app-config-1f2e"); slices.Contains(got.Finalizers, "configmap-attacher.io/in-use-protection") {
		t.Errorf("finalizers %v: still held", got.Finalizers)
	}
}

// The backstop: every held object is queued again, whatever events came; nothing else is.
func TestResyncQueuesEveryHeldObjectAndNothingElse(t *testing.T) {
	f := newFixture(t, nil, nil, requeueConfigs())
	f.c.resyncHeld(context.Background())
	want := []string{cmKey("app-config"), cmKey("app-config-1f2e"), cmKey("app-config-3a4b"), cmKey("app-config-7e8f"), cmKey("unrelated")}
	if got := f.queued(); !slices.Equal(got, want) {
		t.Errorf("resync queued %v, want every held object %v", got, want)
	}

	empty := newFixture(t, nil, nil, []*metav1.PartialObjectMetadata{config("in-use", true, false, true), config("not-opted-in", false, true, true)})
	empty.c.resyncHeld(context.Background())
	if got := empty.queued(); len(got) != 0 {
		t.Errorf("resync with nothing held queued %v", got)
	}
}

// The oldest hold's age is the alert's input: from the earliest deletionTimestamp among held objects
// only, 0 when nothing is held.
func TestOldestHoldAge(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	at := func(m *metav1.PartialObjectMetadata, ago time.Duration) *metav1.PartialObjectMetadata {
		m.DeletionTimestamp = &metav1.Time{Time: now.Add(-ago)}
		return m
	}
	notOurs := at(config("not-ours", true, true, false), 48*time.Hour)
	tests := []struct {
		name    string
		configs []*metav1.PartialObjectMetadata
		want    time.Duration
		wantN   int
	}{
		{name: "nothing held", configs: []*metav1.PartialObjectMetadata{config("a", true, false, true), notOurs}},
		{name: "one held", configs: []*metav1.PartialObjectMetadata{at(config("a", true, true, true), 90*time.Second), notOurs},
			want: 90 * time.Second, wantN: 1},
		{name: "the oldest of several", configs: []*metav1.PartialObjectMetadata{at(config("a", true, true, true), time.Minute),
			at(snapshot("b", true, "web-1"), 3*time.Hour), at(config("c", true, true, true), time.Hour)}, want: 3 * time.Hour, wantN: 3},
		{name: "a clock behind the API server's: not negative", configs: []*metav1.PartialObjectMetadata{at(config("a", true, true, true), -time.Second)},
			wantN: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nil, nil, tt.configs)
			f.c.now = func() time.Time { return now }
			if got := f.c.oldestHoldAge(); got != tt.want {
				t.Errorf("oldest hold age %s, want %s", got, tt.want)
			}
			if n, _ := f.c.holds(); n != tt.wantN {
				t.Errorf("%d held, want %d", n, tt.wantN)
			}
		})
	}
}

// The order "a revision pinned to a snapshot being deleted, then our release of it": the revision's
// ownerReference reached the snapshot (pinning's Take, a revert to a pruned revision's content) after
// the cache showed it, so the cache still says nothing owns it. The release is conditional on the
// version it was decided from: refused, retried, and the next look holds the snapshot for the revision.
func TestReleaseIsConditionalOnTheVersionItWasDecidedOn(t *testing.T) {
	seen := snapshot("app-config-1f2e", true, "web-5d8f") // web-5d8f was pruned
	seen.ResourceVersion = "1"
	now := snapshot("app-config-1f2e", true, "web-5d8f", "web-9e0a")
	now.ResourceVersion = "2"
	web9e0a := replicaSet("web-9e0a", []string{"app-config"})
	f := newFixture(t, nil, []*caches.User{web9e0a}, []*metav1.PartialObjectMetadata{now})
	for _, idx := range f.c.caches.Configs[refs.ConfigMap].Indexers() {
		if err := idx.Update(seen); err != nil {
			t.Fatal(err)
		}
	}
	f.meta.PrependReactor("patch", "configmaps", testutil.VersionPrecondition(now.ResourceVersion))

	_, err := f.c.sync(context.Background(), cmKey(now.Name))
	if !apierrors.IsConflict(err) {
		t.Errorf("sync from the stale version: %v, want a conflict (retried)", err)
	}
	if got := f.get(now.Name); !slices.Contains(got.Finalizers, api.InUseFinalizer) {
		t.Fatalf("finalizers %v: released on the strength of a stale version", got.Finalizers)
	}

	for _, idx := range f.c.caches.Configs[refs.ConfigMap].Indexers() { // its update event
		if err := idx.Update(now); err != nil {
			t.Fatal(err)
		}
	}
	f.sync(now.Name)
	if e := f.lastEvent(); !strings.Contains(e, "DeletionHeld in use by replicaset/web-9e0a") {
		t.Errorf("event %q, want the hold for replicaset/web-9e0a", e)
	}
	if got := f.get(now.Name); !slices.Contains(got.Finalizers, api.InUseFinalizer) {
		t.Errorf("finalizers %v: want it held for web-9e0a", got.Finalizers)
	}
}
