package caches

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata/metadatainformer"
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
	// Pinning is set when zero-touch pinning is on (NewPinning).
	Pinning *Pinning

	start  []func(stop <-chan struct{})
	synced []cache.InformerSynced
}

// New builds the informers; nothing is watched until Start.
func New(clients *kube.Clients, o Options) (*Caches, error) {
	c := &Caches{Users: map[Kind]*Informer[*User]{}, Configs: map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]{}}
	namespaces := o.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	users := map[Kind][]cache.SharedIndexInformer{}
	configs := map[refs.Kind][]cache.SharedIndexInformer{}
	optedIn := labels.SelectorFromSet(labels.Set{api.RevisionedLabel: api.RevisionedValue}).String()
	for _, ns := range namespaces {
		typed := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0,
			informers.WithNamespace(ns), informers.WithTransform(transform(o.ReplicaSetLabels)))
		// Pods: without the factory's namespace index, which nothing reads (podIndexers).
		pods := typed.InformerFor(&corev1.Pod{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			return coreinformers.NewFilteredPodInformer(c, ns, resync, cache.Indexers{}, nil)
		})
		if err := pods.AddIndexers(podIndexers()); err != nil {
			return nil, err
		}
		users[Pod] = append(users[Pod], pods)
		for kind, inf := range map[Kind]cache.SharedIndexInformer{
			ReplicaSet:         typed.Apps().V1().ReplicaSets().Informer(),
			ControllerRevision: typed.Apps().V1().ControllerRevisions().Informer(),
			Job:                typed.Batch().V1().Jobs().Informer(),
			CronJob:            typed.Batch().V1().CronJobs().Informer(),
			Deployment:         typed.Apps().V1().Deployments().Informer(),
			StatefulSet:        typed.Apps().V1().StatefulSets().Informer(),
			DaemonSet:          typed.Apps().V1().DaemonSets().Informer(),
		} {
			if err := inf.AddIndexers(UserIndexers()); err != nil {
				return nil, err
			}
			users[kind] = append(users[kind], inf)
		}
		c.start = append(c.start, typed.Start)

		if o.Rollouts {
			dyn := dynamicinformer.NewFilteredDynamicSharedInformerFactory(clients.Dynamic, 0, ns, nil)
			inf := dyn.ForResource(workload.RolloutGVR).Informer()
			if err := inf.SetTransform(transform(o.ReplicaSetLabels)); err != nil {
				return nil, err
			}
			if err := inf.AddIndexers(UserIndexers()); err != nil {
				return nil, err
			}
			users[Rollout] = append(users[Rollout], inf)
			c.start = append(c.start, dyn.Start)
		}

		// Config objects: metadata only and filtered by the opt-in label, so their data (up to 1 MiB
		// each) is never downloaded nor cached.
		err := c.metadataInformers(clients, ns, optedIn, o.ConfigKinds, trimConfig,
			func(refs.Kind) cache.Indexers { return ConfigIndexers() }, configs)
		if err != nil {
			return nil, err
		}
	}
	for kind, infs := range users {
		c.Users[kind] = joined[*User](c, infs)
	}
	for kind, infs := range configs {
		c.Configs[kind] = joined[*metav1.PartialObjectMetadata](c, infs)
	}
	return c, nil
}

// Start starts every informer; they stop when stop closes.
func (c *Caches) Start(stop <-chan struct{}) {
	for _, s := range c.start {
		s(stop)
	}
}

// WaitForSync waits until every informer has synced; false if stop closed first.
func (c *Caches) WaitForSync(stop <-chan struct{}) bool {
	return cache.WaitForCacheSync(stop, c.synced...)
}

// trimConfig drops what we never read of a config object's metadata: managedFields and the
// last-applied annotation can be larger than everything else together (client-side apply copies a
// ConfigMap's whole data into it).
func trimConfig(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields = nil
		m.Annotations = nil
	}
	return obj, nil
}

// metadataInformers adds to into, for each kind, a metadata-only informer of namespace ns filtered by
// the label selector, with transform and the kind's indexers; they start with the caches.
func (c *Caches) metadataInformers(clients *kube.Clients, ns, selector string, kinds []refs.Kind,
	transform cache.TransformFunc, indexers func(refs.Kind) cache.Indexers, into map[refs.Kind][]cache.SharedIndexInformer) error {
	meta := metadatainformer.NewFilteredSharedInformerFactory(clients.Metadata, 0, ns,
		func(lo *metav1.ListOptions) { lo.LabelSelector = selector })
	for _, kind := range kinds {
		inf := meta.ForResource(kind.GVR()).Informer()
		if err := inf.SetTransform(transform); err != nil {
			return err
		}
		if err := inf.AddIndexers(indexers(kind)); err != nil {
			return err
		}
		into[kind] = append(into[kind], inf)
	}
	c.start = append(c.start, meta.Start)
	return nil
}

// joined makes one Informer of a resource's per-namespace informers, and has the caches wait for
// each to sync.
func joined[T runtime.Object](c *Caches, infs []cache.SharedIndexInformer) *Informer[T] {
	for _, inf := range infs {
		c.synced = append(c.synced, inf.HasSynced)
	}
	return NewInformer[T](infs...)
}
