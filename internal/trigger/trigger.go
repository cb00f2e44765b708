// Package trigger owns "a config change starts a revision": a workload that carries Reloader's
// annotations (reloader.go) gets, when the content of a config object it follows changes, one
// annotation on its pod template, configmap-attacher.io/config-hash, the hash of the content of the
// objects it follows, written with server-side apply under our field manager owning that one
// annotation. Its controller then makes a new revision (a Rollout goes through its canary); with
// zero-touch pinning, the new revision pins the new content and every older revision keeps its own.
//
// Deterministic: the same content gives the same template, so a revert of the config makes the
// workload go back to the revision that had it (plan.go), and the revision made before it opted in
// carries no annotation of ours, which a revert to its content removes again. What each value of
// config-hash we wrote was written for, and what each other revision was made with, is remembered in
// a record of ours owned by the workload (record.go), or, for pinned objects, in the revision's
// snapshots. Only what the pod template's containers read counts: the keys a configMapKeyRef or a
// volume's items name, the whole object otherwise; never an image pull Secret the template merely
// names (refs.Reads).
//
// Exactly one revision per change: a change is acted on only once the content has settled
// (Options.Settle) and only when the newest revision was not made with it, so a deploy that changes
// config and template together (Helm's checksum annotation) gets no second revision. Never a fight,
// never a swallowed edit: a revision is started for a change of the content since the newest
// revision was made (known from our own write, or, for a revision someone else made, from the order
// in which its appearance and the config's changes reached us), so a template changed back by
// someone else (a tool reverting our annotation, a rollback) is reported once and left alone until
// the content changes again; then our annotation is taken back from whoever copied a value of ours
// (a rollback), never from a value we did not write (sync.go, decide: the decision table).
//
// Like the other controllers it reads the shared caches only (the workloads, their revisions, the
// widened config informer) and queues workload keys (caches.Key).
package trigger

import (
	"errors"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	toolsrecord "k8s.io/client-go/tools/record"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Name names the controller in logs and metrics.
const Name = "trigger"

// DefaultSettle is the default settle window. A deploy tool writes a release's objects one after the
// other, config objects first (Helm, Argo CD and kubectl order them by kind), within milliseconds of
// each other in one sync (a second or so for a large release on a loaded API server): 2 s covers that
// and a burst of hand edits, and keeps a config edit as quick to start its canary as Reloader at its
// defaults (docs/benchmarks.md). Argo CD's sync waves are 2 s apart: config and workload in different
// waves need a longer window (-config-settle).
const DefaultSettle = 2 * time.Second

// Options tune the trigger.
type Options struct {
	// Settle is how long the content must stay unchanged before a revision is started for it.
	Settle time.Duration
}

// errForeign: an object we would write exists and is not ours.
var errForeign = errors.New("not ours")

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
	records records
	loop    *reconcile.Loop
	now     func() time.Time

	mu sync.Mutex
	// seen is what reached this process of each workload, by workload key: when an object it follows
	// last changed (the settle window runs from there) and, in the order events arrived, whether that
	// was before or after its newest revision appeared.
	seen map[string]*seen
	// told is the last message of each Warning reason recorded per workload key, so a condition that
	// lasts is reported once, not at every sync.
	told map[string]string
	// order counts the events noted in seen.
	order uint64
}

// New wires the trigger to the caches, which must hold every config object (caches.Options.AllConfigs).
func New(c *caches.Caches, kube kubernetes.Interface, dyn dynamic.Interface, events toolsrecord.EventRecorder, m *metrics.Metrics, o Options) (*Controller, error) {
	if c.AllConfigs == nil {
		return nil, errors.New("the config trigger needs the widened config informers (caches.Options.AllConfigs)")
	}
	ctl := &Controller{caches: c, kube: kube, dynamic: dyn, events: events, metrics: m, opts: o,
		content: newContents(kube, c.Pinning), records: records{kube: kube, configs: c.AllConfigs[refs.ConfigMap]},
		now: time.Now, seen: map[string]*seen{}, told: map[string]string{}}
	// A sync is a chain of requests (the content, the templates, the workload, the write, the record)
	// with little to compute: twice the workers keep a burst of changes (a deploy of many workloads'
	// config at once) from queueing behind them (docs/benchmarks.md: -workers=16 took the p50 of 100
	// changes at once from 5.5 to 4.2 s).
	ctl.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name, m), Sync: ctl.sync, Metrics: m, WorkersPer: 2}
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
// up with its spec. A Deployment holding Rollouts' templates brings those Rollouts.
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
			if okO && okN && relevantChange(o, n) {
				c.enqueueWorkload(n)
			}
		},
		DeleteFunc: func(obj any) {
			if u, ok := caches.UserOf(obj); ok {
				c.forget(u.Key())
				c.enqueueTemplateUsers(u)
			}
		},
	}
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
	if inf, ok := c.caches.Users[caches.Rollout]; ok {
		ros, err := inf.ByIndex(caches.ByTemplateRef, u.Namespace+"/"+u.Name)
		if err != nil {
			utilruntime.HandleError(err)
		}
		for _, ro := range ros {
			c.enqueue(ro)
		}
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
// which is the newest. A revision appearing or renumbered after the initial list is noted, in the
// order events arrive, for the workloads that opted in: an edit that arrives after it was not what
// the revision was made with.
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
		DeleteFunc: owner,
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

// enqueueWorkloadOf enqueues the workload of the revision an ownerReference names.
func (c *Controller) enqueueWorkloadOf(ns string, o metav1.OwnerReference) {
	kind := caches.Kind(o.Kind)
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
// again once the content has settled.
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
			// A snapshot taken: the workload of its revision may be waiting for it.
			for _, o := range m.OwnerReferences {
				c.enqueueWorkloadOf(m.Namespace, o)
			}
			return
		}
		if gone {
			c.content.forget(kind, m.Namespace, m.Name)
		}
		for _, u := range c.followers(kind, m.Namespace, m.Name) {
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

// followers are the workloads that may follow a config object: those whose template reads it (auto,
// search; a Rollout through the Deployment holding its template) and those with a reload list of its
// kind. Which of them do is for their sync to say.
func (c *Controller) followers(kind refs.Kind, ns, name string) []*caches.User {
	var out []*caches.User
	add := func(us []*caches.User, err error) {
		if err != nil {
			utilruntime.HandleError(err)
		}
		for _, u := range us {
			if u.Kind() == caches.Deployment {
				if ros, ok := c.caches.Users[caches.Rollout]; ok {
					refd, err := ros.ByIndex(caches.ByTemplateRef, u.Namespace+"/"+u.Name)
					if err != nil {
						utilruntime.HandleError(err)
					}
					out = append(out, refd...)
				}
			}
			if len(u.Annotations) > 0 || len(u.TemplateAnnotations) > 0 {
				out = append(out, u)
			}
		}
	}
	for _, k := range workloadKinds() {
		inf, ok := c.caches.Users[k]
		if !ok {
			continue
		}
		add(inf.InNamespace(ns, caches.Using(refs.Ref{Kind: kind, Name: name})))
		add(inf.ByIndex(caches.ByReloadList, caches.ReloadListKey(ns, kind)))
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

// seen is what reached this process of a workload since it started: events in arrival order, counted
// by Controller.order.
type seen struct {
	changedAt  time.Time // an object it follows last changed
	changedSeq uint64    // ... as the changedSeq-th event
	newest     types.UID // the revision that last appeared or was renumbered
	newestSeq  uint64
	pending    time.Time // since when our last write waits for its revision (decide: pending)
}

// noteChange notes that an object the workload follows changed, now.
func (c *Controller) noteChange(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seenOf(key)
	c.order++
	s.changedAt, s.changedSeq = c.now(), c.order
}

// noteRevision notes that revision u appeared (or was renumbered: it is the newest again), for a
// workload that opted in (the others' revisions are not held).
func (c *Controller) noteRevision(u *caches.User) {
	key := controllerKey(u)
	if key == "" {
		return
	}
	inf, ok := c.caches.Users[caches.Kind(u.Owner.Kind)]
	if !ok {
		return
	}
	if w, exists, _ := inf.Get(u.Namespace, u.Owner.Name); !exists || (len(w.Annotations) == 0 && len(w.TemplateAnnotations) == 0) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seenOf(key)
	c.order++
	s.newest, s.newestSeq = u.UID, c.order
}

// notePending notes whether our last write on the workload still waits for its revision.
func (c *Controller) notePending(key string, waiting bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.seenOf(key)
	switch {
	case !waiting:
		s.pending = time.Time{}
	case s.pending.IsZero():
		s.pending = c.now()
	}
}

// pendingFor is how long our last write on the workload has waited for its revision (0: not waiting).
func (c *Controller) pendingFor(key string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.seen[key]
	if !ok || s.pending.IsZero() {
		return 0
	}
	return c.now().Sub(s.pending)
}

// seenOf is the workload's entry, made on first use; c.mu held.
func (c *Controller) seenOf(key string) *seen {
	s, ok := c.seen[key]
	if !ok {
		s = &seen{}
		c.seen[key] = s
	}
	return s
}

// forget drops what is held in memory of a workload.
func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.seen, key)
	for k := range c.told {
		if len(k) > len(key) && k[:len(key)+1] == key+"#" {
			delete(c.told, k)
		}
	}
}

// sawChange reports whether an object the workload follows changed while this process watched it.
func (c *Controller) sawChange(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.seen[key]
	return ok && s.changedSeq > 0
}

// changedAfter reports whether an object the workload follows changed after revision uid appeared,
// in the order the events reached this process. False when its appearance did not reach us (it
// predates this process): then nothing is known to have come after it.
func (c *Controller) changedAfter(key string, uid types.UID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.seen[key]
	return ok && s.newest == uid && s.changedSeq > s.newestSeq
}

// since is how long ago an object the workload follows last changed (a long time when unknown, e.g.
// after a restart: the change happened while we were away).
func (c *Controller) since(key string) time.Duration {
	c.mu.Lock()
	s, ok := c.seen[key]
	c.mu.Unlock()
	if !ok || s.changedSeq == 0 {
		return time.Duration(1<<62 - 1)
	}
	return c.now().Sub(s.changedAt)
}
