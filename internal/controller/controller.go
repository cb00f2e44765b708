// Package controller is the attach controller: it keeps every opted-in ConfigMap and Secret attached to
// every revision whose pod template uses it — ReplicaSets (Deployments, Rollouts), ControllerRevisions
// (StatefulSets, DaemonSets), Jobs, CronJobs and bare Pods — level-triggered, from informer caches,
// through the same attach step as the Job mode (attach.Writer.Attach). When a revision stops using an
// object (a CronJob's template changes in place), it takes back the ownerReference it wrote.
//
// It is built like kubernetes/sample-controller: New receives the caches (built and started by
// internal/manager, filled directly by unit tests), event handlers turn changes into revision keys,
// and sync reads only caches before writing what is missing.
package controller

import (
	"context"
	"errors"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Name names the controller in logs and metrics.
const Name = "attach"

// expectationsTTL bounds how long a write we made may go unseen in the cache before we write again.
const expectationsTTL = time.Minute

// RevisionKinds are the kinds whose objects own config: each holds one revision of a pod template.
func RevisionKinds() []caches.Kind {
	return []caches.Kind{caches.ReplicaSet, caches.ControllerRevision, caches.Job, caches.CronJob, caches.Pod}
}

// Options tune what the controller attaches.
type Options struct {
	// ReplicaSetSelector narrows the ReplicaSets attached (nil: all). It never narrows protection.
	ReplicaSetSelector labels.Selector
	// AttachAllNamespaces are where an administrator allowed the attach-all annotation; "*" is every
	// namespace. Elsewhere the annotation is ignored.
	AttachAllNamespaces []string
}

// Controller syncs revisions, keyed "Kind/namespace/name" (caches.Key).
type Controller struct {
	caches  *caches.Caches
	writer  *attach.Writer
	metrics *metrics.Metrics
	opts    Options
	pending *expectations
	loop    *reconcile.Loop
}

// New wires the controller to its caches; nothing runs until its Loop runs.
func New(c *caches.Caches, writer *attach.Writer, m *metrics.Metrics, o Options) (*Controller, error) {
	if o.ReplicaSetSelector == nil {
		o.ReplicaSetSelector = labels.Everything()
	}
	ctl := &Controller{caches: c, writer: writer, metrics: m, opts: o, pending: newExpectations(expectationsTTL)}
	// A sync is cache reads and a PATCH per object: it waits on the API server. A deploy of many
	// workloads at once brings their revisions within a second or two; with -workers (8) of them
	// they queued up to 13 deep, and the median attach was 1.11-1.23× the floor's (which patches the
	// moment it sees a ReplicaSet); four times as many kept the queue empty, 0.94-1.06×
	// (docs/benchmarks.md, "eighth run").
	ctl.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name, m), Sync: ctl.sync, Metrics: m, Start: ctl.queueUnsynced,
		Permanent: func(err error) bool { return errors.Is(err, attach.ErrInvalid) }, WorkersPer: 4}
	for _, kind := range RevisionKinds() {
		if inf, ok := c.Users[kind]; ok {
			if err := inf.AddEventHandlerAfterFirstList(ctl.revisionHandler()); err != nil {
				return nil, err
			}
		}
	}
	for kind, inf := range c.Configs {
		if err := inf.AddEventHandlerAfterFirstList(ctl.configHandler(kind)); err != nil {
			return nil, err
		}
	}
	for _, kind := range []caches.Kind{caches.Deployment, caches.Rollout, caches.StatefulSet, caches.DaemonSet, caches.CronJob} {
		if inf, ok := c.Users[kind]; ok {
			if err := inf.AddEventHandlerAfterFirstList(ctl.workloadHandler()); err != nil {
				return nil, err
			}
		}
	}
	if m != nil {
		m.Gauge("configmap_attacher_queue_depth", "Revision keys waiting to be synced.", func() float64 { return float64(ctl.loop.Queue.Len()) })
	}
	return ctl, nil
}

// Loop is the controller's queue and workers.
func (c *Controller) Loop() *reconcile.Loop { return c.loop }

// enqueue queues a revision. A pod with a controller is no revision of its own (its controller's
// revision reads the config): a cluster's pods would fill the queue at every start for nothing.
func (c *Controller) enqueue(u *caches.User) {
	if u.Kind() == caches.Pod && u.Owner != nil {
		return
	}
	c.loop.Queue.Add(u.Key())
}

// revisionHandler enqueues a revision when it appears or changes in what it uses. Not for the
// revisions of the caches' first list: queueUnsynced looks at those once the caches hold everything,
// and queues only those it finds unsynced.
func (c *Controller) revisionHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if u, ok := caches.UserOf(obj); ok && !initial {
				c.enqueue(u)
			}
		},
		UpdateFunc: func(old, cur any) {
			// Status updates (every scale step, every pod phase) cannot change what to attach;
			// references, owners, labels (the selector), our annotation and deletion can.
			o, okO := caches.UserOf(old)
			n, okN := caches.UserOf(cur)
			if okO && okN && (o.UID != n.UID || !slices.Equal(o.Refs, n.Refs) || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
				!sameController(o.Owner, n.Owner) || !labels.Equals(o.Labels, n.Labels) ||
				o.Annotations[api.AttachAllAnnotation] != n.Annotations[api.AttachAllAnnotation]) {
				c.enqueue(n)
			}
		},
	}
}

func sameController(a, b *metav1.OwnerReference) bool {
	return (a == nil) == (b == nil) && (a == nil || a.UID == b.UID)
}

// configHandler enqueues the revisions that use a config object whenever it appears, changes (for
// example someone removed our ownerReference) or goes away. Not for the objects of the caches' first
// list: queueUnsynced looks at every revision then, and looking for the users of each of a cluster's
// config objects would make the start's work grow with objects × revisions per namespace.
func (c *Controller) configHandler(kind refs.Kind) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		m, ok := caches.MetaOf(obj)
		if !ok {
			return
		}
		c.pending.observe(m)
		r := refs.Ref{Kind: kind, Name: m.Name}
		c.enqueueUsers(func(k caches.Kind) ([]*caches.User, error) { return c.caches.UsersUsing(k, m.Namespace, r) }, true)
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if !initial {
				enqueue(obj)
			}
		},
		UpdateFunc: func(_, cur any) { enqueue(cur) },
		DeleteFunc: enqueue,
	}
}

// workloadHandler enqueues a workload's revisions when its attach-all annotation changes (and when it
// appears after the caches' first list, whose revisions queueUnsynced looks at).
func (c *Controller) workloadHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if u, ok := caches.UserOf(obj); ok && !initial {
				c.enqueueUsers(func(k caches.Kind) ([]*caches.User, error) { return c.caches.UsersControlledBy(k, u.Namespace, u.UID) }, false)
			}
		},
		UpdateFunc: func(old, cur any) {
			o, okO := caches.UserOf(old)
			n, okN := caches.UserOf(cur)
			if okO && okN && o.Annotations[api.AttachAllAnnotation] != n.Annotations[api.AttachAllAnnotation] {
				c.enqueueUsers(func(k caches.Kind) ([]*caches.User, error) { return c.caches.UsersControlledBy(k, n.Namespace, n.UID) }, false)
			}
		},
	}
}

// enqueueUsers enqueues the revisions of every kind that find returns; bare pods only with withPods
// (no pod is a workload's revision).
func (c *Controller) enqueueUsers(find func(caches.Kind) ([]*caches.User, error), withPods bool) {
	for _, kind := range RevisionKinds() {
		if kind == caches.Pod && !withPods {
			continue
		}
		users, err := find(kind)
		if err != nil {
			utilruntime.HandleError(err)
		}
		for _, u := range users {
			c.enqueue(u)
		}
	}
}

// queueUnsynced queues the revisions the caches show unsynced: the start's look at what the caches'
// first list brought, whose adds queue nothing. Each revision is asked once every cache holds
// everything, so the answer is whole; a controller restarted on a cluster it keeps attached queues a
// handful of keys, not each of 150,000 revisions (whose keys, sets and timestamps the queue keeps room
// for after they drain, and whose syncs would hold the first new attach back behind them).
func (c *Controller) queueUnsynced(ctx context.Context) {
	queued, looked := 0, 0
	for _, kind := range RevisionKinds() {
		c.caches.EachRevision(kind, func(u *caches.User) {
			looked++
			if c.unsynced(ctx, u) {
				c.loop.Queue.Add(u.Key())
				queued++
			}
		})
	}
	logging.FromContext(ctx).Info("queued the revisions whose config is not attached", "queued", queued, "revisions", looked)
}
