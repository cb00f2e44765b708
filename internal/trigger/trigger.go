// Package trigger owns "a config change starts a revision": a workload that carries Reloader's
// annotations (reloader.go) gets, when the content of a config object it follows changes, one
// annotation on its pod template, configmap-attacher.io/config-hash, the hash of the content of the
// objects it follows, written with server-side apply under our field manager owning that one
// annotation. Its controller then makes a new revision (a Rollout goes through its canary); with
// zero-touch pinning, the new revision pins the new content and every older revision keeps its own.
//
// Deterministic: the same content gives the same template, so a revert of the config makes the workload
// go back to the revision that had it (plan.go), and the revision made before it opted in carries no
// annotation of ours, which a revert to its content removes again. What each revision was made with is
// known from our own write, its snapshots (pinned objects), or what the objects held when it appeared,
// and kept in a record of ours owned by the workload (record.go) and in this process's memory, which
// survives a record that cannot be written. A revision made while no process watched (a restart, a
// failover) is judged from what the API server tells: the versions the record noted, and the
// config-hash values of ours, which prove themselves (value.go); what it cannot tell errs toward a
// revision. Only what the pod template's containers read counts: the keys a configMapKeyRef or a
// volume's items name, the whole object otherwise; the data alone of what the environment reads; an
// optional object's absence; never an image pull Secret, a volume plugin's credential or a volume no
// container mounts (refs.Reads). What is kept of a Secret is hashed with a key only the controller
// reads (key.go), watched, and carried over to a new one without a revision for content that did not
// change.
//
// Exactly one revision per change: a change is acted on only once the content has settled
// (Options.Settle, for at most Options.MaxWait) and only when the newest revision was not made with it,
// so a deploy that changes config and template together (Helm's checksum annotation) gets no second
// revision, whatever else moves in the namespace meanwhile. Never a fight, never a swallowed edit: a
// revision is started for a change of the content the newest revision reads, so a template changed back
// by someone else (a tool reverting our annotation, a rollback) is reported once and left alone until
// the content changes again; then our annotation is taken back from whoever copied a value of ours (a
// rollback), never from a value we did not write. Every rule is a pure function with its table
// (decide.go); sync.go gathers their facts, act.go carries the step out.
//
// Like the other controllers it reads the shared caches only (the workloads, their revisions, the
// widened config informer) and queues workload keys (caches.Key).
package trigger

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	toolsrecord "k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Name names the controller in logs and metrics.
const Name = "trigger"

// DefaultSettle is the default settle window. A deploy tool writes a release's objects one after the
// other within milliseconds of each other in one sync (a second or so for a large release on a loaded
// API server); Helm and Argo CD (within a wave) write config objects before workloads, kubectl apply
// in the order of its files: 2 s covers that and a burst of hand edits, and keeps a config edit as
// quick to start its canary as Reloader at its defaults (docs/benchmarks.md). Argo CD's sync waves are
// 2 s apart: config and workload in different waves need a longer window (-config-settle).
const DefaultSettle = 2 * time.Second

// MaxWaitFactor is the default -config-max-wait, in settle windows.
const MaxWaitFactor = 10

// Options tune the trigger.
type Options struct {
	// Settle is how long the content must stay unchanged before a revision is started for it.
	Settle time.Duration
	// MaxWait bounds how long a change waits for the content to settle, and for a pinned object's
	// snapshot: past it the revision starts with the content of that moment, and a Warning says what
	// kept it waiting (0: MaxWaitFactor times Settle; with no settle window, times DefaultSettle: the
	// wait for a snapshot is bounded then too, never skipped).
	MaxWait time.Duration
	// KeySecret is the Secret holding the key of the hash of Secret contents (DefaultKeySecret when
	// empty); the controller creates it if it is missing.
	KeySecret types.NamespacedName
}

// workloadKinds are the kinds whose revisions a config change starts.
func workloadKinds() []caches.Kind {
	return []caches.Kind{caches.Deployment, caches.StatefulSet, caches.DaemonSet, caches.Rollout}
}

// Controller starts revisions for config changes.
type Controller struct {
	caches  *caches.Caches
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	events  toolsrecord.EventRecorder
	metrics *metrics.Metrics
	opts    Options
	content *contents
	key     *hashKey
	records records
	loop    *reconcile.Loop
	now     func() time.Time
	counters

	mu sync.Mutex
	// state is what this process holds of each workload, by workload key (workloadState).
	state map[string]*workloadState
	// appeared is, per revision uid, what the objects its workload follows were at (their
	// resourceVersions in the cache) when the revision appeared or became the newest again, as the
	// watch delivered it: what it was made with is known from there once the objects have moved on.
	appeared map[types.UID]appearance
	// told is the last message of each Warning reason recorded per workload key, so a condition that
	// lasts is reported once, not at every sync.
	told map[string]string
	// heldBack are the workloads waiting for the hash key, or decided without it: its arrival brings
	// them back.
	heldBack map[string]bool
}

// workloadState is what this process holds of a workload: what reached it, and the record as last
// decided, which is what a record that cannot be written (or was deleted) is decided from.
type workloadState struct {
	uid types.UID
	// changedAt is when an object it follows last changed (any change: a label too); edited, whether
	// one did while this process watched it.
	changedAt time.Time
	edited    bool
	// clock is the settle clock (tickClock, holdSince).
	clock clock
	// pending: since when our last write waits for its revision (decide: pending); snapshotSince,
	// since when a look waits for a snapshot of its newest revision (snapshotWait).
	pending, snapshotSince time.Time
	// backoff is how long a look held back for the hash key waits before the next (holdBack).
	backoff time.Duration
	// kept is the record as last decided: its text, and the resourceVersion of the record on the API
	// server that holds that text ("" when none does: not written).
	kept *kept
	// optedOut are the opt-in annotations that went with a change of the pod template (a rollback to
	// a revision made before it opted in): told once, then forgotten with the workload.
	optedOut []string
	// followedAt: for each object newly followed (the acknowledged content does not know it yet), the
	// version it was at in this process's first look that followed it (noteFollowed): an edit landing
	// before a look could read that version is a change, not where the object starts from.
	followedAt map[string]string
}

type kept struct {
	rec  *record
	text string
	rv   string
}

// appearance is what the objects a workload follows were at when one of its revisions appeared:
// "Kind/name" -> resourceVersion ("" for an object that did not exist); and the revision's own
// resourceVersion then.
type appearance struct {
	workload string
	rvs      map[string]string
	revision string
}

// New wires the trigger to the caches, which must hold every config object (caches.Options.AllConfigs).
func New(c *caches.Caches, kube kubernetes.Interface, dyn dynamic.Interface, events toolsrecord.EventRecorder, m *metrics.Metrics, o Options) (*Controller, error) {
	if c.AllConfigs == nil {
		return nil, errors.New("the config trigger needs the widened config informers (caches.Options.AllConfigs)")
	}
	if o.KeySecret.Name == "" {
		o.KeySecret = DefaultKeySecret
	}
	if o.MaxWait == 0 {
		o.MaxWait = MaxWaitFactor * o.Settle
		if o.Settle == 0 {
			o.MaxWait = MaxWaitFactor * DefaultSettle
		}
	}
	ctl := &Controller{caches: c, kube: kube, dynamic: dyn, events: events, metrics: m, opts: o,
		content: newContents(kube, c.Pinning), key: newHashKey(kube, o.KeySecret),
		records: records{kube: kube, configs: c.AllConfigs[refs.ConfigMap]}, counters: newCounters(m),
		now: time.Now, state: map[string]*workloadState{}, appeared: map[types.UID]appearance{}, told: map[string]string{},
		heldBack: map[string]bool{}}
	ctl.key.changed = ctl.enqueueHeldBack
	// A sync is a chain of requests (the content, the templates, the workload, the write, the record)
	// with little to compute: twice the workers keep a burst of changes (a deploy of many workloads'
	// config at once) from queueing behind them (docs/benchmarks.md: -workers=16 took the p50 of 100
	// changes at once from 5.5 to 4.2 s). The key is watched by the leader, from its start.
	ctl.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name, m), Sync: ctl.sync, Metrics: m, WorkersPer: 2,
		Start: func(ctx context.Context) { go ctl.key.watch(ctx) }}
	for _, kind := range workloadKinds() {
		if inf, ok := c.Users[kind]; ok {
			if err := inf.AddEventHandler(ctl.workloadHandler()); err != nil {
				return nil, err
			}
		}
	}
	for _, kind := range []caches.Kind{caches.ReplicaSet, caches.ControllerRevision} {
		if inf, ok := c.Users[kind]; ok {
			if err := inf.AddEventHandler(ctl.revisionHandler()); err != nil {
				return nil, err
			}
		}
	}
	for _, kind := range []caches.Kind{caches.Pod, caches.Job, caches.CronJob} {
		if inf, ok := c.Users[kind]; ok {
			if err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: ctl.enqueueUnsupported}); err != nil {
				return nil, err
			}
		}
	}
	for kind, inf := range c.AllConfigs {
		if err := inf.AddEventHandler(ctl.configHandler(kind)); err != nil {
			return nil, err
		}
	}
	if m != nil {
		m.Gauge("configmap_attacher_trigger_queue_depth", "Workload keys waiting for the config trigger.", func() float64 { return float64(ctl.loop.Queue.Len()) })
	}
	return ctl, nil
}

// Loop is the controller's queue and workers.
func (c *Controller) Loop() *reconcile.Loop { return c.loop }

func (c *Controller) enqueue(u *caches.User) { c.loop.Queue.Add(u.Key()) }

// workloadHandler: a workload opting in or out, changing what it follows, or its controller catching
// up with its spec. A Deployment holding Rollouts' templates brings those Rollouts. An opt-in that
// goes with a change of the pod template (a rollback to a revision made before the workload opted in)
// is noted, to be told.
func (c *Controller) workloadHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if u, ok := caches.UserOf(obj); ok {
				c.enqueueWorkload(u)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, okO := caches.UserOf(old)
			n, okN := caches.UserOf(cur)
			if !okO || !okN || !relevantChange(o, n) {
				return
			}
			if went := optInWent(o, n); len(went) > 0 {
				c.noteOptOut(n.Key(), went)
				c.enqueue(n)
			}
			c.enqueueWorkload(n)
		},
		DeleteFunc: func(obj any) {
			if u, ok := caches.UserOf(obj); ok {
				c.forget(u.Key())
				c.enqueueTemplateUsers(u)
			}
		},
	}
}

// optInWent lists the opt-in annotations a workload lost in an update that also changed its pod
// template (its generation): `kubectl rollout undo` copies the revision's annotations onto the
// Deployment and its template back, so an undo to a revision made before the workload opted in takes
// the opt-in away. A removal of the annotations alone (an opt-out) is not listed.
func optInWent(o, n *caches.User) []string {
	if o.UID != n.UID || o.Generation == n.Generation || !Select(o).OptedIn() || Select(n).OptedIn() {
		return nil
	}
	var went []string
	for _, k := range []string{api.ReloaderAuto, api.ReloaderConfigMapAuto, api.ReloaderSecretAuto,
		api.ReloaderConfigMapReload, api.ReloaderSecretReload, api.ReloaderSearch} {
		had := o.Annotations[k] != "" || o.TemplateAnnotations[k] != ""
		has := n.Annotations[k] != "" || n.TemplateAnnotations[k] != ""
		if had && !has {
			went = append(went, k)
		}
	}
	return went
}

func (c *Controller) enqueueWorkload(u *caches.User) {
	if len(u.Annotations) > 0 || len(u.TemplateAnnotations) > 0 {
		c.enqueue(u)
	}
	c.enqueueTemplateUsers(u)
}

// enqueueTemplateUsers enqueues the Rollouts taking their template from Deployment u.
func (c *Controller) enqueueTemplateUsers(u *caches.User) {
	if u.Kind() != caches.Deployment {
		return
	}
	for _, ro := range c.templateUsers(u) {
		c.enqueue(ro)
	}
}

// relevantChange: what the trigger reads of a workload changed (not a status update of its replicas).
func relevantChange(o, n *caches.User) bool {
	return o.UID != n.UID || o.Generation != n.Generation || !equalStrings(o.Annotations, n.Annotations) ||
		!equalStrings(o.TemplateAnnotations, n.TemplateAnnotations) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
		(o.Status == nil) != (n.Status == nil) || (o.Status != nil && *o.Status != *n.Status)
}

func equalStrings(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// revisionHandler: a revision appearing, going, or renumbered (a rollback reuses an old one) changes
// which is the newest. A revision appearing or renumbered after the initial list is noted with what
// the objects its workload follows are at (noteRevision): what it was made with.
func (c *Controller) revisionHandler() cache.ResourceEventHandler {
	owner := func(obj any) {
		if u, ok := caches.UserOf(obj); ok {
			c.enqueueController(u)
		}
	}
	appeared := func(obj any) {
		if u, ok := caches.UserOf(obj); ok {
			c.noteRevision(u)
			c.enqueueController(u)
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if initial {
				owner(obj)
			} else {
				appeared(obj)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, okO := caches.UserOf(old)
			n, okN := caches.UserOf(cur)
			switch {
			case !okO || !okN:
			case o.Number != n.Number:
				appeared(cur)
			case (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil):
				owner(cur)
			}
		},
		DeleteFunc: func(obj any) {
			if u, ok := caches.UserOf(obj); ok {
				c.mu.Lock()
				delete(c.appeared, u.UID)
				c.mu.Unlock()
			}
			owner(obj)
		},
	}
}

// controllerKey is the key of the workload controlling revision u ("" when none of ours).
func controllerKey(u *caches.User) string {
	if ref := u.Owner; ref != nil {
		for _, k := range workloadKinds() {
			if string(k) == ref.Kind {
				return caches.Key(k, u.Namespace, ref.Name)
			}
		}
	}
	return ""
}

// enqueueController enqueues the workload controlling revision u.
func (c *Controller) enqueueController(u *caches.User) {
	if key := controllerKey(u); key != "" {
		c.loop.Queue.Add(key)
	}
}

// enqueueOwnerOf enqueues the workload an ownerReference of one of our objects names: a revision's
// (a snapshot's owner), or the workload itself (a record's owner).
func (c *Controller) enqueueOwnerOf(ns string, o metav1.OwnerReference) {
	kind := caches.Kind(o.Kind)
	if slices.Contains(workloadKinds(), kind) {
		c.loop.Queue.Add(caches.Key(kind, ns, o.Name))
		return
	}
	if kind != caches.ReplicaSet && kind != caches.ControllerRevision {
		return
	}
	if inf, ok := c.caches.Users[kind]; ok {
		if r, exists, _ := inf.Get(ns, o.Name); exists && r.UID == o.UID {
			c.enqueueController(r)
		}
	}
}

// configHandler: a config object changed (or appeared, or went): the workloads following it look
// again once the content has settled. Our own objects bring their owner's workload: a snapshot taken
// (its revision's workload may be waiting for it), a record gone (deleted by hand, or by the garbage
// collector after the workload was replaced under its name: it is written again).
func (c *Controller) configHandler(kind refs.Kind) cache.ResourceEventHandler {
	changed := func(obj any, gone, initial bool) {
		m, ok := caches.MetaOf(obj)
		if !ok {
			return
		}
		if ours(m) {
			if gone {
				c.content.forgetSnapshot(kind, m.Namespace, m.Name)
			}
			if gone || m.Labels[api.SnapshotLabel] == api.SnapshotValue {
				for _, o := range m.OwnerReferences {
					c.enqueueOwnerOf(m.Namespace, o)
				}
			}
			return
		}
		if gone {
			c.content.forget(kind, m.Namespace, m.Name)
		}
		for _, u := range c.followers(kind, m) {
			if !initial {
				c.noteChange(u.Key())
			}
			c.loop.Queue.AddAfter(u.Key(), c.opts.Settle)
		}
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) { changed(obj, false, initial) },
		UpdateFunc: func(old, cur any) {
			o, okO := caches.MetaOf(old)
			n, okN := caches.MetaOf(cur)
			if okO && okN && o.ResourceVersion == n.ResourceVersion {
				return // a resync, not a change
			}
			changed(cur, false, false)
		},
		DeleteFunc: func(obj any) { changed(obj, true, false) },
	}
}

// followers are the workloads that follow config object m: those whose selection (Reloader's
// annotations) follows it, the template reading it or not (a reload list naming it). A workload
// with a reload list follows the objects it names, not every object of the kind.
func (c *Controller) followers(kind refs.Kind, m *metav1.PartialObjectMetadata) []*caches.User {
	var out []*caches.User
	seen := map[string]bool{}
	consider := func(u *caches.User, reads []refs.Read) {
		if seen[u.Key()] || (len(u.Annotations) == 0 && len(u.TemplateAnnotations) == 0) {
			return
		}
		read := slices.ContainsFunc(reads, func(r refs.Read) bool { return r.Kind == kind && r.Name == m.Name })
		if Select(u).Follows(kind, m, read) {
			seen[u.Key()] = true
			out = append(out, u)
		}
	}
	add := func(us []*caches.User, err error) {
		if err != nil {
			utilruntime.HandleError(err)
		}
		for _, u := range us {
			if u.Kind() == caches.Deployment {
				for _, ro := range c.templateUsers(u) {
					consider(ro, u.Reads)
				}
			}
			consider(u, u.Reads)
		}
	}
	for _, k := range workloadKinds() {
		inf, ok := c.caches.Users[k]
		if !ok {
			continue
		}
		add(inf.InNamespace(m.Namespace, caches.Using(refs.Ref{Kind: kind, Name: m.Name})))
		add(inf.ByIndex(caches.ByReloadList, caches.ReloadListKey(m.Namespace, kind)))
	}
	return out
}

// enqueueUnsupported queues a bare pod, Job or CronJob that carries Reloader's annotations, to be
// told we do not start its revisions.
func (c *Controller) enqueueUnsupported(obj any) {
	u, ok := caches.UserOf(obj)
	if ok && optedInAnyKind(u) && (u.Kind() != caches.Pod || u.Owner == nil) {
		c.enqueue(u)
	}
}

// stateOf is the workload's state, made on first use and made anew when the workload is another
// one under the same name; c.mu held.
func (c *Controller) stateOf(key string, uid types.UID) *workloadState {
	s, ok := c.state[key]
	if !ok || (uid != "" && s.uid != "" && s.uid != uid) {
		s = &workloadState{}
		c.state[key] = s
	}
	if s.uid == "" {
		s.uid = uid
	}
	return s
}

// noteChange notes that an object the workload follows changed, now.
func (c *Controller) noteChange(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stateOf(key, "")
	s.changedAt, s.edited = c.now(), true
}

// noteOptOut notes the opt-in annotations that went with a change of the workload's template.
func (c *Controller) noteOptOut(key string, went []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stateOf(key, "").optedOut = went
}

// noteRevision notes what the objects an opted-in workload follows are at as its revision u appears
// (or becomes the newest again).
func (c *Controller) noteRevision(u *caches.User) {
	key := controllerKey(u)
	if key == "" {
		return
	}
	inf, ok := c.caches.Users[caches.Kind(u.Owner.Kind)]
	if !ok {
		return
	}
	w, exists, _ := inf.Get(u.Namespace, u.Owner.Name)
	if !exists {
		return
	}
	sel := Select(w)
	if !sel.OptedIn() || len(sel.Invalid) > 0 {
		return
	}
	tmpl, _, err := c.template(w)
	if err != nil {
		return
	}
	objs, _ := c.follows(w, sel, tmpl.Reads)
	rvs := make(map[string]string, len(objs))
	for _, o := range objs {
		rvs[o.ref()] = o.meta.ResourceVersion // "" for an optional object that does not exist
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.appeared[u.UID] = appearance{workload: key, rvs: rvs, revision: u.ResourceVersion}
}

// appearanceOf is what was noted when revision uid appeared.
func (c *Controller) appearanceOf(uid types.UID) (appearance, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.appeared[uid]
	return a, ok
}

// forgetAppearance drops what was noted when revision uid appeared, once its first look is taken: a
// revision that is the newest again later (a rollback) appears anew, and one that merely stayed the
// newest (our write undone before its revision was made) did not appear again.
func (c *Controller) forgetAppearance(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.appeared, uid)
}

// forget drops what is held in memory of a workload.
func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.state, key)
	delete(c.heldBack, key)
	for uid, a := range c.appeared {
		if a.workload == key {
			delete(c.appeared, uid)
		}
	}
	for k := range c.told {
		if len(k) > len(key) && k[:len(key)+1] == key+"#" {
			delete(c.told, k)
		}
	}
}

// huge stands for "a long time" where no change is known (after a restart: it happened while we were
// away).
const huge = time.Duration(1<<62 - 1)
