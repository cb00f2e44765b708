package controller

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Index names on the ReplicaSet informer: which ReplicaSets use a config object, and which a workload
// owns. They turn a config or workload event into the ReplicaSet keys to sync.
const (
	byConfigIndex = "byConfig"
	byOwnerIndex  = "byOwner"
)

var deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// scope is the informers of one namespace ("" = all namespaces).
type scope struct {
	replicaSets    cache.SharedIndexInformer
	rsLister       appslisters.ReplicaSetLister
	configs        map[refs.Kind]cache.SharedIndexInformer // opted-in objects, metadata only
	workloads      []cache.SharedIndexInformer             // Deployments and Rollouts, metadata only
	workloadByKind map[workload.Kind]cache.GenericLister
	start          []func(stop <-chan struct{})
}

func newScope(clients *kube.Clients, namespace, rsSelector string, kinds []refs.Kind, withRollouts bool) (*scope, error) {
	s := &scope{configs: map[refs.Kind]cache.SharedIndexInformer{}, workloadByKind: map[workload.Kind]cache.GenericLister{}}

	rsFactory := informers.NewSharedInformerFactoryWithOptions(clients.Kube, 0,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = rsSelector }),
		informers.WithTransform(trimReplicaSet))
	rsInf := rsFactory.Apps().V1().ReplicaSets()
	if err := rsInf.Informer().AddIndexers(cache.Indexers{byConfigIndex: indexByConfig, byOwnerIndex: indexByOwner}); err != nil {
		return nil, err
	}
	s.replicaSets, s.rsLister = rsInf.Informer(), rsInf.Lister()
	s.start = append(s.start, rsFactory.Start)

	// Config objects: metadata only and filtered by the opt-in label, so their data (up to 1 MiB each)
	// is never downloaded nor cached.
	optedIn := labels.SelectorFromSet(labels.Set{refs.RevisionedLabel: refs.RevisionedValue}).String()
	cfgFactory := metadatainformer.NewFilteredSharedInformerFactory(clients.Metadata, 0, namespace,
		func(o *metav1.ListOptions) { o.LabelSelector = optedIn })
	for _, kind := range kinds {
		inf := cfgFactory.ForResource(attach.GVR(kind)).Informer()
		if err := inf.SetTransform(trimConfig); err != nil {
			return nil, err
		}
		s.configs[kind] = inf
	}
	s.start = append(s.start, cfgFactory.Start)

	wlFactory := metadatainformer.NewFilteredSharedInformerFactory(clients.Metadata, 0, namespace, nil)
	wl := map[workload.Kind]schema.GroupVersionResource{workload.Deployment: deploymentsGVR}
	if withRollouts {
		wl[workload.Rollout] = workload.RolloutGVR
	}
	for kind, gvr := range wl {
		gi := wlFactory.ForResource(gvr)
		if err := gi.Informer().SetTransform(trimWorkload); err != nil {
			return nil, err
		}
		s.workloads = append(s.workloads, gi.Informer())
		s.workloadByKind[kind] = gi.Lister()
	}
	s.start = append(s.start, wlFactory.Start)
	return s, nil
}

func (s *scope) informers() []cache.SharedIndexInformer {
	out := []cache.SharedIndexInformer{s.replicaSets}
	for _, inf := range s.configs {
		out = append(out, inf)
	}
	return append(out, s.workloads...)
}

func configKey(namespace string, kind refs.Kind, name string) string {
	return fmt.Sprintf("%s/%s/%s", namespace, kind, name)
}

func indexByConfig(obj any) ([]string, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return nil, nil
	}
	var keys []string
	for r := range refs.FromPodSpec(&rs.Spec.Template.Spec) {
		keys = append(keys, configKey(rs.Namespace, r.Kind, r.Name))
	}
	return keys, nil
}

func indexByOwner(obj any) ([]string, error) {
	rs, ok := obj.(*appsv1.ReplicaSet)
	if !ok {
		return nil, nil
	}
	if owner := metav1.GetControllerOf(rs); owner != nil {
		return []string{string(owner.UID)}, nil
	}
	return nil, nil
}

// Transforms drop what we never read before objects enter the caches: managedFields and the
// last-applied annotation can be larger than everything else together (client-side apply copies a
// ConfigMap's whole data into it).
func trimReplicaSet(obj any) (any, error) {
	if rs, ok := obj.(*appsv1.ReplicaSet); ok {
		rs.ManagedFields = nil
		delete(rs.Annotations, "kubectl.kubernetes.io/last-applied-configuration")
		rs.Status = appsv1.ReplicaSetStatus{}
	}
	return obj, nil
}

func trimConfig(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields = nil
		m.Annotations = nil
	}
	return obj, nil
}

func trimWorkload(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields = nil
		// Only our opt-in annotation matters here.
		if v, ok := m.Annotations[refs.AttachAllAnnotation]; ok {
			m.Annotations = map[string]string{refs.AttachAllAnnotation: v}
		} else {
			m.Annotations = nil
		}
	}
	return obj, nil
}
