package caches

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Options say what to cache.
type Options struct {
	// Namespaces to watch; empty means all.
	Namespaces []string
	// ConfigKinds are the config kinds followed (Secrets may be left out).
	ConfigKinds []refs.Kind
	// Rollouts adds Argo Rollouts (when its CRD is installed).
	Rollouts bool
	// AllConfigs widens the config informers to every ConfigMap and Secret (metadata only), for the
	// config trigger: the objects Reloader's annotations select carry no label of ours. Configs is then
	// a view of them showing only the opted-in ones.
	AllConfigs bool
	// ReplicaSetLabels keeps the ReplicaSets' labels (for -replicaset-selector); no other labels of
	// users are kept.
	ReplicaSetLabels bool
}

// Caches are the informers the controllers read.
type Caches struct {
	// Users are the objects that use config, by kind.
	Users map[Kind]*Informer[*User]
	// Configs are the opted-in ConfigMaps and Secrets, metadata only.
	Configs map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]
	// AllConfigs are every ConfigMap and Secret, metadata only, when Options.AllConfigs is set; Configs
	// and the pinning snapshots are then views of these, not informers of their own.
	AllConfigs map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]
	// Pinning is set when zero-touch pinning is on (NewPinning).
	Pinning *Pinning

	reducer *reducer
	// informers are every informer of the caches, started together.
	informers []runner
}

// compressInitialLists is whether the informers accept gzip: kube-apiserver compresses a response
// (and, from 1.37, the initial stream of a watch-list) of more than 128 KiB when the client accepts
// it. On, measured both ways on one cluster of 50,036 Pods, each build started anew twice, alternating
// (docs/benchmarks.md, "Compression of the first lists"): with gzip the caches synced in 43 s, at
// 11.5 s of our CPU and 30 s of kube-apiserver's; without, in 109–124 s, at 22 s and 72–75 s: less
// CPU on both sides with gzip, against the expectation that compression only costs.
const compressInitialLists = true

// New builds the informers; nothing is watched until Start.
func New(clients *kube.Clients, o Options) (*Caches, error) {
	clients, err := clients.WithCompression(compressInitialLists)
	if err != nil {
		return nil, err
	}
	return build(apiSources{clients}, o)
}

// sources list and watch what the caches hold: the API server (apiSources), generated objects in the
// benchmarks. Each returns the lister-watcher and an object of the type it lists.
type sources interface {
	// users lists a kind of user in namespace ns ("" for all).
	users(kind Kind, ns string) (cache.ListerWatcher, runtime.Object)
	// metadata lists the metadata of a resource in namespace ns, filtered by a label selector.
	metadata(gvr schema.GroupVersionResource, ns, selector string) (cache.ListerWatcher, runtime.Object)
}

func build(src sources, o Options) (*Caches, error) {
	c := &Caches{Users: map[Kind]*Informer[*User]{}, Configs: map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]{}}
	namespaces := o.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	c.reducer = newReducer(newIdentities(c.cachedIdentity), o.ReplicaSetLabels, o.AllConfigs)
	c.reducer.stored = c.stored
	users := map[Kind][]Source{}
	configs := map[refs.Kind][]Source{}
	optedIn := labels.SelectorFromSet(labels.Set{api.RevisionedLabel: api.RevisionedValue}).String()
	for _, ns := range namespaces {
		for _, kind := range UserKinds() {
			if kind == Rollout && !o.Rollouts {
				continue
			}
			// Pods: the namespace only (a pod is never found by the reload-list or template indexes).
			indexers := UserIndexers()
			if kind == Pod {
				indexers = nil
			}
			lw, example := src.users(kind, ns)
			inf := newStoreInformer(lw, example, c.reducer.transform, indexers)
			users[kind] = append(users[kind], inf)
			c.add(inf)
		}
		// Config objects: metadata only, so their data (up to 1 MiB each) is never downloaded nor
		// cached; filtered by the opt-in label unless the config trigger needs them all.
		var err error
		if o.AllConfigs {
			err = c.metadataInformers(src, ns, "", o.ConfigKinds, keepForTrigger, snapshotIndexers, configs)
		} else {
			err = c.metadataInformers(src, ns, optedIn, o.ConfigKinds, keepNone,
				func(refs.Kind) cache.Indexers { return cache.Indexers{} }, configs)
		}
		if err != nil {
			return nil, err
		}
	}
	for kind, infs := range users {
		c.Users[kind] = newViewInformer(userView, infs...)
	}
	for kind, infs := range configs {
		c.Configs[kind] = newViewInformer(configView(kind), infs...)
	}
	if o.AllConfigs {
		c.widen()
	}
	return c, nil
}

// apiSources are the API server's informers, through clients.
type apiSources struct{ clients *kube.Clients }

func (a apiSources) users(kind Kind, ns string) (cache.ListerWatcher, runtime.Object) {
	kc := a.clients.Kube
	var lw *cache.ListWatch
	var example runtime.Object
	switch kind {
	case Pod:
		c := kc.CoreV1().Pods(ns)
		lw, example = listWatch(c.List, c.Watch), &corev1.Pod{}
	case ReplicaSet:
		c := kc.AppsV1().ReplicaSets(ns)
		lw, example = listWatch(c.List, c.Watch), &appsv1.ReplicaSet{}
	case ControllerRevision:
		c := kc.AppsV1().ControllerRevisions(ns)
		lw, example = listWatch(c.List, c.Watch), &appsv1.ControllerRevision{}
	case Job:
		c := kc.BatchV1().Jobs(ns)
		lw, example = listWatch(c.List, c.Watch), &batchv1.Job{}
	case CronJob:
		c := kc.BatchV1().CronJobs(ns)
		lw, example = listWatch(c.List, c.Watch), &batchv1.CronJob{}
	case Deployment:
		c := kc.AppsV1().Deployments(ns)
		lw, example = listWatch(c.List, c.Watch), &appsv1.Deployment{}
	case StatefulSet:
		c := kc.AppsV1().StatefulSets(ns)
		lw, example = listWatch(c.List, c.Watch), &appsv1.StatefulSet{}
	case DaemonSet:
		c := kc.AppsV1().DaemonSets(ns)
		lw, example = listWatch(c.List, c.Watch), &appsv1.DaemonSet{}
	case Rollout:
		c := a.clients.Dynamic.Resource(workload.RolloutGVR).Namespace(ns)
		return cache.ToListWatcherWithWatchListSemantics(listWatch(c.List, c.Watch), a.clients.Dynamic), &unstructured.Unstructured{}
	default:
		panic(fmt.Sprintf("no informer for %s", kind))
	}
	return cache.ToListWatcherWithWatchListSemantics(lw, kc), example
}

// listWatch makes a lister-watcher of a client's List and Watch.
func listWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error),
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc:  func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return list(ctx, o) },
		WatchFuncWithContext: watchFn,
	}
}

// add makes inf one of the informers the caches start and wait for.
func (c *Caches) add(inf runner) { c.informers = append(c.informers, inf) }

// stored returns the object the cache of kind holds under key, as it holds it.
func (c *Caches) stored(kind Kind, key string) (any, bool) {
	inf, ok := c.Users[kind]
	if !ok {
		return nil, false
	}
	return inf.stored(key)
}

// cachedIdentity returns the identity of the cached object key of kind, nil if none.
func (c *Caches) cachedIdentity(kind Kind, key string) *identity {
	obj, ok := c.stored(kind, key)
	if !ok {
		return nil
	}
	if e, ok := obj.(*entry); ok {
		return e.id
	}
	return nil
}

// widen makes the config informers the AllConfigs and Configs the view of them that shows only the
// opted-in objects: in-use protection and the attach controller, written for a label-selected watch,
// then see exactly what they saw (an object losing the label is deleted for them).
func (c *Caches) widen() {
	c.AllConfigs = c.Configs
	c.Configs = map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]{}
	for kind, inf := range c.AllConfigs {
		c.Configs[kind] = inf.Filtered(func(m *metav1.PartialObjectMetadata) bool { return api.OptedIn(m.Labels) })
	}
}

// Start starts every informer at once, in the background; they stop when ctx ends. Once every informer
// that shares identities has stored its first list, what the first lists needed to share identities
// whatever the order objects arrived in is dropped (identities). One whose lists are refused (a
// namespace the controller may not list, a resource not served) may never store one: it does not hold
// the table back, which would otherwise be kept, and grow with every object arriving, for as long as
// the refusal lasts.
func (c *Caches) Start(ctx context.Context) {
	for _, inf := range c.informers {
		go inf.RunWithContext(ctx)
	}
	var firstLists []cache.InformerSynced
	for _, inf := range c.informers {
		if s, ok := inf.(*storeInformer); ok {
			firstLists = append(firstLists, func() bool { return s.HasSynced() || s.refused.Load() })
		}
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), firstLists...) {
			c.reducer.ids.settle()
		}
	}()
}

// WaitForSync waits until every informer has synced and every event handler added so far has been
// handed its informer's first list; false if stop closed first.
func (c *Caches) WaitForSync(stop <-chan struct{}) bool {
	synced := make([]cache.InformerSynced, len(c.informers))
	for i, inf := range c.informers {
		synced[i] = func() bool { return inf.HasSynced() && inf.handlersSynced() }
	}
	return cache.WaitForCacheSync(stop, synced...)
}

// Unreadable counts the objects of kind the caches skip because they cannot be read (ErrUnreadable).
func (c *Caches) Unreadable(kind Kind) int {
	n := 0
	for _, inf := range c.informers {
		if s, ok := inf.(*storeInformer); ok {
			n += s.unreadable(kind)
		}
	}
	return n
}

// metadataInformers adds to into, for each kind, a metadata-only informer of namespace ns filtered by
// the label selector, reducing each object to its record (with the annotations keep names), with the
// kind's indexers; they start with the caches.
func (c *Caches) metadataInformers(src sources, ns, selector string, kinds []refs.Kind,
	keep func(map[string]string) []string, indexers func(refs.Kind) cache.Indexers, into map[refs.Kind][]Source) error {
	for _, kind := range kinds {
		lw, example := src.metadata(kind.GVR(), ns, selector)
		inf := newStoreInformer(lw, example, c.reducer.configTransform(keep), indexers(kind))
		into[kind] = append(into[kind], inf)
		c.add(inf)
	}
	return nil
}

func (a apiSources) metadata(gvr schema.GroupVersionResource, ns, selector string) (cache.ListerWatcher, runtime.Object) {
	c := a.clients.Metadata.Resource(gvr).Namespace(ns)
	tweak := func(o metav1.ListOptions) metav1.ListOptions { o.LabelSelector = selector; return o }
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return c.List(ctx, tweak(o)) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return c.Watch(ctx, tweak(o))
		},
	}, a.clients.Metadata), &metav1.PartialObjectMetadata{}
}
