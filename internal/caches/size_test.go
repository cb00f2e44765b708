package caches

import (
	"fmt"
	"hash/fnv"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// The bench objects model a tenant namespace of 10 Deployments with 3 ReplicaSets each (one per
// revision: its own ConfigMap, the app's Secret, the tenant's settings), 4 Pods per ReplicaSet, and an
// opted-in ConfigMap per ReplicaSet attached to it. Every string is its own copy, as a decoder makes it.
const (
	benchRevisions = 3
	benchApps      = 10
	benchReplicas  = 4
)

// benchUID is a UUID of the form the API server writes, different for every kind and i.
func benchUID(kind string, i int) types.UID {
	h := fnv.New32a()
	_, _ = h.Write([]byte(kind))
	return types.UID(fmt.Sprintf("%08x-0b7a-4c39-9e2d-%012d", h.Sum32(), i))
}

// benchTemplate is revision r of app a: a projected ConfigMap volume as the original chart mounts it,
// the app's Secret and the tenant's settings through envFrom.
func benchTemplate(a, r int) corev1.PodSpec {
	c := strings.Clone
	return corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: c("configmaps-volume"), VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: c(fmt.Sprintf("web-%d-config-v%d", a, r))}}}}}}}},
		Containers: []corev1.Container{{Name: c("web"), Image: c("nginx:1.27"),
			EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: c(fmt.Sprintf("web-%d-secret", a))}}},
				{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: c("settings")}}}}}},
	}
}

// benchReplicaSet j is revision j%3 of app (j/3)%10 of tenant j/30, as the Deployment controller writes
// it: the labels and revision annotations it adds, the controller reference.
func benchReplicaSet(j int) *appsv1.ReplicaSet {
	c := strings.Clone
	yes := true
	a, r := (j/benchRevisions)%benchApps, j%benchRevisions
	return &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: c(fmt.Sprintf("web-%d-%08x", a, j)), Namespace: c(fmt.Sprintf("tenant-%04d", j/(benchApps*benchRevisions))),
		UID: types.UID(c(string(benchUID("ReplicaSet", j)))), ResourceVersion: c(fmt.Sprint(100000 + j)), Generation: 1,
		Labels: map[string]string{c("app"): c(fmt.Sprintf("web-%d", a)), c("pod-template-hash"): c(fmt.Sprintf("%08x", j))},
		Annotations: map[string]string{c("deployment.kubernetes.io/revision"): c(fmt.Sprint(r + 1)), c("deployment.kubernetes.io/desired-replicas"): c("4"),
			c("deployment.kubernetes.io/max-replicas"): c("5")},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: c("apps/v1"), Kind: c("Deployment"), Name: c(fmt.Sprintf("web-%d", a)),
			UID: types.UID(c(string(benchUID("Deployment", j/benchRevisions)))), Controller: &yes, BlockOwnerDeletion: &yes}}},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{Spec: benchTemplate(a, r)}}}
}

// benchDeployment d is app d%10 of tenant d/10, at its last revision.
func benchDeployment(d int) *appsv1.Deployment {
	c := strings.Clone
	a := d % benchApps
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: c(fmt.Sprintf("web-%d", a)), Namespace: c(fmt.Sprintf("tenant-%04d", d/benchApps)),
		UID: types.UID(c(string(benchUID("Deployment", d)))), ResourceVersion: c(fmt.Sprint(100000 + d)), Generation: 3},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: benchTemplate(a, benchRevisions-1)}}}
}

// benchPod i is a pod of ReplicaSet i/4, as the ReplicaSet controller makes it and kwok runs it.
func benchPod(i int) *corev1.Pod {
	c := strings.Clone
	rs := benchReplicaSet(i / benchReplicas)
	yes := true
	spec := rs.Spec.Template.Spec
	spec.NodeName = c("scale-node-1")
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: c(fmt.Sprintf("%s-%05d", rs.Name, i)), Namespace: c(rs.Namespace), UID: types.UID(c(string(benchUID("Pod", i)))),
			ResourceVersion: c(fmt.Sprint(100000 + i)), Labels: map[string]string{c("app"): c("web"), c("pod-template-hash"): c(rs.Labels["pod-template-hash"])},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: c("apps/v1"), Kind: c("ReplicaSet"), Name: c(rs.Name), UID: types.UID(c(string(rs.UID))),
				Controller: &yes, BlockOwnerDeletion: &yes}}},
		Spec:   spec,
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: c("10.0.0.1")},
	}
}

// benchConfigMap i is the opted-in ConfigMap of ReplicaSet i, as the metadata informer decodes it
// once attached: our label and finalizer, a chart's label, the ownerReference, managedFields.
func benchConfigMap(i int) *metav1.PartialObjectMetadata {
	c := strings.Clone
	no := false
	rs := benchReplicaSet(i)
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: c("v1"), Kind: c("ConfigMap")},
		ObjectMeta: metav1.ObjectMeta{Name: c(rs.Spec.Template.Spec.Volumes[0].Projected.Sources[0].ConfigMap.Name), Namespace: c(rs.Namespace),
			UID: types.UID(c(string(benchUID("ConfigMap", i)))), ResourceVersion: c(fmt.Sprint(100000 + i)),
			Labels:     map[string]string{c("configmap-attacher.io/revisioned"): c("true"), c("app.kubernetes.io/managed-by"): c("Helm")},
			Finalizers: []string{c("configmap-attacher.io/in-use-protection")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: c("apps/v1"), Kind: c("ReplicaSet"), Name: c(rs.Name),
				UID: types.UID(c(string(rs.UID))), Controller: &no}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: c("helm"), Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: c("v1")}}}}
}

// BenchmarkCache reports what a cache retains per object, for the kinds of which a cluster has the
// most: Pods, ReplicaSets and opted-in ConfigMaps, each through its informer's transform (with its
// controller, or owner, cached) into a store with the indexes its informer has: heap in use after a
// GC, before and after 10,000 objects.
// HEAPPROFILE=<file> also writes the heap profile with the cache filled (go tool pprof -sample_index=inuse_space).
func BenchmarkCache(b *testing.B) {
	if os.Getenv("HEAPPROFILE") != "" {
		runtime.MemProfileRate = 1 // every allocation, from the start
	}
	users := func(r *reducer) cache.TransformFunc { return r.transform }
	for _, kind := range []struct {
		name      string
		object    func(int) any
		owner     func(int) any // the object's controller or owner, cached before (nil: none)
		ownerKind Kind
		owners    int // objects per owner
		transform func(*reducer) cache.TransformFunc
		indexers  cache.Indexers
	}{
		{"Pod", func(i int) any { return benchPod(i) }, func(j int) any { return benchReplicaSet(j) }, ReplicaSet, benchReplicas, users,
			nil},
		{"ReplicaSet", func(j int) any { return benchReplicaSet(j) }, func(d int) any { return benchDeployment(d) }, Deployment, benchRevisions, users,
			UserIndexers()},
		{"ConfigMap", func(i int) any { return benchConfigMap(i) }, func(j int) any { return benchReplicaSet(j) }, ReplicaSet, 1,
			func(r *reducer) cache.TransformFunc { return r.configTransform(keepNone) }, nil},
	} {
		b.Run(kind.name, func(b *testing.B) {
			const n = 10000
			for range b.N {
				b.StopTimer()
				// The controllers, in a cache of their own as the informers keep them.
				owners := map[string]*entry{}
				r := newReducer(nil, false, true)
				r.ids = newIdentities(func(k Kind, key string) *identity {
					if e, ok := owners[key]; ok && k == kind.ownerKind {
						return e.id
					}
					return nil
				})
				r.ids.settle() // the caches have synced: what objects name is found in them
				for j := range n / kind.owners {
					rec, err := r.transform(kind.owner(j))
					if err != nil {
						b.Fatal(err)
					}
					e := rec.(*entry)
					owners[e.id.key] = e
				}
				before := heapInUse()
				objs := make([]any, n)
				for i := range objs {
					objs[i] = kind.object(i)
				}
				store := newStore(kind.indexers)
				tr := kind.transform(r)
				b.StartTimer()
				for i, o := range objs {
					t, err := tr(o)
					if err != nil {
						b.Fatal(err)
					}
					objs[i] = nil // the decoded object is garbage once reduced
					if err := store.Add(t); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				objs = nil
				if f := os.Getenv("HEAPPROFILE"); f != "" {
					w, _ := os.Create(f)
					runtime.GC()
					_ = pprof.WriteHeapProfile(w)
					w.Close()
				}
				b.ReportMetric(float64(heapInUse()-before)/n, "retained-B/object")
				runtime.KeepAlive(store)
				runtime.KeepAlive(owners)
			}
		})
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
