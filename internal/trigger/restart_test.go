package trigger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/testutil"
)

// The trigger across restarts, failovers and a lost key (issue 50): a fresh controller stands in for a
// new leader, or the process started again, in a forced order of events. Each test failed on main at
// b57d225.

// stop stands the controller down: events from now on reach a controller that is thrown away (the
// caches and the API server still change).
func (f *fixture) stop() {
	f.t.Helper()
	c, err := New(f.cs, f.kube, f.dyn, nil, nil, Options{Settle: 5 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	f.c = c
}

// restart starts a fresh controller: a new leader, or the process started again. What it knows comes
// from the API server and the caches alone; the key watch lists the key Secret as it is now.
func (f *fixture) restart() {
	f.t.Helper()
	f.metrics = metrics.New()
	c, err := New(f.cs, f.kube, f.dyn, f.events, f.metrics, Options{Settle: 5 * time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	c.now = func() time.Time { return f.now }
	c.key.now = c.now
	f.c = c
	f.listKey()
}

// readsSecret is the fixture's Deployment reading app-config and Secret db-creds (hunter2), seen.
func readsSecret(t *testing.T) *fixture {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.putOpaque("db-creds", map[string]string{"password": "hunter2"})
	f.deployment.Spec.Template.Spec = testutil.PodSpec([]string{"app-config"}, "db-creds")
	f.deployment.Generation++
	f.observe()
	f.sync()
	return f
}

// readingSecret is readsSecret, then db-creds changed to hunter3 by an edit the controller started
// revision 2 for.
func readingSecret(t *testing.T) *fixture {
	f := readsSecret(t)
	f.putOpaque("db-creds", map[string]string{"password": "hunter3"})
	if n := f.settleThenSync(0); n != 1 {
		t.Fatalf("%d writes for the edit of db-creds, want 1", n)
	}
	f.tick(time.Second)
	f.observe()
	f.sync()
	f.recorded()
	return f
}

// deleteKey deletes the hash key Secret on the API server.
func (f *fixture) deleteKey() {
	f.t.Helper()
	if err := f.kube.CoreV1().Secrets(DefaultKeySecret.Namespace).Delete(context.Background(), DefaultKeySecret.Name, metav1.DeleteOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

// Finding 1: a lost or rotated key starts nothing for content that did not change, and a real edit
// after it starts exactly one revision.
func TestALostOrRotatedKeyStartsNothing(t *testing.T) {
	t.Run("the key Secret deleted and the controller restarted", func(t *testing.T) {
		f := readingSecret(t)
		f.stop()
		f.deleteKey()
		f.restart()
		_, _ = f.try()
		if n := f.settleThenSync(1); n != 0 {
			t.Fatalf("%d writes after a restart with a new key, nothing edited: want none (%v)", n, f.applied)
		}
		msg := f.expectEvent("Warning " + ReasonKeyChanged)
		if !strings.Contains(msg, "carried over") {
			t.Errorf("the Warning does not say the contents were carried over: %s", msg)
		}
		if n := testCounter(t, f.metrics, "configmap_attacher_config_hash_key_changed_total"); n != 1 {
			t.Errorf("configmap_attacher_config_hash_key_changed_total %v, want 1", n)
		}
		f.putOpaque("db-creds", map[string]string{"password": "hunter4"})
		if n := f.settleThenSync(1); n != 1 {
			t.Fatalf("%d writes for a real edit after the new key, want 1", n)
		}
	})
	t.Run("the key Secret deleted, and the first look of the restarted controller before its key watch lists", func(t *testing.T) {
		f := readingSecret(t)
		f.stop()
		f.deleteKey()
		f.restart()
		f.c.key.mu.Lock()
		f.c.key.listed, f.c.key.cur, f.c.key.known = false, nil, map[string][]byte{} // the watch not listed yet
		f.c.key.mu.Unlock()
		_, _ = f.try() // decided from the record: db-creds is at the version it noted
		f.listKey()
		if f.c.loop.Queue.Len() == 0 {
			t.Fatal("the key watch's list queued nothing: the record is carried over to the new key only at the next change")
		}
		_, _ = f.try()
		if n := f.settleThenSync(1); n != 0 {
			t.Fatalf("%d writes, nothing edited: want none (%v)", n, f.applied)
		}
		f.expectEvent("Warning " + ReasonKeyChanged)
		if _, err := f.kube.CoreV1().Secrets(DefaultKeySecret.Namespace).Get(context.Background(), DefaultKeySecret.Name, metav1.GetOptions{}); err != nil {
			t.Errorf("no new key made: %v", err)
		}
	})
	t.Run("the key replaced while the controller runs", func(t *testing.T) {
		f := readingSecret(t)
		s, err := f.kube.CoreV1().Secrets(DefaultKeySecret.Namespace).Get(context.Background(), DefaultKeySecret.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Data[keyData] = []byte("fedcba9876543210fedcba9876543210") // kubectl apply of a new key
		if _, err := f.kube.CoreV1().Secrets(s.Namespace).Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.listKey() // the watch delivers it
		_, _ = f.try()
		if n := f.settleThenSync(1); n != 0 {
			t.Fatalf("%d writes after the key was replaced, nothing edited: want none (%v)", n, f.applied)
		}
		f.putOpaque("db-creds", map[string]string{"password": "hunter4"})
		if n := f.settleThenSync(1); n != 1 {
			t.Fatalf("%d writes for a real edit after the new key, want 1", n)
		}
		// By hand, hunter4 under the new key and then the value (hunter4 under the old key gives f2bd6e00e8.ec4f8a):
		//	printf '%s' '{"type":"Opaque","data":{"password":"aHVudGVyNA=="}}' | openssl dgst -sha256 -hmac fedcba9876543210fedcba9876543210   # cd1e80f853
		//	printf '%s' '{"ConfigMap/app-config":"8774ad9c59","Secret/db-creds":"cd1e80f853"}' | sha256sum          # 4217d3ce02
		//	printf '%s' 'configmap-attacher.io/config-hash:4217d3ce02' | sha256sum | cut -c1-6                         # 424068
		if v, _ := f.templateHash(); v != "4217d3ce02.424068" {
			t.Errorf("config-hash %q, want 4217d3ce02.424068: the key is read once and kept, not watched", v)
		}
	})
	t.Run("the key lost while a Secret changed: a Warning names it, and its revision starts", func(t *testing.T) {
		f := readingSecret(t)
		f.stop()
		f.deleteKey()
		f.putOpaque("db-creds", map[string]string{"password": "hunter4"}) // while the controller was down
		f.restart()
		_, _ = f.try()
		if n := f.settleThenSync(1); n != 1 {
			t.Fatalf("%d writes, want 1: db-creds changed while the controller was down", n)
		}
		msg := f.expectEvent("Warning " + ReasonKeyChanged)
		if !strings.Contains(msg, "Secret/db-creds changed") {
			t.Errorf("the Warning does not name the Secret counted as changed: %s", msg)
		}
	})
}

// Finding 2: what a new process needs to judge a revision made while it was away comes from the API
// server: an edit made meanwhile is never swallowed, and nothing changed starts nothing.
func TestNoEditIsSwallowedAcrossARestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given func(f *fixture) // the record and the revisions when the controller stops
		away  func(f *fixture) // what happens while no controller runs
		want  int              // writes of the fresh controller
		value string           // the config-hash it writes
	}{
		{"an image deploy, then an edit", func(f *fixture) { f.change("v2") },
			func(f *fixture) { f.deploy("2"); f.observe(); f.edit("app-config", "v3") }, 1, configHash("v3")},
		{"an image deploy alone", func(f *fixture) { f.change("v2") },
			func(f *fixture) { f.deploy("2"); f.observe() }, 0, ""},
		{"an edit after our write whose record was not saved (a crash between the two)", func(f *fixture) {
			f.refuseRecords()
			f.edit("app-config", "v2")
			f.tick(6 * time.Second)
			f.sync()
		}, func(f *fixture) { f.observe(); f.edit("app-config", "v3") }, 1, configHash("v3")},
		{"nothing after our write whose record was not saved", func(f *fixture) {
			f.refuseRecords()
			f.edit("app-config", "v2")
			f.tick(6 * time.Second)
			f.sync()
		}, func(f *fixture) { f.observe() }, 0, ""},
		{"an edit inside the settle window at exit, the record not saved since our last write", func(f *fixture) {
			f.change("v2")
			f.refuseRecords()
			f.change("v3")
			f.edit("app-config", "v4")
			f.sync() // settling
		}, func(*fixture) {}, 1, configHash("v4")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, auto, configMap("app-config", "v1", nil))
			f.observe()
			f.sync()
			tc.given(f)
			f.stop()
			f.tick(time.Minute)
			tc.away(f)
			f.restart()
			writes := len(f.applied)
			_, _ = f.try()
			f.settleThenSync(0)
			if got := len(f.applied) - writes; got != tc.want {
				t.Fatalf("%d writes after the restart, want %d (%v)", got, tc.want, f.applied[writes:])
			}
			if v, _ := f.templateHash(); tc.want > 0 && v != tc.value {
				t.Errorf("config-hash %q, want %q", v, tc.value)
			}
		})
	}
}

// refuseRecords makes the API server refuse every write of a record from now on (a quota).
func (f *fixture) refuseRecords() {
	refuse := func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, RecordName("Deployment", "web"),
			errors.New("exceeded quota: cms, requested: count/configmaps=1, used: count/configmaps=3, limited: count/configmaps=3"))
	}
	f.kube.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).Labels[api.RecordLabel] != api.RecordValue {
			return false, nil, nil
		}
		return refuse(a)
	})
	f.kube.PrependReactor("patch", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetName() != RecordName("Deployment", "web") {
			return false, nil, nil
		}
		return refuse(a)
	})
}

// Finding 2, and 6: a record of a stored form this controller does not read (a newer controller's, or
// edited by hand) is left alone and told; the edit made while the controller was away still starts
// its revision, known by the value of ours the newest revision carries.
func TestARecordOfAnUnknownFormIsLeftAloneAndNoEditSwallowed(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.observe()
	f.sync()
	f.change("v2")
	f.stop()
	const newer = `{"v":3,"ledger":["a newer controller's"]}`
	cm, err := f.kube.CoreV1().ConfigMaps(ns).Get(context.Background(), RecordName("Deployment", "web"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Annotations[api.RecordAnnotation] = newer
	f.rv++
	cm.ResourceVersion = fmt.Sprint(f.rv)
	if _, err := f.kube.CoreV1().ConfigMaps(ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = f.cs.AllConfigs[refs.ConfigMap].Indexers()[0].Update(metaOf(cm))
	f.tick(time.Minute)
	f.edit("app-config", "v3")
	f.restart()
	_, _ = f.try()
	f.settleThenSync(0)
	if len(f.applied) != 2 {
		t.Fatalf("%d writes, want 2: the edit made while the controller was away was swallowed (%v)", len(f.applied), f.applied)
	}
	if got := f.recordText(); got != newer {
		t.Errorf("the record was overwritten: %s", got)
	}
	msg := f.expectEvent("Warning " + ReasonRecordNotKept)
	if !strings.Contains(msg, "stored form v3") || !strings.Contains(msg, "left alone") {
		t.Errorf("the Warning does not say the record is of another form and left alone: %s", msg)
	}
}

// Finding 3: a value of ours proves itself. The record never kept (a quota from the start), the
// controller restarted, a rollback copies our value under kubectl-rollout: the next edit takes it
// back and starts its revision, instead of every later edit being swallowed.
func TestAValueOfOursIsTakenBackAfterARestartThatLostTheRecord(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil))
	f.refuseRecords()
	f.observe()
	_, _ = f.try()
	rs2 := f.change("v2")
	f.change("v3")
	f.stop()
	f.restart()
	f.manager = "kubectl-rollout" // undo to rs2: its template, our value with it
	f.deployment.Spec.Template.Annotations = maps.Clone(rs2.Spec.Template.Annotations)
	f.deployment.Generation++
	if back := f.observe(); back.UID != rs2.UID {
		t.Fatalf("the undo made %s, want %s", back.Name, rs2.Name)
	}
	_, _ = f.try()
	f.recorded()
	f.edit("app-config", "v4")
	if n := f.settleThenSync(2); n != 1 {
		t.Fatalf("%d writes for the edit after the undo, want 1: our value, its record lost, was taken for someone else's (%v)", n, f.recorded())
	}
	if !f.forced[2] {
		t.Errorf("the take-back was not forced")
	}
	f.expectEvent("Normal " + ReasonTakenBack)
}

// Finding 4: the settle window has a maximum. An object rewritten every second holds a change back
// for -config-max-wait (ten settle windows by default) at most; then the revision starts with the
// content of that moment, and a Warning names what kept it waiting.
func TestAChangeWaitsNoLongerThanTheMaximumWait(t *testing.T) {
	f := newFixture(t, auto, configMap("app-config", "v1", nil), configMap("lease", "t0", nil))
	f.deployment.Spec.Template.Spec = testutil.PodSpec([]string{"app-config", "lease"})
	f.deployment.Generation++
	f.observe()
	f.sync()
	f.edit("app-config", "v2")
	edited := f.now
	var wrote time.Time
	for i := range 120 {
		f.tick(time.Second)
		f.edit("lease", fmt.Sprintf("t%d", i+1)) // a lease renewed every second
		_, _ = f.try()
		if len(f.applied) > 0 {
			wrote = f.now
			break
		}
	}
	if wrote.IsZero() {
		t.Fatal("no revision in 2 minutes of a lease rewritten every second: the change waits for ever")
	}
	if waited := wrote.Sub(edited); waited > 50*time.Second+time.Second {
		t.Errorf("the revision came %s after the edit, want within the maximum wait, 50s (10 × 5s)", waited)
	}
	msg := f.expectEvent("Warning " + ReasonNeverSettled)
	if !strings.Contains(msg, "ConfigMap/lease") {
		t.Errorf("the Warning does not name what kept the change waiting: %s", msg)
	}
	if n := testCounter(t, f.metrics, "configmap_attacher_config_max_wait_total"); n != 1 {
		t.Errorf("configmap_attacher_config_max_wait_total %v, want 1", n)
	}
}

// Finding 4: the wait for a pinned object's snapshot has the same bound, and is told: the pinning
// controller down, the newest revision's snapshot never comes; an edit after it still starts one.
func TestTheWaitForASnapshotIsBoundedAndTold(t *testing.T) {
	f, _ := pinnedAndEdited(t)
	f.tick(time.Second)
	f.observe() // its snapshot is never taken
	f.edit("app-config", "v3")
	for range 120 {
		f.tick(time.Second)
		_, _ = f.try()
		if len(f.applied) > 1 {
			break
		}
	}
	if len(f.applied) != 2 {
		t.Fatalf("%d writes in 2 minutes without the newest revision's snapshot, want 2: the edit waits for it for ever", len(f.applied))
	}
	if v, _ := f.templateHash(); v != configHash("v3") {
		t.Errorf("config-hash %q, want %q", v, configHash("v3"))
	}
	msg := f.expectEvent("Warning " + ReasonSnapshotMissing)
	if !strings.Contains(msg, "ConfigMap/app-config") {
		t.Errorf("the Warning does not name the object: %s", msg)
	}
}

// Finding 6: the key unreadable (its Secret gone, creating it refused). ConfigMap changes go on, for a
// workload whose Secrets did not change too (the record knows them by version); a workload whose
// Secret changed is held back with a Warning, looked at again with a back-off (no request per look),
// and comes back once the key can be read.
func TestAnUnreadableKeyHoldsBackOnlyWhatNeedsIt(t *testing.T) {
	f := readingSecret(t)
	f.stop()
	f.deleteKey()
	creates := 0
	allow := false
	f.kube.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != DefaultKeySecret.Namespace {
			return false, nil, nil
		}
		creates++
		if allow {
			return false, nil, nil
		}
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, DefaultKeySecret.Name, errors.New("RBAC: access denied"))
	})
	f.restart()

	f.edit("app-config", "v2") // db-creds unchanged
	if n := f.settleThenSync(1); n != 1 {
		t.Fatalf("%d writes for a ConfigMap edit while the key cannot be read, want 1", n)
	}
	f.tick(time.Second)
	f.observe()
	f.sync()

	f.putOpaque("db-creds", map[string]string{"password": "hunter4"})
	creates = 0
	for range 30 {
		f.tick(time.Second)
		_, _ = f.try()
	}
	if len(f.applied) != 2 {
		t.Fatalf("%d writes: a Secret changed while its content cannot be hashed must wait for the key", len(f.applied)-1)
	}
	if creates > 6 {
		t.Errorf("%d attempts to create the key Secret in 30 looks: want a back-off, not a request per look", creates)
	}
	msg := f.expectEvent("Warning " + ReasonKeyUnreadable)
	if !strings.Contains(msg, "Secret/db-creds") || !strings.Contains(msg, "access denied") {
		t.Errorf("the Warning does not name the Secret held back and why: %s", msg)
	}
	if n := testCounter(t, f.metrics, "configmap_attacher_config_held_back_total"); n != 1 {
		t.Errorf("configmap_attacher_config_held_back_total %v, want 1", n)
	}

	allow = true
	f.tick(10 * time.Minute) // past the back-off: the key is made
	_, _ = f.try()
	if len(f.applied) != 3 {
		t.Fatalf("%d writes once the key can be made, want the held-back revision", len(f.applied)-1)
	}
}

// -config-max-wait's default: ten settle windows; with none (-config-settle=0: act at once), the wait
// for a pinned snapshot is still bounded, by ten default windows, never skipped.
func TestTheMaximumWaitHasADefault(t *testing.T) {
	for _, tc := range []struct{ settle, max, want time.Duration }{
		{5 * time.Second, 0, 50 * time.Second},
		{0, 0, 20 * time.Second},
		{2 * time.Second, 7 * time.Second, 7 * time.Second},
	} {
		c, err := New(caches.NewForTest(nil, nil), nil, nil, nil, nil, Options{Settle: tc.settle, MaxWait: tc.max})
		if err != nil {
			t.Fatal(err)
		}
		if c.opts.MaxWait != tc.want {
			t.Errorf("settle %s, max wait %s: %s, want %s", tc.settle, tc.max, c.opts.MaxWait, tc.want)
		}
	}
}

// The moment between a new leader's start and its key watch's first list holds back a workload whose
// Secret changed, untold (it is no condition to report), and the list brings it back.
func TestANewLeaderWaitsForItsKeyWatchUntold(t *testing.T) {
	f := readingSecret(t)
	f.stop()
	f.putOpaque("db-creds", map[string]string{"password": "hunter4"}) // while no controller ran
	f.restart()
	f.c.key.mu.Lock()
	f.c.key.listed, f.c.key.cur, f.c.key.known = false, nil, map[string][]byte{} // the watch not listed yet
	f.c.key.mu.Unlock()
	_, _ = f.try()
	f.expectApplies(1)
	for _, e := range f.recorded() {
		if strings.HasPrefix(e, "Warning "+ReasonKeyUnreadable) {
			t.Errorf("%s: told before the key watch listed", e)
		}
	}
	f.listKey()
	if f.c.loop.Queue.Len() == 0 {
		t.Fatal("the key watch's list queued nothing: the workload held back waits for its back-off")
	}
	_, _ = f.try()
	f.expectApplies(2)
}
