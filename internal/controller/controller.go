package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Controller syncs ReplicaSets, keyed "namespace/name". Config and workload events are mapped to the
// ReplicaSets they concern through informer indexes; the queue never holds object snapshots.
type Controller struct {
	clients *kube.Clients
	scopes  map[string]*scope // by namespace; a single "" entry when watching all namespaces
	queue   workqueue.TypedRateLimitingInterface[string]
	writer  *attach.Writer
	metrics *Metrics
	pending *expectations
	synced  chan struct{}
	ready   sync.Once
}

// New builds the controller and its informers; nothing runs until Run.
func New(clients *kube.Clients, o *Options, events attach.EventSink, m *Metrics, withRollouts bool) (*Controller, error) {
	c := &Controller{
		clients: clients,
		scopes:  map[string]*scope{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "replicasets"}),
		writer:  &attach.Writer{Client: clients.Metadata, Events: events},
		metrics: m,
		pending: newExpectations(time.Minute),
		synced:  make(chan struct{}),
	}
	namespaces := o.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	kinds := []refs.Kind{refs.ConfigMap}
	if o.Secrets {
		kinds = append(kinds, refs.Secret)
	}
	for _, ns := range namespaces {
		s, err := newScope(clients, ns, o.ReplicaSetSelector, kinds, withRollouts)
		if err != nil {
			return nil, err
		}
		if err := c.addHandlers(s); err != nil {
			return nil, err
		}
		c.scopes[ns] = s
	}
	m.queueDepth(c.queue.Len)
	return c, nil
}

func (c *Controller) addHandlers(s *scope) error {
	_, err := s.replicaSets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueueReplicaSet,
		UpdateFunc: func(old, cur any) {
			// Status and annotation updates (every scale step) cannot change what to attach; spec
			// (generation), owner and deletion changes can.
			o, n := old.(*appsv1.ReplicaSet), cur.(*appsv1.ReplicaSet)
			if o.UID != n.UID || o.Generation != n.Generation || (o.DeletionTimestamp == nil) != (n.DeletionTimestamp == nil) ||
				!equalOwners(o.OwnerReferences, n.OwnerReferences) {
				c.enqueueReplicaSet(cur)
			}
		},
	})
	if err != nil {
		return err
	}
	for kind, inf := range s.configs {
		if _, err := inf.AddEventHandler(c.configHandler(s, kind)); err != nil {
			return err
		}
	}
	for _, inf := range s.workloads {
		if _, err := inf.AddEventHandler(c.workloadHandler(s)); err != nil {
			return err
		}
	}
	return nil
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

func (c *Controller) enqueueReplicaSet(obj any) {
	key, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// configHandler enqueues the ReplicaSets that use a config object whenever it appears, changes (for
// example someone removed our ownerReference) or goes away.
func (c *Controller) configHandler(s *scope, kind refs.Kind) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		m, ok := metaOf(obj)
		if !ok {
			return
		}
		c.pending.observe(m)
		c.enqueueIndexed(s, byConfigIndex, configKey(m.Namespace, kind, m.Name))
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, cur any) { enqueue(cur) },
		DeleteFunc: enqueue,
	}
}

// workloadHandler enqueues a workload's ReplicaSets, e.g. when its attach-all annotation changes.
func (c *Controller) workloadHandler(s *scope) cache.ResourceEventHandler {
	enqueue := func(obj any) {
		if m, ok := metaOf(obj); ok {
			c.enqueueIndexed(s, byOwnerIndex, string(m.UID))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, cur any) {
			o, okO := metaOf(old)
			n, okN := metaOf(cur)
			if okO && okN && o.Annotations[refs.AttachAllAnnotation] != n.Annotations[refs.AttachAllAnnotation] {
				enqueue(cur)
			}
		},
	}
}

func (c *Controller) enqueueIndexed(s *scope, index, value string) {
	objs, err := s.replicaSets.GetIndexer().ByIndex(index, value)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, o := range objs {
		c.enqueueReplicaSet(o)
	}
}

func metaOf(obj any) (*metav1.PartialObjectMetadata, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	return m, ok
}

// Run starts the informers, waits for their caches, and runs workers until ctx ends.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	log := logging.FromContext(ctx)

	var synced []cache.InformerSynced
	for ns, s := range c.scopes {
		for _, start := range s.start {
			start(ctx.Done())
		}
		for _, inf := range s.informers() {
			synced = append(synced, inf.HasSynced)
		}
		log.Info("watching", "namespace", displayNamespace(ns))
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return errors.New("informer caches did not sync before shutdown")
	}
	c.ready.Do(func() { close(c.synced) })
	log.Info("caches synced; reconciling every existing ReplicaSet", "workers", workers)

	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, c.runWorker, time.Second)
		}()
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	log.Info("workers stopped")
	return nil
}

// Synced is closed once the caches have synced (readiness).
func (c *Controller) Synced() <-chan struct{} { return c.synced }

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNext(ctx) {
	}
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	start := time.Now()
	err := c.sync(ctx, key)
	c.metrics.observeSync(time.Since(start), err)
	switch {
	case err == nil:
		c.queue.Forget(key)
	case errors.Is(err, attach.ErrInvalid):
		// Retrying cannot fix it; the next change to the ReplicaSet or its config will requeue it.
		logging.FromContext(ctx).Error("not attaching", "replicaSet", key, "err", err)
		c.queue.Forget(key)
	default:
		logging.FromContext(ctx).Warn("sync failed, will retry", "replicaSet", key, "err", err)
		c.queue.AddRateLimited(key)
	}
	return true
}

func displayNamespace(ns string) string {
	if ns == "" {
		return "(all)"
	}
	return ns
}

func (c *Controller) scopeFor(namespace string) (*scope, error) {
	if s, ok := c.scopes[metav1.NamespaceAll]; ok {
		return s, nil
	}
	if s, ok := c.scopes[namespace]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("namespace %s is not watched", namespace)
}
