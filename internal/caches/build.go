package caches

import (
	"strings"
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
	// AllConfigs are every ConfigMap and Secret, metadata only (trimAll), when Options.AllConfigs is
	// set; Configs and the pinning snapshots are then views of these, not informers of their own.
	AllConfigs map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]
	// Pinning is set when zero-touch pinning is on (NewPinning).
	Pinning *Pinning

	// start and stageSynced by stage; synced is every informer's.
	start       [stages][]func(stop <-chan struct{})
	stageSynced [stages][]cache.InformerSynced
	synced      []cache.InformerSynced
}

// The informers start in stages, each once the one before has synced: workloads and config objects,
// then revisions, then pods. A revision that arrives after its workload, a pod after its revision,
// shares with it what they have in common (sharing.controller); started together, the Pod informer
// would show most pods before their ReplicaSet.
const (
	stageWorkloads = iota
	stageRevisions
	stagePods
	stages
)

// stageOf is the stage in which the informer of a kind starts.
func stageOf(k Kind) int {
	switch k {
	case Pod:
		return stagePods
	case ReplicaSet, ControllerRevision, Job:
		return stageRevisions
	}
	return stageWorkloads
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
	// What a Pod or revision shares with its controller is found in the controller's cache, once
	// the informers below are joined into c.Users (before any starts).
	share := newSharing(func(kind Kind, ns, name string) *User {
		inf, ok := c.Users[kind]
		if !ok {
			return nil
		}
		u, _, _ := inf.Get(ns, name)
		return u
	})
	for _, ns := range namespaces {
		// A factory per stage (stageOf), each starting its own informers.
		var typed [stages]informers.SharedInformerFactory
		for st := range typed {
			typed[st] = informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0,
				informers.WithNamespace(ns), informers.WithTransform(transform(share, o.ReplicaSetLabels)))
			c.start[st] = append(c.start[st], typed[st].Start)
		}
		// Pods: the namespace index only (a pod is never found by the reload-list or template indexes).
		pods := typed[stagePods].InformerFor(&corev1.Pod{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
			return coreinformers.NewFilteredPodInformer(c, ns, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil)
		})
		users[Pod] = append(users[Pod], pods)
		for kind, inf := range map[Kind]cache.SharedIndexInformer{
			ReplicaSet:         typed[stageOf(ReplicaSet)].Apps().V1().ReplicaSets().Informer(),
			ControllerRevision: typed[stageOf(ControllerRevision)].Apps().V1().ControllerRevisions().Informer(),
			Job:                typed[stageOf(Job)].Batch().V1().Jobs().Informer(),
			CronJob:            typed[stageOf(CronJob)].Batch().V1().CronJobs().Informer(),
			Deployment:         typed[stageOf(Deployment)].Apps().V1().Deployments().Informer(),
			StatefulSet:        typed[stageOf(StatefulSet)].Apps().V1().StatefulSets().Informer(),
			DaemonSet:          typed[stageOf(DaemonSet)].Apps().V1().DaemonSets().Informer(),
		} {
			if err := inf.AddIndexers(UserIndexers()); err != nil {
				return nil, err
			}
			users[kind] = append(users[kind], inf)
		}

		if o.Rollouts {
			dyn := dynamicinformer.NewFilteredDynamicSharedInformerFactory(clients.Dynamic, 0, ns, nil)
			inf := dyn.ForResource(workload.RolloutGVR).Informer()
			if err := inf.SetTransform(transform(share, o.ReplicaSetLabels)); err != nil {
				return nil, err
			}
			if err := inf.AddIndexers(UserIndexers()); err != nil {
				return nil, err
			}
			users[Rollout] = append(users[Rollout], inf)
			c.start[stageOf(Rollout)] = append(c.start[stageOf(Rollout)], dyn.Start)
		}

		// Config objects: metadata only, so their data (up to 1 MiB each) is never downloaded nor
		// cached; filtered by the opt-in label unless the config trigger needs them all.
		var err error
		if o.AllConfigs {
			err = c.metadataInformers(clients, ns, "", o.ConfigKinds, trimAll(share), allConfigIndexers, configs)
		} else {
			err = c.metadataInformers(clients, ns, optedIn, o.ConfigKinds, trimConfig(share),
				func(refs.Kind) cache.Indexers { return cache.Indexers{} }, configs)
		}
		if err != nil {
			return nil, err
		}
	}
	for kind, infs := range users {
		c.Users[kind] = joined[*User](c, stageOf(kind), infs)
	}
	for kind, infs := range configs {
		c.Configs[kind] = joined[*metav1.PartialObjectMetadata](c, stageWorkloads, infs)
	}
	if o.AllConfigs {
		c.widen()
	}
	return c, nil
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

// allConfigIndexers are the indexes of the widened config informers besides the namespace index:
// the snapshots' (ByPin, ByCopied), since the pinning snapshots are a view of them.
func allConfigIndexers(kind refs.Kind) cache.Indexers { return snapshotIndexers(kind) }

// Start starts the informers, stage by stage, in the background; they stop when stop closes.
func (c *Caches) Start(stop <-chan struct{}) {
	go func() {
		for st := range stages {
			for _, start := range c.start[st] {
				start(stop)
			}
			if !cache.WaitForCacheSync(stop, c.stageSynced[st]...) {
				return
			}
		}
	}()
}

// WaitForSync waits until every informer has synced; false if stop closed first.
func (c *Caches) WaitForSync(stop <-chan struct{}) bool {
	return cache.WaitForCacheSync(stop, c.synced...)
}

// trimConfig is the transform of the opted-in config informers: it drops what we never read of a
// config object's metadata (managedFields and the last-applied annotation can be larger than
// everything else together: client-side apply copies a ConfigMap's whole data into it; the labels of
// tools and users), and shares what the objects repeat (sharing.configMeta).
func trimConfig(s *sharing) cache.TransformFunc {
	return func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			m.ManagedFields = nil
			m.Annotations = nil
			m.Labels = ourLabels(m.Labels)
			s.configMeta(m)
		}
		return obj, nil
	}
}

// ourLabels are the labels of ours among labels (nil if none): the only ones anything reads of a
// config object.
func ourLabels(labels map[string]string) map[string]string {
	var out map[string]string
	for k, v := range labels {
		if strings.HasPrefix(k, api.Prefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// trimAll is the transform of the widened config informers, which hold every ConfigMap and Secret of
// the cluster: of the labels only ours, of the annotations only what a reader needs (Reloader's match
// and ignore, a snapshot's original name, a record's content). Everything else a tool or a user put
// there (Helm's and Argo CD's tracking, the last-applied copy of the data) goes.
func trimAll(s *sharing) cache.TransformFunc {
	return func(obj any) (any, error) {
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return obj, nil
		}
		m.ManagedFields = nil
		labels := ourLabels(m.Labels)
		keep := []string{api.ReloaderMatch, api.ReloaderIgnore}
		switch {
		case labels[api.SnapshotLabel] == api.SnapshotValue:
			keep = append(keep, api.OriginalNameAnnotation)
		case labels[api.RecordLabel] == api.RecordValue:
			keep = append(keep, api.RecordAnnotation)
		}
		var annotations map[string]string
		for _, k := range keep {
			if v, ok := m.Annotations[k]; ok {
				if annotations == nil {
					annotations = map[string]string{}
				}
				annotations[k] = v
			}
		}
		m.Labels, m.Annotations = labels, annotations
		s.configMeta(m)
		return m, nil
	}
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
	c.start[stageWorkloads] = append(c.start[stageWorkloads], meta.Start)
	return nil
}

// joined makes one Informer of a resource's per-namespace informers, and has the caches wait for
// each to sync, and the next stage for those of stage.
func joined[T runtime.Object](c *Caches, stage int, infs []cache.SharedIndexInformer) *Informer[T] {
	for _, inf := range infs {
		c.synced = append(c.synced, inf.HasSynced)
		c.stageSynced[stage] = append(c.stageSynced[stage], inf.HasSynced)
	}
	return NewInformer[T](infs...)
}
