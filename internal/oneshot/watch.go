package oneshot

import (
	"context"
	"fmt"

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

// watcher is a workload.Source over informers scoped to exactly what one Job waits for: the namespace's
// ReplicaSets, the named workload and the Deployment it takes its template from. They all start in
// startWatcher, before waiting begins; every change ticks `changed`, so waiting is driven by watch
// events rather than a tight poll.
type watcher struct {
	direct  workload.ClientSource
	changed chan struct{}

	replicaSets appslisters.ReplicaSetLister
	rollouts    cache.GenericLister          // set for a Rollout
	deployment  appslisters.DeploymentLister // set when a Deployment is watched
	deployName  string
}

// startWatcher starts the informers one Job needs. deployment names the Deployment to watch: the
// workload itself, or a Rollout's workloadRef as read by the first check ("" when unknown yet).
func startWatcher(ctx context.Context, clients *kube.Clients, ref workload.Ref, deployment string) (*watcher, error) {
	w := &watcher{direct: workload.ClientSource{Kube: clients.Kube, Dynamic: clients.Dynamic}, changed: make(chan struct{}, 1)}
	onError := func(_ *cache.Reflector, err error) {
		logging.FromContext(ctx).Warn("watch failed, retrying", "err", err)
	}
	// List once up front so a missing permission or CRD is a clear error, not an informer retrying
	// in the background until the timeout.
	if _, err := clients.Kube.AppsV1().ReplicaSets(ref.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		return nil, fmt.Errorf("listing ReplicaSets in namespace %s: %w", ref.Namespace, kube.Explain(err))
	}
	rsFactory := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0, informers.WithNamespace(ref.Namespace))
	rsInformer := rsFactory.Apps().V1().ReplicaSets()
	w.replicaSets = rsInformer.Lister()
	synced := []cache.InformerSynced{w.watch(rsInformer.Informer(), onError)}

	if ref.Kind == workload.Rollout {
		if _, err := clients.Dynamic.Resource(workload.RolloutGVR).Namespace(ref.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("the Argo Rollouts CRD (rollouts.argoproj.io) is not installed in this cluster: %w", err)
			}
			return nil, fmt.Errorf("listing Rollouts in namespace %s: %w", ref.Namespace, kube.Explain(err))
		}
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(clients.Dynamic, 0, ref.Namespace, byName(ref.Name))
		gi := f.ForResource(workload.RolloutGVR)
		w.rollouts = gi.Lister()
		synced = append(synced, w.watch(gi.Informer(), onError))
		f.Start(ctx.Done())
	} else {
		deployment = ref.Name
	}
	if deployment != "" {
		if _, err := clients.Kube.AppsV1().Deployments(ref.Namespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return nil, fmt.Errorf("listing Deployments in namespace %s: %w", ref.Namespace, kube.Explain(err))
		}
		f := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0,
			informers.WithNamespace(ref.Namespace), informers.WithTweakListOptions(byName(deployment)))
		inf := f.Apps().V1().Deployments()
		w.deployment, w.deployName = inf.Lister(), deployment
		synced = append(synced, w.watch(inf.Informer(), onError))
		f.Start(ctx.Done())
	}
	rsFactory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return nil, ctx.Err()
	}
	return w, nil
}

func byName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

func (w *watcher) watch(inf cache.SharedIndexInformer, onError cache.WatchErrorHandler) cache.InformerSynced {
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
	_ = inf.SetWatchErrorHandler(onError)
	return inf.HasSynced
}

func (w *watcher) Rollout(_ context.Context, namespace, name string) (*workload.RolloutObject, error) {
	obj, err := w.rollouts.ByNamespace(namespace).Get(name)
	if err != nil {
		return nil, err
	}
	return workload.RolloutFromUnstructured(obj.(*unstructured.Unstructured))
}

// Deployment reads the watched Deployment from its cache. A Rollout that was absent at the first check,
// or whose workloadRef changed since, may name another: that one is read directly, and the periodic
// recheck stands in for its watch.
func (w *watcher) Deployment(ctx context.Context, namespace, name string) (*appsv1.Deployment, error) {
	if w.deployment != nil && name == w.deployName {
		return w.deployment.Deployments(namespace).Get(name)
	}
	return w.direct.Deployment(ctx, namespace, name)
}

func (w *watcher) ReplicaSets(_ context.Context, namespace string) ([]*appsv1.ReplicaSet, error) {
	return w.replicaSets.ReplicaSets(namespace).List(labels.Everything())
}
