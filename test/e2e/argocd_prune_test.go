//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/test/framework"
)

// The most aggressive Argo CD settings a team may run base-app with: automated sync with prune and
// selfHeal, PruneLast=true, Replace=true; the controller attaches and protects. Replace=true makes Argo
// CD PUT each object as git has it, so every sync that touches the current revision drops what the
// cluster added to it: our ownerReferences and our finalizer (git has neither). The story shows what
// that costs: nothing in use is lost, old attached revisions that left git are never pruned, and the
// controller puts back what Replace removed.
func TestArgoCDPruneLastReplaceAndSelfHealWithTheController(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ns := givenNamespace(t, "e2e-argocd-prune-replace")
	useArgoCD(t)
	startController(t, nil, ns)
	repo, versions := serveCharts(t, "base-app")

	values := func(d argoDeploy) map[string]any { return baseAppValues(d, "controller", nil) }
	app := framework.HelmApp{
		Name: "e2e-prune-replace", RepoURL: repo.URL, Chart: "base-app", Version: versions["base-app"], Namespace: ns,
		Values: values(argoDeploys[0]), Cascade: true,
		Automated:   &framework.AutoSync{Prune: true, SelfHeal: true},
		SyncOptions: []string{"PruneLast=true", "Replace=true"},
	}
	t.Logf("given: base-app %s served at %s; an Application with automated sync (prune, selfHeal), %s; the controller -namespaces %s",
		versions["base-app"], repo.URL, strings.Join(app.SyncOptions, ", "), ns)
	givenApplication(t, app)
	watchInUse(t, ns)
	meta := watchConfigMeta(t, ns)
	s := newArgoStory(t, ns, app, values, attachByController)
	s.automated = true
	// After Replace drops an ownerReference the controller wrote a moment before, it may write it
	// again only once its record of that write expires (internal/controller's expectationsTTL, 1
	// min): wait longer than that.
	s.attachWait = 3 * time.Minute
	s.afterSync = func(_ argoDeploy, cur revisionOf) { expectProtected(t, ns, cur.cm) }
	s.run(argoDeploys)
	meta.report("the deploys", false)

	// Self-heal: someone deletes the current revision by hand.
	res, err := e2e.cluster.Resolve(ctx, ns, s.rollout)
	must(t, err)
	cur, err := res.Current()
	must(t, err)
	cm, err := mountedConfigMap(cur)
	must(t, err)
	t.Logf("when: kubectl delete configmap %s (the current revision, in git, used by ReplicaSet %s)", cm, cur.Name)
	must(t, e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Delete(ctx, cm, metav1.DeleteOptions{}))
	must(t, e2e.cluster.WaitHeld(ctx, attachWithin, ns, refs.ConfigMap, cm))
	// Argo CD does not re-compare the Application on this update (the object has ownerReferences, so
	// Argo CD files it under its ReplicaSet), only at its next periodic refresh: ask for one, as
	// `argocd app get --refresh` does.
	must(t, e2e.cluster.RefreshApplication(ctx, s.app.Name))
	st, err := e2e.cluster.WaitApplication(ctx, argoSyncWait, s.app.Name, "to see the held ConfigMap", func(st framework.AppStatus) bool {
		return st.Health == "Progressing"
	})
	must(t, err)
	stillThere(t, ns, refs.ConfigMap, cm, "ReplicaSet "+cur.Name+" uses it")
	t.Logf("then: in-use protection holds %s (deletionTimestamp set, our finalizer on); Argo CD reports the Application %s and %s: "+
		"the object exists, so self-heal has nothing to recreate, and it stays pending deletion while in use", cm, st.Sync, st.Health)

	t.Log("when: the next config revision is deployed and promoted")
	next := argoDeploy{Config: 3, Image: argoDeploys[len(argoDeploys)-1].Image}
	prev := revisionOf{rs: cur, cm: cm}
	rev := s.deploy(len(argoDeploys), next, &prev)
	s.expectArgoView(rev)
	t.Logf("then: the Application is Healthy again: %s left git; held and attached to the ReplicaSet kept for rollback, it goes with it", cm)

	// Nothing keeps writing: no sync loop between self-heal and the controller.
	quiet := s.expectQuiet(30 * time.Second)
	t.Logf("then: for %s after the last deploy Argo CD started no sync and nothing wrote to the revisioned ConfigMaps (%s)", 30*time.Second, quiet)
	meta.report("the whole story", true)
}

// expectQuiet watches the Application and the revisioned ConfigMaps for d and fails if a sync starts,
// a ConfigMap changes or appears, or one goes while a ReplicaSet owning it is still there: a fight
// between self-heal and the controller, or a prune, would show as one of those. A ConfigMap that goes
// after all its ReplicaSets went is the garbage collector following revisionHistoryLimit.
func (s *argoStory) expectQuiet(d time.Duration) string {
	s.t.Helper()
	ctx := context.Background()
	snapshot := func() (time.Time, map[string]corev1.ConfigMap) {
		st, err := e2e.cluster.ApplicationStatus(ctx, s.app.Name)
		must(s.t, err)
		list, err := e2e.cluster.Kube.CoreV1().ConfigMaps(s.ns).List(ctx, metav1.ListOptions{LabelSelector: api.RevisionedLabel + "=" + api.RevisionedValue})
		must(s.t, err)
		cms := map[string]corev1.ConfigMap{}
		for _, cm := range list.Items {
			cms[cm.Name] = cm
		}
		return st.OperationStarted, cms
	}
	started, before := snapshot()
	time.Sleep(d)
	started2, after := snapshot()
	if !started2.Equal(started) {
		s.t.Fatalf("not quiet: the last sync started at %s, then at %s", started, started2)
	}
	var kept, collected []string
	for name, cm := range before {
		later, ok := after[name]
		switch {
		case ok && later.ResourceVersion != cm.ResourceVersion:
			s.t.Fatalf("not quiet: ConfigMap %s was written (resourceVersion %s, then %s)", name, cm.ResourceVersion, later.ResourceVersion)
		case ok:
			kept = append(kept, name+"@"+cm.ResourceVersion)
		default:
			for _, o := range cm.OwnerReferences {
				if _, err := e2e.cluster.Kube.AppsV1().ReplicaSets(s.ns).Get(ctx, o.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					s.t.Fatalf("not quiet: ConfigMap %s went while its ReplicaSet %s is there (%v)", name, o.Name, err)
				}
			}
			collected = append(collected, name)
		}
	}
	for name := range after {
		if _, ok := before[name]; !ok {
			s.t.Fatalf("not quiet: ConfigMap %s appeared", name)
		}
	}
	sort.Strings(kept)
	out := strings.Join(kept, " ")
	if len(collected) > 0 {
		sort.Strings(collected)
		out += "; collected with their pruned ReplicaSets: " + strings.Join(collected, " ")
	}
	return out
}

// configMetaWatch records, from a watch, every change of the revisioned ConfigMaps' ownerReferences
// and finalizers, to show what Replace=true removes and how long until it is back.
type configMetaWatch struct {
	t    *testing.T
	mu   sync.Mutex
	last map[string]metaState
	// open strips: name -> when and what was lost
	open   map[string]strip
	closed []strip
}

type metaState struct {
	owners    []metav1.OwnerReference
	protected bool
	deleting  bool
}

type strip struct {
	name            string
	at              time.Time
	owners          int // before
	ownerUIDs       []types.UID
	protected       bool
	ownersBack      time.Duration
	protectionBack  time.Duration
	ownersRestored  bool
	protectRestored bool
	by              string // the field manager of the last write (managedFields), i.e. who stripped
}

// lastManager names the field manager whose managedFields entry is the newest: who wrote last.
func lastManager(cm *corev1.ConfigMap) string {
	var by string
	var at time.Time
	for _, f := range cm.ManagedFields {
		if f.Time != nil && !f.Time.Time.Before(at) {
			by, at = f.Manager+" ("+string(f.Operation)+")", f.Time.Time
		}
	}
	return by
}

func watchConfigMeta(t *testing.T, ns string) *configMetaWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &configMetaWatch{t: t, last: map[string]metaState{}, open: map[string]strip{}}
	sel := api.RevisionedLabel + "=" + api.RevisionedValue
	list, err := e2e.cluster.Kube.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	must(t, err)
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return e2e.cluster.Kube.CoreV1().ConfigMaps(ns).Watch(ctx, o)
		},
	})
	must(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range rw.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			w.observe(cm)
		}
	}()
	t.Cleanup(func() { cancel(); rw.Stop(); <-done })
	return w
}

func (w *configMetaWatch) observe(cm *corev1.ConfigMap) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	cur := metaState{owners: cm.OwnerReferences, protected: api.HasFinalizer(cm.Finalizers, api.InUseFinalizer), deleting: cm.DeletionTimestamp != nil}
	prev, seen := w.last[cm.Name]
	w.last[cm.Name] = cur
	if s, ok := w.open[cm.Name]; ok {
		if !s.protectRestored && cur.protected {
			s.protectRestored, s.protectionBack = true, now.Sub(s.at)
		}
		if !s.ownersRestored && w.ownersBack(cm, s.ownerUIDs) {
			s.ownersRestored, s.ownersBack = true, now.Sub(s.at)
		}
		if s.protectRestored && s.ownersRestored {
			delete(w.open, cm.Name)
			w.closed = append(w.closed, s)
		} else {
			w.open[cm.Name] = s
		}
		return
	}
	if !seen || cur.deleting {
		return
	}
	var uids []types.UID
	for _, o := range prev.owners {
		uids = append(uids, o.UID)
	}
	// The garbage collector removes the reference to an owner it deleted while others remain: not a
	// strip. A reference to a live ReplicaSet, or our finalizer, gone: one.
	lostOwners := len(cur.owners) < len(prev.owners) && !w.ownersBack(cm, uids)
	lostFinalizer := prev.protected && !cur.protected
	if lostOwners || lostFinalizer {
		w.open[cm.Name] = strip{name: cm.Name, at: now, owners: len(prev.owners), ownerUIDs: uids, protected: prev.protected,
			ownersRestored: !lostOwners, protectRestored: !lostFinalizer, by: lastManager(cm)}
	}
}

// ownersBack reports whether cm has an ownerReference again to each of uids whose ReplicaSet still
// exists (Argo Rollouts may have pruned one meanwhile).
func (w *configMetaWatch) ownersBack(cm *corev1.ConfigMap, uids []types.UID) bool {
	has := map[types.UID]bool{}
	for _, o := range cm.OwnerReferences {
		has[o.UID] = true
	}
	rss, err := e2e.cluster.Kube.AppsV1().ReplicaSets(cm.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, rs := range rss.Items {
		if slices.Contains(uids, rs.UID) && rs.DeletionTimestamp == nil && !has[rs.UID] {
			return false
		}
	}
	return true
}

// report logs each time something removed ownerReferences or our finalizer from a revision and how
// long the controller took to put them back. final: fail if one is still missing.
func (w *configMetaWatch) report(when string, final bool) {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if final && len(w.open) > 0 {
		defer w.t.Errorf("at the end, %d revision(s) still miss what Replace=true stripped", len(w.open))
	}
	var lines []string
	var maxOwners, maxProt time.Duration
	for _, s := range w.closed {
		lines = append(lines, fmt.Sprintf("%s %s stripped by %s: %d ownerReference(s) back after %s, finalizer after %s",
			s.at.Format("15:04:05.000"), s.name, s.by, s.owners, s.ownersBack.Round(time.Millisecond), s.protectionBack.Round(time.Millisecond)))
		maxOwners, maxProt = max(maxOwners, s.ownersBack), max(maxProt, s.protectionBack)
	}
	for _, s := range w.open {
		lines = append(lines, fmt.Sprintf("%s %s stripped by %s, not restored yet (%d ownerReference(s) before)", s.at.Format("15:04:05.000"), s.name, s.by, s.owners))
	}
	w.t.Logf("then: during %s, Replace=true stripped the ownerReferences and the in-use finalizer of a revision %d time(s); the controller "+
		"restored them within %s (ownerReferences) and %s (finalizer) at most:\n%s",
		when, len(w.closed)+len(w.open), maxOwners.Round(time.Millisecond), maxProt.Round(time.Millisecond), strings.Join(lines, "\n"))
}
