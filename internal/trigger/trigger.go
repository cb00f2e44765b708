// Package trigger owns "a config change starts a revision": a workload that carries Reloader's
// annotations (reloader.go) gets, when the content of a config object it follows changes, one
// annotation on its pod template, configmap-attacher.io/config-hash, the hash of the content of the
// objects it follows, written with server-side apply under our field manager owning that one
// annotation. Its controller then makes a new revision (a Rollout goes through its canary); with
// zero-touch pinning, the new revision pins the new content and every older revision keeps its own.
//
// Deterministic: the same content gives the same template, so a revert of the config makes the
// workload go back to the revision that had it (plan.go), and the revision made before it opted in
// carries no annotation of ours, which a revert to its content removes again. What each revision was
// created with is remembered in a record of ours owned by the workload (record.go), or, for pinned
// objects, in the revision's snapshots.
//
// Exactly one revision per change: a change is acted on only once the content has settled
// (Options.Settle) and only when the newest revision was not created with it, so a deploy that
// changes config and template together (Helm's checksum annotation) gets no second revision. Never a
// fight: a revision is started only for a change of the content since the newest revision appeared,
// so a template changed back by someone else (a tool reverting our annotation, a rollback) is reported
// once and left alone until the content changes again.
//
// Like the other controllers it reads the shared caches only (the workloads, their revisions, the
// widened config informer) and queues workload keys (caches.Key).
package trigger

import (
	"errors"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
// other within a second or two (Argo CD waits 2 s between sync waves by default), and the workload's
// controller makes the new revision a few milliseconds after the template changes: 5 s covers both
// with room for a loaded API server, and adds no more than that to the time a config edit takes to
// start its canary.
const DefaultSettle = 5 * time.Second

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
	// changed is when an object a workload follows last changed, by workload key: the settle window
	// runs from there.
	changed map[string]time.Time
	// told is the last message of each Warning reason recorded per workload key, so a condition that
	// lasts is reported once, not at every sync.
	told map[string]string
}

// New wires the trigger to the caches, which must hold every config object (caches.Options.AllConfigs).
func New(c *caches.Caches, kube kubernetes.Interface, dyn dynamic.Interface, events toolsrecord.EventRecorder, m *metrics.Metrics, o Options) (*Controller, error) {
	if c.AllConfigs == nil {
		return nil, errors.New("the config trigger needs the widened config informers (caches.Options.AllConfigs)")
	}
	ctl := &Controller{caches: c, kube: kube, dynamic: dyn, events: events, metrics: m, opts: o,
		content: newContents(kube, c.Pinning), records: records{kube: kube, configs: c.AllConfigs[refs.ConfigMap]},
		now: time.Now, changed: map[string]time.Time{}, told: map[string]string{}}
	ctl.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name, m), Sync: ctl.sync, Metrics: m}
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
// which is the newest.
func (c *Controller) revisionHandler() cache.ResourceEventHandler {
	owner := func(obj any) {
		if u, ok := caches.UserOf(obj); ok {
			c.enqueueController(u)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: owner,
		UpdateFunc: func(old, cur any) {
			o, okO := caches.UserOf(old)
			n, okN := caches.UserOf(cur)
			if okO && okN && (o.Number != n.Number || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil)) {
				owner(cur)
			}
		},
		DeleteFunc: owner,
	}
}

// enqueueController enqueues the workload controlling revision u.
func (c *Controller) enqueueController(u *caches.User) {
	if ref := u.Owner; ref != nil {
		for _, k := range workloadKinds() {
			if string(k) == ref.Kind {
				c.loop.Queue.Add(caches.Key(k, u.Namespace, ref.Name))
			}
		}
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
	changed := func(obj any, gone bool) {
		m, ok := caches.MetaOf(obj)
		if !ok {
			return
		}
		if ours(m) {
			// A snapshot taken: the workload of its revision may be waiting for it.
			for _, o := range m.OwnerReferences {
				c.enqueueWorkloadOf(m.Namespace, o)
			}
			return
		}
		if gone {
			c.content.forget(kind, m.Namespace, m.Name)
		}
		now := c.now()
		for _, u := range c.followers(kind, m.Namespace, m.Name) {
			c.mu.Lock()
			c.changed[u.Key()] = now
			c.mu.Unlock()
			c.loop.Queue.AddAfter(u.Key(), c.opts.Settle)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { changed(obj, false) },
		UpdateFunc: func(old, cur any) {
			o, okO := caches.MetaOf(old)
			n, okN := caches.MetaOf(cur)
			if okO && okN && o.ResourceVersion == n.ResourceVersion {
				return // a resync, not a change
			}
			changed(cur, false)
		},
		DeleteFunc: func(obj any) { changed(obj, true) },
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

// forget drops what is held in memory of a workload.
func (c *Controller) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.changed, key)
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
	_, ok := c.changed[key]
	return ok
}

// since is how long ago an object the workload follows last changed (a long time when unknown, e.g.
// after a restart: the change happened while we were away).
func (c *Controller) since(key string) time.Duration {
	c.mu.Lock()
	t, ok := c.changed[key]
	c.mu.Unlock()
	if !ok {
		return time.Duration(1<<62 - 1)
	}
	return c.now().Sub(t)
}
