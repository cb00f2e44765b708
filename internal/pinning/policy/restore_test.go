package policy

import (
	"context"
	"strings"
	"testing"
	"time"

	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
)

// rsOf is ReplicaSet name (uid) of Deployment deployment, its pods reading config (optionally).
func rsOf(deployment, name string, uid types.UID, config string) *appsv1.ReplicaSet {
	rs := rsReading(name, uid, config != "app-config")
	rs.OwnerReferences[0].Name, rs.OwnerReferences[0].UID = deployment, types.UID(deployment+"-uid")
	rs.Spec.Template.Spec.Volumes[0].ConfigMap.Name = config
	return rs
}

// tablesLive are the tables the fake API server holds, by name.
func (f *tableFixture) tablesLive(t *testing.T) map[string]*Table {
	t.Helper()
	list, err := f.dynamic.Resource(GVR).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*Table{}
	for i := range list.Items {
		tb, err := FromUnstructured(&list.Items[i])
		if err != nil {
			t.Fatal(err)
		}
		out[tb.Name] = tb
	}
	return out
}

// cacheCatchesUp makes the tables' cache show what the API server holds.
func (f *tableFixture) cacheCatchesUp(t *testing.T) {
	t.Helper()
	idx := f.ctl.tables.Indexers()[0]
	for _, o := range idx.List() {
		_ = idx.Delete(o)
	}
	for _, tb := range f.tablesLive(t) {
		u, err := tb.toUnstructured()
		if err != nil {
			t.Fatal(err)
		}
		if err := idx.Add(u); err != nil {
			t.Fatal(err)
		}
	}
}

// deleteTable is `kubectl delete pintable name`, and the cache seeing it go.
func (f *tableFixture) deleteTable(t *testing.T, name string) {
	t.Helper()
	u, err := f.dynamic.Resource(GVR).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.dynamic.Resource(GVR).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.ctl.tables.Indexers()[0].Delete(u)
	f.ctl.tableDeleted(u)
}

func (f *tableFixture) sync(t *testing.T) {
	t.Helper()
	if _, err := f.ctl.sync(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
}

// held is which table holds each entry.
func heldBy(tables map[string]*Table) map[string]string {
	out := map[string]string{}
	for name, tb := range tables {
		for key := range tb.Spec.Revisions {
			out[key] = name
		}
	}
	return out
}

// A table deleted by anyone but us (`kubectl delete pintable pins`, or a shard pins-N) is put back from
// what the controller knows, and counted: while it is gone the gate refuses the pods of the revisions
// it held, and with it put back they are pinned again.
func TestTableDeletedByAnyoneIsPutBack(t *testing.T) {
	for _, deleted := range []string{TableName, TableName + "-1"} {
		t.Run(deleted, func(t *testing.T) {
			web, api2 := rsOf("web", "web-5d8f", "rs-1", "app-config"), rsOf("api", "api-7c9b", "rs-2", "api-config")
			cm := appConfig(map[string]string{api.PinLabel: api.PinValue})
			f := newTableFixture(t, []*appsv1.ReplicaSet{web, api2}, []runtime.Object{cm}, nil, cm, web, api2)
			f.ctl.opts.MaxTableBytes = 150 // web's entry in a shard, api's in the namespace's table
			f.sync(t)
			f.cacheCatchesUp(t)
			before := f.tablesLive(t)
			if len(before) != 2 {
				t.Fatalf("tables %v, want pins and one shard", heldBy(before))
			}

			t.Logf("when: PinTable %s is deleted by someone else", deleted)
			f.deleteTable(t, deleted)
			f.sync(t)

			after := f.tablesLive(t)
			if got, want := heldBy(after), heldBy(before); len(got) != 2 || got["rs-1"] != want["rs-1"] || got["rs-2"] != want["rs-2"] {
				t.Fatalf("entries held by %v after the deletion, want %v", got, want)
			}
			if e := after[heldBy(after)["rs-1"]].Spec.Revisions["rs-1"]; e.ConfigMaps["app-config"] != before[heldBy(before)["rs-1"]].Spec.Revisions["rs-1"].ConfigMaps["app-config"] {
				t.Errorf("rs-1's entry put back as %+v", e)
			}
			if n := promtestutil.ToFloat64(f.ctl.restores.WithLabelValues("deleted")); n != 1 {
				t.Errorf("configmap_attacher_pin_table_restores_total{cause=deleted} = %v, want 1", n)
			}
		})
	}
}

// A table edited by anyone but us (an entry pointed at another object, or removed) is written back as
// the controller wrote it: what a revision's pods read is ours to say.
func TestTableEditedByAnyoneIsPutBack(t *testing.T) {
	rs := rsReading("web-5d8f", "rs-1", false)
	cm := appConfig(map[string]string{api.PinLabel: api.PinValue})
	f := newTableFixture(t, []*appsv1.ReplicaSet{rs}, []runtime.Object{cm}, nil, cm, rs)
	f.sync(t)
	f.cacheCatchesUp(t)
	ours := f.table(t).Spec.Revisions["rs-1"].ConfigMaps["app-config"]

	t.Log("when: someone points rs-1's app-config at db-password's snapshot")
	edited := f.table(t)
	edited.Spec.Revisions["rs-1"] = Entry{Revision: "ReplicaSet/web-5d8f", ConfigMaps: map[string]string{"app-config": "db-password-0123456789"}}
	edited.ResourceVersion = "999"
	u, err := edited.toUnstructured()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.dynamic.Resource(GVR).Namespace(ns).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.cacheCatchesUp(t)
	f.sync(t)

	if got := f.table(t).Spec.Revisions["rs-1"].ConfigMaps["app-config"]; got != ours {
		t.Fatalf("rs-1 reads app-config as %s, want %s", got, ours)
	}
	if n := promtestutil.ToFloat64(f.ctl.restores.WithLabelValues("edited")); n != 1 {
		t.Errorf("configmap_attacher_pin_table_restores_total{cause=edited} = %v, want 1", n)
	}
}

// A table the controller finds at its start (written while it was away) is taken only where each
// value names a snapshot of the object it maps: an entry pointing app-config at anything else is
// pinned again, to app-config's own snapshot.
func TestTableFoundAtStartMapsObjectsOnlyToTheirSnapshots(t *testing.T) {
	rs := rsReading("web-5d8f", "rs-1", false)
	cm := appConfig(map[string]string{api.PinLabel: api.PinValue})
	forged := newTable(ns, TableName, TableSpec{Revisions: map[string]Entry{
		"rs-1": {Revision: "ReplicaSet/web-5d8f", ConfigMaps: map[string]string{"app-config": "db-password-0123456789"}},
	}})
	f := newTableFixture(t, []*appsv1.ReplicaSet{rs}, []runtime.Object{cm}, []*Table{forged}, cm, rs)
	f.sync(t)
	got := f.table(t).Spec.Revisions["rs-1"].ConfigMaps["app-config"]
	if !strings.HasPrefix(got, "app-config-") {
		t.Fatalf("rs-1 reads app-config as %q, want a snapshot of app-config", got)
	}
	if _, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), got, metav1.GetOptions{}); err != nil {
		t.Errorf("the snapshot %s: %v", got, err)
	}
}

// A namespace just labelled gets its (empty) table before the controller reads any revision's
// objects: a long pass over the revisions keeps no table from existing.
func TestTableMadeBeforeTheRevisionsAreRead(t *testing.T) {
	rs := rsReading("web-5d8f", "rs-1", false)
	cm := appConfig(map[string]string{api.PinLabel: api.PinValue})
	f := newTableFixture(t, []*appsv1.ReplicaSet{rs}, nil, nil, cm, rs)
	var sawTable []bool
	f.kube.PrependReactor("get", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		_, err := f.dynamic.Resource(GVR).Namespace(ns).Get(context.Background(), TableName, metav1.GetOptions{})
		sawTable = append(sawTable, err == nil)
		return false, nil, nil
	})
	f.sync(t)
	if len(sawTable) == 0 || !sawTable[0] {
		t.Fatalf("the revision's objects were read before the namespace had a table (%v)", sawTable)
	}
}

// A revision waiting for an object that does not exist is looked at again on its own clock: a sync of
// the namespace right after does not read it again, unless it changed (scaled up); other revisions
// get their entries meanwhile.
func TestTableLooksAgainAtAWaitingRevisionOnItsOwnClock(t *testing.T) {
	history := rsReading("web-5d8f", "rs-1", false) // reads app-config, which is gone
	history.Spec.Replicas = ptr.To(int32(0))
	current := rsReading("web-7c9b", "rs-2", true) // reads app-config optionally: an entry at once
	f := newTableFixture(t, []*appsv1.ReplicaSet{history, current}, nil, nil, history, current)
	reads := func() int {
		n := 0
		for _, a := range f.kube.Actions() {
			if g, ok := a.(clienttesting.GetAction); ok && g.GetResource().Resource == "replicasets" && g.GetName() == history.Name {
				n++
			}
		}
		f.kube.ClearActions()
		return n
	}
	res, err := f.ctl.sync(context.Background(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if n := reads(); n != 1 || res.RequeueAfter <= 0 || res.RequeueAfter > waitRetry {
		t.Fatalf("first look: %d reads of the waiting ReplicaSet, requeue %s; want 1 and a look again within %s", n, res.RequeueAfter, waitRetry)
	}
	if _, ok := f.table(t).Spec.Revisions["rs-2"]; !ok {
		t.Error("the other revision got no entry while rs-1 waits")
	}
	f.sync(t)
	if n := reads(); n != 0 {
		t.Errorf("a sync right after read the waiting revision %d times, want 0", n)
	}

	t.Log("when: the history revision is scaled up (rolled back to)")
	history.Spec.Replicas, history.Generation = ptr.To(int32(2)), 2
	f = newTableFixture(t, []*appsv1.ReplicaSet{history, current}, nil, nil, history, current)
	f.sync(t)
	reads()
	w := f.ctl.waitOf(ns, "rs-1")
	if w == nil || !w.pods {
		t.Fatalf("waiting state %+v, want a revision that wants pods", w)
	}
	if w.due(time.Now(), 2) || !w.due(time.Now(), 3) {
		t.Error("a revision is looked at again at once when its generation changes, not before its clock otherwise")
	}
}

// The clock of the table in wait.go: a revision that wants pods is looked at every waitRetry; one
// with none, twice as long each time up to maxWaitRetry.
func TestWaitingRetry(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		pods  bool
		looks int
		want  time.Duration
	}{
		{true, 1, waitRetry}, {true, 10, waitRetry},
		{false, 1, waitRetry}, {false, 2, 2 * waitRetry}, {false, 4, 8 * waitRetry}, {false, 20, maxWaitRetry},
	} {
		w := &waiting{}
		for range tc.looks {
			w.retry(now, 1, tc.pods)
		}
		if w.delay != tc.want || !w.next.Equal(now.Add(tc.want)) {
			t.Errorf("pods %v, %d looks: next in %s, want %s", tc.pods, tc.looks, w.delay, tc.want)
		}
	}
}

// The decision table of wake.go.
func TestShouldWake(t *testing.T) {
	for _, tc := range []struct {
		f    wakeFacts
		want bool
	}{
		{wakeFacts{age: time.Hour, podsMissing: true}, false}, // webhook mode: no pod was refused for an entry
		{wakeFacts{enforced: true, wasPresent: true, age: time.Hour, podsMissing: true}, false},
		{wakeFacts{enforced: true, age: wakeAge / 2, podsMissing: true}, false},
		{wakeFacts{enforced: true, age: time.Minute}, false},
		{wakeFacts{enforced: true, age: time.Minute, podsMissing: true}, true},
	} {
		if got := shouldWake(tc.f); got != tc.want {
			t.Errorf("shouldWake(%+v) = %v, want %v", tc.f, got, tc.want)
		}
	}
}

// A revision whose pods were refused while it had no entry (made while we were away): once its entry
// is written, its controller is woken by an annotation of ours on the ReplicaSet's metadata, taken off
// again a moment later. Nothing else of the ReplicaSet changes.
func TestTableWakesTheControllerOfARevisionRefusedUntilItsEntry(t *testing.T) {
	rs := rsReading("web-5d8f", "rs-1", false)
	rs.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Minute))
	rs.Spec.Replicas = ptr.To(int32(2))
	cm := appConfig(map[string]string{api.PinLabel: api.PinValue})
	f := newTableFixture(t, []*appsv1.ReplicaSet{rs}, nil, nil, cm, rs)
	f.sync(t)
	live, err := f.kube.AppsV1().ReplicaSets(ns).Get(context.Background(), rs.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := live.Annotations[api.PinEntryAnnotation]; !ok {
		t.Fatalf("ReplicaSet annotations %v: its controller was not woken", live.Annotations)
	}
	if n := promtestutil.ToFloat64(f.ctl.wakes.WithLabelValues("ReplicaSet")); n != 1 {
		t.Errorf("configmap_attacher_pin_wakes_total{kind=ReplicaSet} = %v, want 1", n)
	}
	f.ctl.clearWakes(context.Background(), ns, time.Now().Add(wakeClear))
	live, err = f.kube.AppsV1().ReplicaSets(ns).Get(context.Background(), rs.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := live.Annotations[api.PinEntryAnnotation]; ok || live.Spec.Template.Annotations != nil {
		t.Errorf("after the wake-up, annotations %v, template annotations %v: want none of ours", live.Annotations, live.Spec.Template.Annotations)
	}

	t.Log("and: a revision whose pods all exist, or one just made, is not woken")
	for _, tc := range []struct {
		age     time.Duration
		created int32
	}{{time.Minute, 2}, {0, 0}} {
		rs := rsReading("web-5d8f", "rs-1", false)
		created := time.Now().Truncate(time.Second)
		rs.CreationTimestamp = metav1.NewTime(created)
		rs.Spec.Replicas, rs.Status.Replicas = ptr.To(int32(2)), tc.created
		f := newTableFixture(t, []*appsv1.ReplicaSet{rs}, nil, nil, cm, rs)
		f.clock.SetTime(created.Add(tc.age)) // its age when the entry is written, however slow the machine
		f.sync(t)
		for _, a := range f.kube.Actions() {
			if a.GetVerb() == "patch" {
				t.Errorf("age %s, %d of 2 pods: %s %s", tc.age, tc.created, a.GetVerb(), a.GetResource().Resource)
			}
		}
	}
}

// A revision that wants pods and has had no entry for longer than the warning threshold: a Warning
// Event on its workload, and configmap_attacher_pin_revisions_waiting counts it.
func TestTableWarnsOnTheWorkloadOfARevisionWaitingLong(t *testing.T) {
	rs := rsReading("web-5d8f", "rs-1", false) // app-config does not exist
	f := newTableFixture(t, []*appsv1.ReplicaSet{rs}, nil, nil, rs)
	f.ctl.opts.WaitWarning = time.Nanosecond
	f.sync(t)
	var warned bool
	for len(f.events.Events) > 0 {
		ev := <-f.events.Events
		if strings.HasPrefix(ev, corev1.EventTypeWarning+" "+ReasonEntryWaiting) && strings.Contains(ev, "web-5d8f") && strings.Contains(ev, "configmap/app-config") {
			warned = true
		}
	}
	if !warned {
		t.Error("no PinEntryWaiting Warning naming the revision and what it waits for")
	}
	if n := f.ctl.waitingLong(time.Now()); n != 1 {
		t.Errorf("revisions waiting long: %d, want 1", n)
	}
}
