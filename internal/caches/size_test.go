package caches

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// benchPod is a Pod as a ReplicaSet makes it and kwok runs it: labels, an owner, a projected volume,
// envFrom, a Secret through env, status with conditions. Every string is its own copy, as a decoder
// makes it.
func benchPod(i int) *corev1.Pod {
	c := strings.Clone
	ns := c(fmt.Sprintf("tenant-%04d", i/44))
	rs := c(fmt.Sprintf("web-%d-7d9f8b6c4d", i%10))
	yes := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: c(fmt.Sprintf("%s-%05d", rs, i)), Namespace: ns, UID: types.UID(c(fmt.Sprintf("8d4f6c1e-0b7a-4c39-9e2d-%012d", i))),
			ResourceVersion: c(fmt.Sprint(100000 + i)), Labels: map[string]string{c("app"): c("web"), c("pod-template-hash"): c("7d9f8b6c4d")},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: c("apps/v1"), Kind: c("ReplicaSet"), Name: rs, UID: types.UID(c(fmt.Sprintf("5c3b2a19-0b7a-4c39-9e2d-%012d", i%10))),
				Controller: &yes, BlockOwnerDeletion: &yes}}},
		Spec: corev1.PodSpec{
			NodeName: c("scale-node-1"),
			Volumes: []corev1.Volume{{Name: c("configmaps-volume"), VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: c("web-config-v3")}}}}}}}},
			Containers: []corev1.Container{{Name: c("web"), Image: c("nginx:1.27"),
				EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: c("web-secret")}}},
					{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: c("settings")}}}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: c("10.0.0.1")},
	}
}

// BenchmarkPodCache reports what the cache of Pods retains per Pod: the reduced User, its store key
// and every index entry, as the informer keeps them (heap in use after a GC, before and after).
// HEAPPROFILE=<file> also writes the heap profile with the cache filled (go tool pprof -sample_index=inuse_space).
func BenchmarkPodCache(b *testing.B) {
	const pods = 10000
	for range b.N {
		b.StopTimer()
		before := heapInUse()
		objs := make([]*corev1.Pod, pods)
		for i := range objs {
			objs[i] = benchPod(i)
		}
		store := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, podIndexers())
		b.StartTimer()
		for i, p := range objs {
			u, err := transform(false)(p)
			if err != nil {
				b.Fatal(err)
			}
			objs[i] = nil // the decoded Pod is garbage once reduced
			if err := store.Add(u); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		objs = nil
		if f := os.Getenv("HEAPPROFILE"); f != "" {
			runtime.MemProfileRate = 1
			w, _ := os.Create(f)
			runtime.GC()
			_ = pprof.WriteHeapProfile(w)
			w.Close()
		}
		b.ReportMetric(float64(heapInUse()-before)/pods, "retained-B/pod")
		runtime.KeepAlive(store)
	}
}

func heapInUse() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
