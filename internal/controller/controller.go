// Package controller is the attach controller: it keeps every opted-in ConfigMap and Secret attached to
// every revision (ReplicaSet of a Rollout or Deployment) whose pod template uses it, level-triggered,
// from informer caches, through the same attach step as the Job mode (attach.Writer.Attach).
//
// It is built like kubernetes/sample-controller: New receives the caches (built and started by
// internal/manager, filled directly by unit tests), event handlers turn changes into revision keys,
// and sync reads only caches before writing what is missing.
package controller

import (
	"errors"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/metrics"
	"github.com/configmap-attacher/configmap-attacher/internal/reconcile"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Name names the controller in logs and metrics.
const Name = "attach"

// expectationsTTL bounds how long a write we made may go unseen in the cache before we write again.
const expectationsTTL = time.Minute

// Controller syncs revisions, keyed "Kind/namespace/name" (caches.Key).
type Controller struct {
	caches   *caches.Caches
	writer   *attach.Writer
	metrics  *metrics.Metrics
	selector labels.Selector
	pending  *expectations
	loop     *reconcile.Loop
}

// New wires the controller to its caches; nothing runs until Run. selector narrows the ReplicaSets
// attached (nil: all).
func New(c *caches.Caches, writer *attach.Writer, m *metrics.Metrics, selector labels.Selector) (*Controller, error) {
	if selector == nil {
		selector = labels.Everything()
	}
	ctl := &Controller{caches: c, writer: writer, metrics: m, selector: selector, pending: newExpectations(expectationsTTL)}
	ctl.loop = &reconcile.Loop{Name: Name, Queue: reconcile.NewQueue(Name), Sync: ctl.sync, Metrics: m,
		Permanent: func(err error) bool { return errors.Is(err, attach.ErrInvalid) }}
	if rs, ok := c.Users[caches.ReplicaSet]; ok {
		if err := rs.AddEventHandler(ctl.revisionHandler()); err != nil {
			return nil, err
		}
	}
	for kind, inf := range c.Configs {
		if err := inf.AddEventHandler(ctl.configHandler(kind)); err != nil {
			return nil, err
		}
	}
	for _, kind := range []caches.Kind{caches.Deployment, caches.Rollout} {
		if inf, ok := c.Users[kind]; ok {
			if err := inf.AddEventHandler(ctl.workloadHandler()); err != nil {
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

func (c *Controller) enqueue(u *caches.User) { c.loop.Queue.Add(u.Key()) }

func (c *Controller) revisionHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if u, ok := caches.UserOf(obj); ok {
				c.enqueue(u)
			}
		},
		UpdateFunc: func(old, cur any) {
			// Status and annotation updates (every scale step) cannot change what to attach; spec
			// (generation), owner and deletion changes can.
			o, okO := caches.UserOf(old)
			n, okN := caches.UserOf(cur)
			if okO && okN && (o.UID != n.UID || o.Generation != n.Generation || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
				!equalOwners(o.OwnerReferences, n.OwnerReferences) || !labels.Equals(o.Labels, n.Labels)) {
				c.enqueue(n)
			}
		},
	}
}

func equalOwners(a, b []metav1.OwnerReference) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].UID != b[i].UID {
			return false
		}
	}
	return true
}

// configHandler enqueues the revisions that use a config object whenever it appears, changes (for
// example someone removed our ownerReference) or goes away.
func (c *Controller) configHandler(kind refs.Kind) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		m, ok := caches.MetaOf(obj)
		if !ok {
			return
		}
		c.pending.observe(m)
		c.enqueueUsers(caches.ByConfig, caches.ConfigKey(m.Namespace, refs.Ref{Kind: kind, Name: m.Name}))
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
		DeleteFunc: enqueue,
	}
}

// workloadHandler enqueues a workload's revisions when its attach-all annotation changes.
func (c *Controller) workloadHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if u, ok := caches.UserOf(obj); ok {
				c.enqueueUsers(caches.ByOwner, string(u.UID))
			}
		},
		UpdateFunc: func(old, cur any) {
			o, okO := caches.UserOf(old)
			n, okN := caches.UserOf(cur)
			if okO && okN && o.Annotations[api.AttachAllAnnotation] != n.Annotations[api.AttachAllAnnotation] {
				c.enqueueUsers(caches.ByOwner, string(n.UID))
			}
		},
	}
}

// enqueueUsers enqueues the revisions whose index has value.
func (c *Controller) enqueueUsers(index, value string) {
	rs, ok := c.caches.Users[caches.ReplicaSet]
	if !ok {
		return
	}
	users, err := rs.ByIndex(index, value)
	if err != nil {
		utilruntime.HandleError(err)
	}
	for _, u := range users {
		c.enqueue(u)
	}
}
