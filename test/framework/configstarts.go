package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
)

// A config change starts a revision: workloads opt in with Reloader's annotations, the user edits only
// the ConfigMap, and the controller writes configmap-attacher.io/config-hash on the pod template.

// ReloaderAuto is the annotation a workload opts in with (Reloader's own).
var ReloaderAuto = map[string]string{api.ReloaderAuto: "true"}

// Workload GVRs the stories write and watch.
var (
	DeploymentGVR  = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	StatefulSetGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
	DaemonSetGVR   = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}
)

// Annotate sets annotations on an object's metadata (a merge patch, as `kubectl annotate` does).
func (c *Cluster) Annotate(ctx context.Context, gvr schema.GroupVersionResource, ns, name string, annotations map[string]string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = c.Dynamic.Resource(gvr).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// EditConfigMap changes a ConfigMap's data in place and nothing else, as `kubectl edit` would.
func (c *Cluster) EditConfigMap(ctx context.Context, ns, name string, data map[string]string) error {
	cms := c.Kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	cm.Data = data
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	return err
}

// TemplateAnnotation returns an annotation of a workload's pod template (spec.template).
func (c *Cluster) TemplateAnnotation(ctx context.Context, gvr schema.GroupVersionResource, ns, name, key string) (string, bool, error) {
	u, err := c.Dynamic.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", false, err
	}
	v, found, err := unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", key)
	return v, found, err
}

// FieldsOwnedBy returns, as JSON, the fields a field manager owns on an object (its managedFields
// entries), one per operation.
func (c *Cluster) FieldsOwnedBy(ctx context.Context, gvr schema.GroupVersionResource, ns, name, manager string) ([]string, error) {
	u, err := c.Dynamic.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mf := range u.GetManagedFields() {
		if mf.Manager == manager && mf.FieldsV1 != nil {
			out = append(out, string(mf.Operation)+" "+string(mf.FieldsV1.Raw))
		}
	}
	return out, nil
}

// OnlyOurAnnotation is the managedFields entry of a field manager owning exactly the config-hash
// annotation of a pod template, and nothing else of the object.
var OnlyOurAnnotation = string(metav1.ManagedFieldsOperationApply) + ` {"f:spec":{"f:template":{"f:metadata":{"f:annotations":{"f:` + api.ConfigHashAnnotation + `":{}}}}}}`

// TemplateWatch counts the changes of a workload's pod template (spec.template) from the moment it
// starts, whoever makes them.
type TemplateWatch struct {
	w       watch.Interface
	done    chan struct{}
	changes []string // the templates it changed to, with the resourceVersion and the last field manager
}

// WatchTemplate starts counting the template changes of an object.
func (c *Cluster) WatchTemplate(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) (*TemplateWatch, error) {
	u, err := c.Dynamic.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	w, err := c.Dynamic.Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: u.GetResourceVersion()})
	if err != nil {
		return nil, err
	}
	tw := &TemplateWatch{w: w, done: make(chan struct{})}
	last := templateOf(u)
	go func() {
		defer close(tw.done)
		for ev := range w.ResultChan() {
			obj, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type == watch.Bookmark {
				continue
			}
			if t := templateOf(obj); t != last {
				last = t
				tw.changes = append(tw.changes, fmt.Sprintf("rv %s by %s: %s", obj.GetResourceVersion(), lastManager(obj), t))
			}
		}
	}()
	return tw, nil
}

// templateOf is the object's pod template as its controller sees it: decoded into the API type and
// encoded again, so that a writer adding or dropping an empty field (Argo Rollouts' own updates of a
// Rollout flip `resources: {}`) is no change.
func templateOf(u *unstructured.Unstructured) string {
	t, _, _ := unstructured.NestedMap(u.Object, "spec", "template")
	var pt corev1.PodTemplateSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(t, &pt); err != nil {
		return "undecodable: " + err.Error()
	}
	b, _ := json.Marshal(pt)
	return string(b)
}

// lastManager names the field manager of the object's latest managedFields entry.
func lastManager(u *unstructured.Unstructured) string {
	var name string
	var at time.Time
	for _, mf := range u.GetManagedFields() {
		if mf.Time != nil && !mf.Time.Time.Before(at) {
			name, at = mf.Manager+" ("+string(mf.Operation)+")", mf.Time.Time
		}
	}
	return name
}

// Stop stops counting and returns the template changes seen (each: the new template, when and by whom).
func (tw *TemplateWatch) Stop() []string {
	tw.w.Stop()
	<-tw.done
	return tw.changes
}

// EventsOn returns the Events with reason on an object of any kind, oldest first; an Event the
// recorder aggregated carries its Count.
func (c *Cluster) EventsOn(ctx context.Context, ns, kind, name, reason string) ([]corev1.Event, error) {
	list, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].LastTimestamp.Before(&out[j].LastTimestamp) })
	return out, nil
}

// WaitEvent waits for an Event with reason on an object and returns the last one.
func (c *Cluster) WaitEvent(ctx context.Context, timeout time.Duration, ns, kind, name, reason string) (corev1.Event, error) {
	var last corev1.Event
	err := Eventually(ctx, timeout, fmt.Sprintf("a %s event on %s %s", reason, kind, name), func(ctx context.Context) (bool, string, error) {
		evs, err := c.EventsOn(ctx, ns, kind, name, reason)
		if err != nil || len(evs) == 0 {
			return false, "none", err
		}
		last = evs[len(evs)-1]
		return true, "", nil
	})
	return last, err
}

// ArgoRollouts runs the real kubectl-argo-rollouts plugin (hack/tools build), as `kubectl argo
// rollouts ARGS`, on the cluster and returns its stdout; an error carries stderr.
func (c *Cluster) ArgoRollouts(ctx context.Context, args ...string) (string, error) {
	return c.runTool(ctx, "kubectl-argo-rollouts", "kubectl argo rollouts", args...)
}

// ConfigHashOwners are the field managers other than ours that own the config-hash annotation on the
// pod template of a workload (a rollback copies it under its own).
func (c *Cluster) ConfigHashOwners(ctx context.Context, gvr schema.GroupVersionResource, ns, name string) ([]string, error) {
	u, err := c.Dynamic.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	path := []string{"f:spec", "f:template", "f:metadata", "f:annotations", "f:" + api.ConfigHashAnnotation}
	var out []string
	for _, mf := range u.GetManagedFields() {
		if mf.Manager == api.FieldManager || mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			return nil, err
		}
		if _, ok, _ := unstructured.NestedFieldNoCopy(fields, path...); ok {
			out = append(out, mf.Manager)
		}
	}
	return out, nil
}
