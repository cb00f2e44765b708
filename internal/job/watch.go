package job

import (
	"context"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// watcher is a workload.Source over informers scoped to exactly what one Job needs: the namespace's
// ReplicaSets and the named workload (plus, lazily, a Rollout's workloadRef Deployment). Every change
// ticks `changed`, so waiting is driven by watch events rather than a tight poll.
type watcher struct {
	ctx       context.Context
	clients   *kube.Clients
	namespace string
	changed   chan struct{}

	replicaSets appslisters.ReplicaSetLister
	rollouts    cache.GenericLister

	mu          sync.Mutex
	deployments map[string]appslisters.DeploymentLister
}

func startWatcher(ctx context.Context, clients *kube.Clients, ref workload.Ref) (*watcher, error) {
	w := &watcher{
		ctx: ctx, clients: clients, namespace: ref.Namespace,
		changed:     make(chan struct{}, 1),
		deployments: map[string]appslisters.DeploymentLister{},
	}
	// List once up front so a missing permission or CRD is a clear error, not an informer retrying
	// in the background until the timeout.
	if _, err := clients.Kube.AppsV1().ReplicaSets(ref.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return nil, fmt.Errorf("listing ReplicaSets in namespace %s: %w", ref.Namespace, kube.Explain(err))
	}
	rsFactory := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0, informers.WithNamespace(ref.Namespace))
	rsInformer := rsFactory.Apps().V1().ReplicaSets()
	w.watch(rsInformer.Informer())
	w.replicaSets = rsInformer.Lister()
	rsFactory.Start(ctx.Done())

	switch ref.Kind {
	case workload.Rollout:
		if _, err := clients.Dynamic.Resource(workload.RolloutGVR).Namespace(ref.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("the Argo Rollouts CRD (rollouts.argoproj.io) is not installed in this cluster: %w", err)
			}
			return nil, fmt.Errorf("listing Rollouts in namespace %s: %w", ref.Namespace, kube.Explain(err))
		}
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(clients.Dynamic, 0, ref.Namespace, byName(ref.Name))
		gi := f.ForResource(workload.RolloutGVR)
		w.watch(gi.Informer())
		w.rollouts = gi.Lister()
		f.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), rsInformer.Informer().HasSynced, gi.Informer().HasSynced) {
			return nil, ctx.Err()
		}
	case workload.Deployment:
		if !cache.WaitForCacheSync(ctx.Done(), rsInformer.Informer().HasSynced) {
			return nil, ctx.Err()
		}
		if _, err := w.deploymentLister(ref.Name); err != nil {
			return nil, err
		}
	}
	return w, nil
}

func byName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

func (w *watcher) watch(inf cache.SharedIndexInformer) {
	notify := func(any) {
		select {
		case w.changed <- struct{}{}:
		default:
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, n any) { notify(n) },
		DeleteFunc: notify,
	})
	_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		logging.FromContext(w.ctx).Warn("watch failed, retrying", "err", err)
	})
}

// deploymentLister starts (once per name) an informer for one Deployment.
func (w *watcher) deploymentLister(name string) (appslisters.DeploymentLister, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if l, ok := w.deployments[name]; ok {
		return l, nil
	}
	if _, err := w.clients.Kube.AppsV1().Deployments(w.namespace).List(w.ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return nil, fmt.Errorf("listing Deployments in namespace %s: %w", w.namespace, kube.Explain(err))
	}
	f := informers.NewSharedInformerFactoryWithOptions(w.clients.Kube, 0,
		informers.WithNamespace(w.namespace), informers.WithTweakListOptions(byName(name)))
	inf := f.Apps().V1().Deployments()
	w.watch(inf.Informer())
	f.Start(w.ctx.Done())
	if !cache.WaitForCacheSync(w.ctx.Done(), inf.Informer().HasSynced) {
		return nil, w.ctx.Err()
	}
	w.deployments[name] = inf.Lister()
	return inf.Lister(), nil
}

func (w *watcher) Rollout(namespace, name string) (*workload.RolloutObject, error) {
	obj, err := w.rollouts.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil, err
	}
	return workload.RolloutFromUnstructured(obj.(*unstructured.Unstructured))
}

func (w *watcher) Deployment(namespace, name string) (*appsv1.Deployment, error) {
	l, err := w.deploymentLister(name)
	if err != nil {
		return nil, err
	}
	return l.Deployments(namespace).Get(name)
}

func (w *watcher) ReplicaSets(namespace string) ([]*appsv1.ReplicaSet, error) {
	return w.replicaSets.ReplicaSets(namespace).List(labels.Everything())
}
