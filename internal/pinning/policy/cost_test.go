package policy

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	clienttesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// snapshotsSeenByMetadata makes the fake metadata client show the snapshots the fake typed client
// creates, as one API server would.
func (f *tableFixture) snapshotsSeenByMetadata(t *testing.T) {
	f.kube.PrependReactor("create", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		cm := a.(clienttesting.CreateAction).GetObject().(*corev1.ConfigMap).DeepCopy()
		cm.UID, cm.ResourceVersion = types.UID("uid-"+cm.Name), "1"
		if err := f.kube.Tracker().Add(cm); err != nil {
			return true, nil, err // AlreadyExists, as the API server says it
		}
		return true, cm, f.meta.Tracker().Add(metaOf(cm))
	})
}

// requests counts the API requests by verb and resource, typed and metadata clients together.
func (f *tableFixture) requests() map[string]int {
	out := map[string]int{}
	for _, actions := range [][]clienttesting.Action{f.kube.Actions(), f.meta.Actions()} {
		for _, a := range actions {
			out[a.GetVerb()+" "+a.GetResource().Resource]++
		}
	}
	return out
}

// A namespace just labelled, or our return after an outage, is many revisions without an entry at
// once; at 50,000 Pods each request waits ~100 ms on the API server. The pass reads each object once
// and lists the snapshots once; each revision then costs one write: the snapshot's create, or its
// ownerReference to the revision. Every revision gets its entry, and the snapshot is owned by each.
func TestTableReadsEachObjectOncePerPass(t *testing.T) {
	const n = 10
	var cached []*appsv1.ReplicaSet
	live := []runtime.Object{appConfig(map[string]string{api.PinLabel: api.PinValue})}
	for i := range n {
		rs := rsOf("web", fmt.Sprintf("web-%d", i), types.UID(fmt.Sprintf("rs-%d", i)), "app-config")
		cached = append(cached, rs)
		live = append(live, rs)
	}
	f := newTableFixture(t, cached, nil, nil, live...)
	f.snapshotsSeenByMetadata(t)
	f.sync(t)

	want := map[string]int{"get configmaps": 1, "list configmaps": 1, "create configmaps": 1, "patch configmaps": n - 1}
	got := f.requests()
	for req, w := range want {
		if got[req] != w {
			t.Errorf("%d × %s, want %d (all: %v)", got[req], req, w, got)
		}
	}
	entries := f.table(t).Spec.Revisions
	snaps := map[string]bool{}
	for i := range n {
		e, ok := entries[fmt.Sprintf("rs-%d", i)]
		if !ok {
			t.Fatalf("no entry for rs-%d: %v", i, entries)
		}
		snap, _ := e.Snapshot(refs.Ref{Kind: refs.ConfigMap, Name: "app-config"})
		snaps[snap] = true
	}
	if len(snaps) != 1 {
		t.Fatalf("the revisions read %v; want one snapshot of the one content", snaps)
	}
	for snap := range snaps {
		m, err := f.meta.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns).Get(context.Background(), snap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if uid := types.UID(fmt.Sprintf("rs-%d", i)); !revision.OwnedBy(&m.ObjectMeta, uid) {
				t.Errorf("snapshot %s is not owned by %s: %v", snap, uid, m.OwnerReferences)
			}
		}
	}
}

// meetingTables is a dynamic client whose PinTable creates wait (up to a bound) until creates of
// `at` namespaces are in flight together.
type meetingTables struct {
	dynamic.Interface
	at   int
	mu   sync.Mutex
	in   map[string]bool
	met  chan struct{}
	once sync.Once
}

func (m *meetingTables) Resource(gvr schema.GroupVersionResource) dynamic.NamespaceableResourceInterface {
	return meetingResource{m.Interface.Resource(gvr), m}
}

type meetingResource struct {
	dynamic.NamespaceableResourceInterface
	m *meetingTables
}

func (r meetingResource) Namespace(ns string) dynamic.ResourceInterface {
	return meetingNamespace{r.NamespaceableResourceInterface.Namespace(ns), r.m, ns}
}

type meetingNamespace struct {
	dynamic.ResourceInterface
	m  *meetingTables
	ns string
}

func (n meetingNamespace) Create(ctx context.Context, obj *unstructured.Unstructured, o metav1.CreateOptions, sub ...string) (*unstructured.Unstructured, error) {
	n.m.mu.Lock()
	n.m.in[n.ns] = true
	if len(n.m.in) >= n.m.at {
		n.m.once.Do(func() { close(n.m.met) })
	}
	n.m.mu.Unlock()
	select {
	case <-n.m.met:
	case <-time.After(5 * time.Second):
	}
	return n.ResourceInterface.Create(ctx, obj, o, sub...)
}

// A fresh start in a cluster labelled at once is a thousand namespaces, each a chain of requests that
// wait on the API server: one worker syncs several namespaces at once, not one after the other.
func TestTableSyncsSeveralNamespacesAtOnce(t *testing.T) {
	var cached []*appsv1.ReplicaSet
	var live []runtime.Object
	namespaces := []string{"team-a", "team-b", "team-c"}
	for i, n := range namespaces {
		rs := rsReading(fmt.Sprintf("web-%d", i), types.UID(fmt.Sprintf("rs-%d", i)), true)
		rs.Namespace = n
		cached = append(cached, rs)
		live = append(live, rs)
	}
	f := newTableFixture(t, cached, nil, nil, live...)
	meeting := &meetingTables{Interface: f.ctl.clients.Dynamic, at: len(namespaces), in: map[string]bool{}, met: make(chan struct{})}
	f.ctl.clients.Dynamic = meeting

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.ctl.Loop().Run(ctx, 1) }()
	defer func() { cancel(); <-done }()
	for _, n := range namespaces {
		f.ctl.loop.Queue.Add(n)
	}
	select {
	case <-meeting.met:
	case <-time.After(4 * time.Second):
		meeting.mu.Lock()
		defer meeting.mu.Unlock()
		t.Fatalf("the tables of %d namespaces were created together, want %d: one worker syncs one namespace at a time", len(meeting.in), len(namespaces))
	}
}
