package caches

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// The scale mix of test/bench/scale.go, per tenant namespace: 8 Deployments (4 opted in) and 2
// Rollouts of 4 replicas with 3 ReplicaSets each (the current one and 2 old ones at 0), a StatefulSet
// of 2 with its ControllerRevision, a CronJob with 2 finished Jobs of one pod each; 20 opted-in
// ConfigMaps (one per revision of an opted-in app, 2 for the CronJob) attached to their revisions, 6
// opted-in Secrets attached to every revision of their app. 44 Pods. The plain config objects are not
// generated: the opted-in informers' label selector leaves them on the API server.
const (
	mixDeployments = 8
	mixOpted       = 4
	mixRollouts    = 2
	mixReplicas    = 4
	mixRevisions   = 3
	mixPods        = (mixDeployments+mixRollouts)*mixReplicas + 2 + 2
)

// mixObjects generates the objects of tenants [0, n) of one kind, each string its own copy as a
// decoder makes it.
type mixObjects struct{ tenants int }

func mixUID(kind string, t, i int) types.UID {
	h := fnv.New32a()
	_, _ = h.Write([]byte(kind))
	return types.UID(fmt.Sprintf("%08x-%04x-4c39-9e2d-%012x", h.Sum32(), i, t))
}

type mixApp struct {
	name           string
	rollout, opted bool
	i              int
}

func mixApps() []mixApp {
	var out []mixApp
	for i := range mixDeployments {
		out = append(out, mixApp{name: fmt.Sprintf("web-%d", i), opted: i < mixOpted, i: i})
	}
	for i := range mixRollouts {
		out = append(out, mixApp{name: fmt.Sprintf("canary-%d", i), rollout: true, opted: true, i: mixDeployments + i})
	}
	return out
}

func (a mixApp) config(k int) string {
	if !a.opted {
		return a.name + "-config"
	}
	return fmt.Sprintf("%s-config-v%d", a.name, k)
}

func mixTemplate(app, config, secret string) corev1.PodTemplateSpec {
	c := strings.Clone
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{c("app"): c(app)}}, Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{{Name: c("configmaps-volume"), VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: c(config)}}}}}}}},
		Containers: []corev1.Container{{Name: c(app), Image: c("nginx:1.27"), EnvFrom: []corev1.EnvFromSource{
			{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: c(secret)}}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: c("settings")}}}}}}}}
}

func mixNS(t int) string { return fmt.Sprintf("scale-t%05d", t) }

func ownerRef(apiVersion, kind, name string, uid types.UID, controller bool) metav1.OwnerReference {
	c := strings.Clone
	b := controller
	return metav1.OwnerReference{APIVersion: c(apiVersion), Kind: c(kind), Name: c(name), UID: types.UID(c(string(uid))), Controller: &b}
}

func (m mixObjects) rsName(a mixApp, t, k int) string {
	return fmt.Sprintf("%s-%08x", a.name, (t*64+a.i)*4+k)
}

// each calls fn for every object of the resource.
func (m mixObjects) each(resource string, fn func(any)) {
	c := strings.Clone
	for t := range m.tenants {
		ns := mixNS(t)
		meta := func(name string, uid types.UID) metav1.ObjectMeta {
			return metav1.ObjectMeta{Name: c(name), Namespace: c(ns), UID: types.UID(c(string(uid))), ResourceVersion: strconv.Itoa(100000 + t),
				CreationTimestamp: metav1.NewTime(time.Unix(1795000000+int64(t), 0)), Generation: 1}
		}
		for _, a := range mixApps() {
			wuid := mixUID("workload", t, a.i)
			kind, apiVersion := "Deployment", "apps/v1"
			if a.rollout {
				kind, apiVersion = "Rollout", "argoproj.io/v1alpha1"
			}
			rsUID := func(k int) types.UID { return mixUID("ReplicaSet", t, a.i*4+k) }
			switch resource {
			case "deployments":
				if !a.rollout {
					fn(&appsv1.Deployment{ObjectMeta: meta(a.name, wuid), Spec: appsv1.DeploymentSpec{Template: mixTemplate(a.name, a.config(mixRevisions), a.name+"-secret")},
						Status: appsv1.DeploymentStatus{ObservedGeneration: 1}})
				}
			case "rollouts":
				if a.rollout {
					ro := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind,
						"metadata": map[string]any{"name": c(a.name), "namespace": c(ns), "uid": c(string(wuid)), "resourceVersion": "1", "generation": int64(1)},
						"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
							"volumes": []any{map[string]any{"name": "configmaps-volume", "projected": map[string]any{"sources": []any{
								map[string]any{"configMap": map[string]any{"name": c(a.config(mixRevisions))}}}}}},
							"containers": []any{map[string]any{"name": c(a.name), "image": "nginx:1.27", "envFrom": []any{
								map[string]any{"secretRef": map[string]any{"name": c(a.name + "-secret")}},
								map[string]any{"configMapRef": map[string]any{"name": "settings"}}}}}}}},
						"status": map[string]any{"observedGeneration": "1"}}}
					fn(ro)
				}
			case "replicasets":
				for k := 1; k <= mixRevisions; k++ {
					rs := &appsv1.ReplicaSet{ObjectMeta: meta(m.rsName(a, t, k), rsUID(k)), Spec: appsv1.ReplicaSetSpec{Template: mixTemplate(a.name, a.config(k), a.name+"-secret")}}
					rs.Labels = map[string]string{c("app"): c(a.name), c("pod-template-hash"): c(rs.Name[len(a.name)+1:])}
					rs.Annotations = map[string]string{c("deployment.kubernetes.io/revision"): strconv.Itoa(k)}
					rs.OwnerReferences = []metav1.OwnerReference{ownerRef(apiVersion, kind, a.name, wuid, true)}
					fn(rs)
				}
			case "pods":
				for r := range mixReplicas {
					rs := m.rsName(a, t, mixRevisions)
					tmpl := mixTemplate(a.name, a.config(mixRevisions), a.name+"-secret")
					tmpl.Spec.NodeName = c("scale-node-1")
					fn(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%05x", rs, r), Namespace: c(ns), UID: mixUID("Pod", t, a.i*4+r),
						Labels: tmpl.Labels, OwnerReferences: []metav1.OwnerReference{ownerRef("apps/v1", "ReplicaSet", rs, rsUID(mixRevisions), true)}},
						Spec: tmpl.Spec, Status: corev1.PodStatus{Phase: corev1.PodRunning}})
				}
			case "configmaps":
				if a.opted {
					for k := 1; k <= mixRevisions; k++ {
						fn(mixConfig(ns, a.config(k), mixUID("ConfigMap", t, a.i*4+k), ownerRef("apps/v1", "ReplicaSet", m.rsName(a, t, k), rsUID(k), false)))
					}
				}
			case "secrets":
				if a.opted {
					var owners []metav1.OwnerReference
					for k := 1; k <= mixRevisions; k++ {
						owners = append(owners, ownerRef("apps/v1", "ReplicaSet", m.rsName(a, t, k), rsUID(k), false))
					}
					fn(mixConfig(ns, a.name+"-secret", mixUID("Secret", t, a.i), owners...))
				}
			}
		}
		stsUID, cronUID := mixUID("StatefulSet", t, 0), mixUID("CronJob", t, 0)
		switch resource {
		case "statefulsets":
			fn(&appsv1.StatefulSet{ObjectMeta: meta("db", stsUID), Spec: appsv1.StatefulSetSpec{Template: mixTemplate("db", "db-config", "db-secret")}})
		case "controllerrevisions":
			cr := &appsv1.ControllerRevision{ObjectMeta: meta("db-7c9d8f", mixUID("ControllerRevision", t, 0)), Revision: 1}
			cr.OwnerReferences = []metav1.OwnerReference{ownerRef("apps/v1", "StatefulSet", "db", stsUID, true)}
			cr.Data.Raw = []byte(`{"spec":{"template":{"spec":{"volumes":[{"name":"configmaps-volume","projected":{"sources":[{"configMap":{"name":"db-config"}}]}}],"containers":[{"name":"db","envFrom":[{"secretRef":{"name":"db-secret"}},{"configMapRef":{"name":"settings"}}]}]}}}}`)
			fn(cr)
		case "cronjobs":
			fn(&batchv1.CronJob{ObjectMeta: meta("report", cronUID), Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				Template: mixTemplate("report", "report-config-v2", "db-secret")}}}})
		case "jobs":
			for k := 1; k <= 2; k++ {
				j := &batchv1.Job{ObjectMeta: meta(fmt.Sprintf("report-%d", k), mixUID("Job", t, k)), Spec: batchv1.JobSpec{Template: mixTemplate("report", fmt.Sprintf("report-config-v%d", k), "db-secret")}}
				j.OwnerReferences = []metav1.OwnerReference{ownerRef("batch/v1", "CronJob", "report", cronUID, true)}
				fn(j)
			}
		case "pods":
			for r := range 2 {
				p := &corev1.Pod{ObjectMeta: meta(fmt.Sprintf("db-%d", r), mixUID("Pod", t, 100+r)), Spec: mixTemplate("db", "db-config", "db-secret").Spec}
				p.OwnerReferences = []metav1.OwnerReference{ownerRef("apps/v1", "StatefulSet", "db", stsUID, true)}
				fn(p)
				j := &corev1.Pod{ObjectMeta: meta(fmt.Sprintf("report-%d-x7k2p", r+1), mixUID("Pod", t, 200+r)),
					Spec: mixTemplate("report", fmt.Sprintf("report-config-v%d", r+1), "db-secret").Spec, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
				j.OwnerReferences = []metav1.OwnerReference{ownerRef("batch/v1", "Job", fmt.Sprintf("report-%d", r+1), mixUID("Job", t, r+1), true)}
				fn(j)
			}
		case "configmaps":
			fn(mixConfig(ns, "report-config-v1", mixUID("ConfigMap", t, 900), ownerRef("batch/v1", "Job", "report-1", mixUID("Job", t, 1), false)))
			fn(mixConfig(ns, "report-config-v2", mixUID("ConfigMap", t, 901), ownerRef("batch/v1", "CronJob", "report", cronUID, false),
				ownerRef("batch/v1", "Job", "report-2", mixUID("Job", t, 2), false)))
		}
	}
}

func mixConfig(ns, name string, uid types.UID, owners ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
	c := strings.Clone
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: c(name), Namespace: c(ns), UID: uid, ResourceVersion: c("4711"),
		CreationTimestamp: metav1.NewTime(time.Unix(1795000000, 0)),
		Labels:            map[string]string{c(api.RevisionedLabel): c(api.RevisionedValue), c("app.kubernetes.io/managed-by"): c("Helm")},
		Finalizers:        []string{c(api.InUseFinalizer)}, OwnerReferences: owners,
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: c("helm"), Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: c("v1")}}}}
}

// mixSources serve the generated objects the way kube-apiserver serves an informer's watch-list: each
// object as an ADDED event, then the bookmark that ends the initial events.
type mixSources struct{ objects mixObjects }

func (m mixSources) listWatch(resource string, example any) (cache.ListerWatcher, k8sruntime.Object) {
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (k8sruntime.Object, error) {
			return nil, fmt.Errorf("the benchmark serves watch-lists only")
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w := watch.NewFake()
			if o.SendInitialEvents == nil || !*o.SendInitialEvents {
				return w, nil // a rewatch: nothing changes
			}
			go func() {
				m.objects.each(resource, func(obj any) { w.Add(obj.(k8sruntime.Object)) })
				end := bookmark(example)
				w.Action(watch.Bookmark, end)
			}()
			return w, nil
		},
	}
	return lw, example.(k8sruntime.Object)
}

// bookmark is the event that ends a watch-list's initial events, of the informer's type.
func bookmark(example any) k8sruntime.Object {
	end := example.(k8sruntime.Object).DeepCopyObject()
	meta, _ := end.(metav1.Object)
	if u, ok := end.(*unstructured.Unstructured); ok {
		meta = u
	}
	meta.SetResourceVersion("200000")
	meta.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	return end
}

func (m mixSources) users(kind Kind, _ string) (cache.ListerWatcher, k8sruntime.Object) {
	examples := map[Kind]any{Pod: &corev1.Pod{}, ReplicaSet: &appsv1.ReplicaSet{}, ControllerRevision: &appsv1.ControllerRevision{},
		Job: &batchv1.Job{}, CronJob: &batchv1.CronJob{}, Deployment: &appsv1.Deployment{}, StatefulSet: &appsv1.StatefulSet{},
		DaemonSet: &appsv1.DaemonSet{}, Rollout: &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout"}}}
	resource := strings.ToLower(string(kind)) + "s"
	return m.listWatch(resource, examples[kind])
}

func (m mixSources) metadata(gvr schema.GroupVersionResource, _, _ string) (cache.ListerWatcher, k8sruntime.Object) {
	return m.listWatch(gvr.Resource, &metav1.PartialObjectMetadata{})
}

// BenchmarkMix reports what the caches hold per Pod of the scale mix (docs/benchmarks.md), every
// informer started at once as the controller starts them, each with two handlers (the attach and
// protection controllers' number) that do nothing: heap in use after a GC once every handler has
// seen every object, less the heap before. MIX_TENANTS sets the tenants (default 227: 9,988 Pods);
// HEAPPROFILE=<file> also writes the heap profile with the caches filled.
func BenchmarkMix(b *testing.B) {
	tenants := 227
	if v, err := strconv.Atoi(os.Getenv("MIX_TENANTS")); err == nil && v > 0 {
		tenants = v
	}
	if os.Getenv("HEAPPROFILE") != "" {
		runtime.MemProfileRate = 512
	}
	for range b.N {
		before := heapInUse()
		c, err := build(mixSources{mixObjects{tenants}}, Options{ConfigKinds: refs.Kinds(), Rollouts: true})
		if err != nil {
			b.Fatal(err)
		}
		var seen atomic.Int64
		count := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { seen.Add(1) }}
		handlers := 0
		for _, inf := range c.Users {
			for range 2 {
				_ = inf.AddEventHandler(count)
				handlers++
			}
		}
		for _, inf := range c.Configs {
			for range 2 {
				_ = inf.AddEventHandler(count)
			}
		}
		ctx, stop := context.WithCancel(context.Background())
		start := time.Now()
		c.Start(ctx)
		if !c.WaitForSync(ctx.Done()) {
			b.Fatal("not synced")
		}
		synced := time.Since(start)
		objects := 0
		for _, inf := range c.Users {
			objects += 2 * len(inf.List())
		}
		for _, inf := range c.Configs {
			objects += 2 * len(inf.List())
		}
		for seen.Load() < int64(objects) {
			time.Sleep(10 * time.Millisecond)
		}
		pods := len(c.Users[Pod].List())
		if pods != tenants*mixPods {
			b.Fatalf("%d pods cached, want %d", pods, tenants*mixPods)
		}
		held := heapInUse() - before
		if f := os.Getenv("HEAPPROFILE"); f != "" {
			w, _ := os.Create(f)
			_ = pprof.WriteHeapProfile(w)
			w.Close()
		}
		b.ReportMetric(float64(held)/float64(pods), "B/Pod")
		b.ReportMetric(float64(held)/(1<<20)*150000/float64(pods), "MiB@150kPods")
		b.ReportMetric(synced.Seconds(), "s-synced")
		stop()
		runtime.KeepAlive(c)
	}
}
