package pinning

import (
	"context"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

func replicaSet(t *testing.T, name string, uid types.UID) *caches.User {
	t.Helper()
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: uid,
		OwnerReferences: []metav1.OwnerReference{controlledBy("Deployment", "web", "d-uid")}},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: pod(metav1.OwnerReference{}, nil).Spec}}}
	u, err := caches.Reduce(rs)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// syncOnce runs the controller's sync of key over the fixture's caches and returns the Events it
// recorded.
func syncOnce(t *testing.T, f *fixture, key string) *record.FakeRecorder {
	t.Helper()
	events := record.NewFakeRecorder(5)
	c, err := New(f.hook.Caches, f.hook.Taker, events, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	return events
}

func TestControllerPinsANewRevision(t *testing.T) {
	rs := replicaSet(t, "web-5d8f", "rs-new")
	// The object's v1 snapshot exists already for an older revision: same content, same name.
	v1, _ := SnapshotName(appConfig("v1"))
	old := snapshot(refs.ConfigMap, v1, "app-config", "rs-old")
	// The typed and metadata fakes stand in for one API server: the snapshot is in both.
	existing := &corev1.ConfigMap{ObjectMeta: old.ObjectMeta, Data: appConfig("v1").Data}
	f := newFixture(t, []*caches.User{rs}, []*metav1.PartialObjectMetadata{old}, appConfig("v1"), appSecret(), existing)
	events := syncOnce(t, f, rs.Key())
	// app-config: the existing snapshot gains the new revision as an owner (the one attach step);
	m, err := f.meta.Resource(refs.ConfigMap.GVR()).Namespace(ns).Get(context.Background(), v1, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.OwnerReferences) != 2 || !revision.OwnedBy(&m.ObjectMeta, "rs-old") || !revision.OwnedBy(&m.ObjectMeta, "rs-new") {
		t.Errorf("owners of %s: %v; want rs-old and rs-new", v1, m.OwnerReferences)
	}
	// app-env: a new snapshot.
	sec, _ := SnapshotName(appSecret())
	if _, err := f.kube.CoreV1().Secrets(ns).Get(context.Background(), sec, metav1.GetOptions{}); err != nil {
		t.Errorf("snapshot %s: %v", sec, err)
	}
	if e := <-events.Events; !strings.Contains(e, ReasonPinned) || !strings.Contains(e, "configmap/app-config -> "+v1) {
		t.Errorf("event %q", e)
	}
}

// The revision was pinned a moment ago (by this controller or another replica's webhook) and the object
// changed since; the snapshot cache has not shown the pin yet. Snapshotting again would give the
// revision a second pin, with the new content.
func TestControllerDoesNotPinARevisionTwiceWhileItsCacheLags(t *testing.T) {
	rs := replicaSet(t, "web-5d8f", "rs-new")
	v0 := "app-config-0000000000" // what the revision was created with; the live object is v1 now
	taken := snapshot(refs.ConfigMap, v0, "app-config", "rs-new")
	f := newLaggingFixture(t, []*caches.User{rs}, nil, []*metav1.PartialObjectMetadata{taken}, appConfig("v1"), appSecret())
	c, err := New(f.hook.Caches, f.hook.Taker, record.NewFakeRecorder(5), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(context.Background(), rs.Key()); err != nil {
		t.Fatal(err)
	}
	if got := creates(f); !slices.Equal(got, []string{"secrets"}) {
		t.Errorf("created %v; want only app-env's snapshot: app-config's pin %s exists", got, v0)
	}
	pin, err := f.hook.Taker.Take(context.Background(), rs.Revision(), refs.Ref{Kind: refs.ConfigMap, Name: "app-config"})
	if err != nil || pin != v0 {
		t.Errorf("Take = %q, %v; want the existing pin %s", pin, err, v0)
	}
}

func TestControllerReportsDrift(t *testing.T) {
	rs := replicaSet(t, "web-5d8f", "rs-new")
	v0 := "app-config-0000000000" // what the revision was created with; the live object is v1 now
	f := newFixture(t, []*caches.User{rs}, []*metav1.PartialObjectMetadata{snapshot(refs.ConfigMap, v0, "app-config", "rs-new")})
	events := record.NewFakeRecorder(5)
	c, err := New(f.hook.Caches, f.hook.Taker, events, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(context.Background(), driftKey(refs.ConfigMap, ns, "app-config")); err != nil {
		t.Fatal(err)
	}
	if e := <-events.Events; !strings.Contains(e, ReasonDrift) || !strings.Contains(e, v0) {
		t.Errorf("event %q, want ConfigDrift naming %s", e, v0)
	}
	if d := c.drifted(); len(d) != 1 {
		t.Errorf("drifted %v, want app-config", d)
	}
}

// app-config lost its pin label after an older revision was pinned to it: the new revision reads it
// as it is, and says so (a post-renderer or a patch removing the label must not go unnoticed).
func TestControllerReportsARevisionReadingAnObjectThatLostItsPinLabel(t *testing.T) {
	rs := replicaSet(t, "web-5d8f", "rs-new")
	snaps := []*metav1.PartialObjectMetadata{
		snapshot(refs.ConfigMap, "app-config-aaaaaaaaaa", "app-config", "rs-old"),
		snapshot(refs.Secret, "app-env-cccccccccc", "app-env", "rs-new"),
	}
	f := newFixture(t, []*caches.User{rs}, snaps)
	f.hook.Caches.Pinning = caches.NewPinningForTest([]runtime.Object{appSecret()}, snaps, ns) // app-config unlabelled
	events := syncOnce(t, f, rs.Key())
	if got := creates(f); len(got) != 0 {
		t.Errorf("created %v; want nothing (app-env is pinned already, app-config is not labelled)", got)
	}
	select {
	case e := <-events.Events:
		if !strings.HasPrefix(e, "Warning "+ReasonPinRemoved) || !strings.Contains(e, "configmap/app-config (earlier revisions read its snapshots app-config-aaaaaaaaaa)") {
			t.Errorf("event %q", e)
		}
	default:
		t.Fatal("no event: the revision reads app-config unpinned without a word")
	}
}

// The race "revision event before its namespace's": the revision was skipped (pinning not enabled as
// far as the cache knew); the namespace's arrival, labelled, brings every revision of it back, as a
// label added later does. Other namespaces' revisions, and unlabelled namespaces, bring nothing.
func TestControllerPinsRevisionsOfANamespaceSeenLate(t *testing.T) {
	rs := replicaSet(t, "web-5d8f", "rs-new")
	elsewhere := replicaSet(t, "api-7c9a", "rs-other")
	elsewhere.Namespace = "other"
	labelled := func(name string, on bool) *metav1.PartialObjectMetadata {
		m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if on {
			m.Labels = map[string]string{api.PinningNamespaceLabel: api.PinningEnabled}
		}
		return m
	}
	for _, tt := range []struct {
		name  string
		event func(cache.ResourceEventHandler)
		want  []string
	}{
		{name: "the namespace arrives labelled", event: func(h cache.ResourceEventHandler) { h.OnAdd(labelled(ns, true), false) }, want: []string{rs.Key()}},
		{name: "the namespace arrives unlabelled", event: func(h cache.ResourceEventHandler) { h.OnAdd(labelled(ns, false), false) }},
		{name: "the label is added", event: func(h cache.ResourceEventHandler) { h.OnUpdate(labelled(ns, false), labelled(ns, true)) }, want: []string{rs.Key()}},
		{name: "another label changes", event: func(h cache.ResourceEventHandler) { h.OnUpdate(labelled(ns, true), labelled(ns, true)) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, []*caches.User{rs, elsewhere}, nil)
			c, err := New(f.hook.Caches, f.hook.Taker, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			queued(c) // what New's handlers queued: nothing is started here
			tt.event(c.namespaceHandler())
			if got := queued(c); !slices.Equal(got, tt.want) {
				t.Errorf("queued %v, want %v", got, tt.want)
			}
		})
	}
}

// queued drains the controller's queue and returns its keys in order.
func queued(c *Controller) []string {
	var keys []string
	for c.loop.Queue.Len() > 0 {
		k, _ := c.loop.Queue.Get()
		c.loop.Queue.Done(k)
		keys = append(keys, k)
	}
	return keys
}

// The race "revision event before its object's pin label": the revision was synced while the pin
// cache did not show app-config (labelled, or created labelled, a moment before), and took no
// snapshot of it. The object's arrival in the pin cache brings back the revisions whose templates
// read it, and only those; the sync then pins them.
func TestControllerPinsRevisionsOfAnObjectLabelledLate(t *testing.T) {
	rs := replicaSet(t, "web-5d8f", "rs-new")
	other := &caches.User{TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "ReplicaSet"},
		Name: "api-7c9a", Namespace: ns, UID: "rs-other", Refs: []refs.Ref{{Kind: refs.ConfigMap, Name: "unrelated"}}}
	sec, _ := SnapshotName(appSecret())
	pinned := []*metav1.PartialObjectMetadata{snapshot(refs.Secret, sec, "app-env", "rs-new")} // app-env is pinned already
	f := newFixture(t, []*caches.User{rs, other}, pinned, appConfig("v1"), appSecret())
	f.hook.Caches.Pinning = caches.NewPinningForTest([]runtime.Object{appSecret()}, pinned, ns) // app-config not seen labelled yet
	c, err := New(f.hook.Caches, f.hook.Taker, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	queued(c)
	if _, err := c.sync(context.Background(), rs.Key()); err != nil {
		t.Fatal(err)
	}
	if got := creates(f); len(got) != 0 {
		t.Fatalf("created %v before app-config is seen labelled", got)
	}

	labelled := appConfig("v1")
	if err := c.caches.Pinning.Pins[refs.ConfigMap].Indexers()[0].Add(labelled); err != nil {
		t.Fatal(err)
	}
	c.pinHandler(refs.ConfigMap).OnAdd(labelled, false)
	if got := queued(c); !slices.Equal(got, []string{rs.Key()}) {
		t.Fatalf("queued %v, want the revision reading app-config, %s", got, rs.Key())
	}
	if _, err := c.sync(context.Background(), rs.Key()); err != nil {
		t.Fatal(err)
	}
	v1, _ := SnapshotName(labelled)
	snap, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), v1, metav1.GetOptions{})
	if err != nil || !revision.OwnedBy(&snap.ObjectMeta, "rs-new") {
		t.Errorf("snapshot %s of app-config for rs-new: %v %v", v1, snap, err)
	}
}

// A start queues what a sync would act on, and nothing else (the first list's adds queue nothing: at
// 150,000 Pods, every revision and a key per Pod): a revision of a pinning namespace missing a
// snapshot, one reading an object that lost its pin label, and a pod reading a pinned object by its
// own name.
func TestTheStartQueuesOnlyWhatASyncWouldActOn(t *testing.T) {
	cfg, _ := SnapshotName(appConfig("v1"))
	sec, _ := SnapshotName(appSecret())
	rs := replicaSet(t, "web-5d8f", "rs-new")
	going := replicaSet(t, "web-5d8f", "rs-new")
	going.DeletionTimestamp = &metav1.Time{}
	podReading := func(name string, namespace string) *caches.User {
		p := pod(controlledBy("ReplicaSet", "web-5d8f", "rs-new"), nil)
		p.Name, p.Namespace, p.UID = name, namespace, types.UID("uid-"+name)
		u, err := caches.Reduce(p)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	both := []*metav1.PartialObjectMetadata{snapshot(refs.ConfigMap, cfg, "app-config", "rs-new"), snapshot(refs.Secret, sec, "app-env", "rs-new")}
	for _, tt := range []struct {
		name    string
		users   []*caches.User
		snaps   []*metav1.PartialObjectMetadata
		pins    []runtime.Object // nil: app-config and app-env
		noTaker bool             // admission policy mode: the table controller takes the snapshots
		want    []string
	}{
		{name: "a revision without its snapshots", users: []*caches.User{rs}, want: []string{rs.Key()}},
		{name: "a revision with one of its two", users: []*caches.User{rs}, snaps: both[1:], want: []string{rs.Key()}},
		{name: "a revision with both", users: []*caches.User{rs}, snaps: both},
		{name: "a revision being deleted", users: []*caches.User{going}},
		{name: "policy mode: a revision without its snapshots is the table controller's", users: []*caches.User{rs}, noTaker: true},
		{name: "a revision reading an object that lost its pin label", users: []*caches.User{rs},
			snaps: append(both[1:], snapshot(refs.ConfigMap, "app-config-aaaaaaaaaa", "app-config", "rs-old")), pins: []runtime.Object{appSecret()},
			want: []string{rs.Key()}},
		{name: "a pod reading app-config by its own name, and one of a namespace without pinning",
			users: []*caches.User{rs, podReading("web-5d8f-a1", ns), podReading("web-5d8f-b2", "elsewhere")}, snaps: both,
			want: []string{"audit/" + ns + "/web-5d8f-a1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.users, tt.snaps)
			pins := tt.pins
			if pins == nil {
				pins = []runtime.Object{appConfig("v1"), appSecret()}
			}
			f.hook.Caches.Pinning = caches.NewPinningForTest(pins, tt.snaps, ns)
			taker := f.hook.Taker
			if tt.noTaker {
				taker = nil
			}
			c, err := New(f.hook.Caches, taker, record.NewFakeRecorder(5), nil)
			if err != nil {
				t.Fatal(err)
			}
			c.loop.Start(context.Background())
			if got := queued(c); !slices.Equal(got, tt.want) {
				t.Errorf("the start queued %v, want %v", got, tt.want)
			}
		})
	}
}

// The unpinned-pods gauge counts pods of pinning namespaces, controlled by a revision, that read a
// pinned object (app-config, app-env) by its own name; a pod elsewhere reads what it reads.
func TestUnpinnedPodsAreThoseOfPinningNamespaces(t *testing.T) {
	reduce := func(name, namespace string) *caches.User {
		p := pod(controlledBy("ReplicaSet", "web-5d8f", "rs-uid"), nil)
		p.Name, p.Namespace = name, namespace
		u, err := caches.Reduce(p)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	cs := caches.NewForTest([]*caches.User{reduce("web-a", ns), reduce("web-b", "elsewhere")}, nil)
	cs.Pinning = caches.NewPinningForTest([]runtime.Object{appConfig("v1"), appSecret()}, nil, ns)
	c, err := New(cs, nil, record.NewFakeRecorder(5), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.unpinnedPods(), []string{ns + "/web-a"}; !slices.Equal(got, want) {
		t.Errorf("unpinned pods %v, want %v", got, want)
	}
}

// A pod debugged with an ephemeral container that reads a pinned object by its own name is audited
// again (the update adds a reference no admission of pinning saw); an update that adds no reference
// (a status change) is not.
func TestAnEphemeralContainerReadingMoreBringsThePodBackToTheAudit(t *testing.T) {
	reduce := func(p *corev1.Pod) *caches.User {
		u, err := caches.Reduce(p)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	before := pod(controlledBy("ReplicaSet", "web-5d8f", "rs-uid"), nil)
	before.Name = "web-a"
	debugged := before.DeepCopy()
	debugged.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debugger",
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "other-config"}}}}}}}
	restarted := before.DeepCopy()
	restarted.Status.Phase = corev1.PodRunning
	cs := caches.NewForTest(nil, nil)
	cs.Pinning = caches.NewPinningForTest(nil, nil, ns)
	c, err := New(cs, nil, record.NewFakeRecorder(5), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cur  *corev1.Pod
		want int
	}{{restarted, 0}, {debugged, 1}} {
		c.enqueueAuditIfReadsMore(reduce(before), reduce(tc.cur))
		if got := c.loop.Queue.Len(); got != tc.want {
			t.Errorf("%d keys queued, want %d", got, tc.want)
		}
	}
}
