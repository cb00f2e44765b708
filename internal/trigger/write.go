package trigger

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// holder is the object whose pod template a workload's revisions come from: the workload itself, or
// for a Rollout with workloadRef the Deployment it names (its own spec.template must stay empty, and
// Argo Rollouts makes a new revision when that Deployment's template changes).
type holder struct {
	gvr        schema.GroupVersionResource
	apiVersion string
	kind       string
	namespace  string
	name       string
}

func holderOf(w *caches.User) holder {
	h := holder{apiVersion: "apps/v1", kind: w.TypeMeta.Kind, namespace: w.Namespace, name: w.Name}
	switch w.Kind() {
	case caches.Rollout:
		if w.Status != nil && w.Status.TemplateRef != "" {
			h.kind, h.name = "Deployment", w.Status.TemplateRef
		} else {
			h.apiVersion, h.gvr = w.APIVersion, workload.RolloutGVR
		}
	}
	if h.gvr.Resource == "" {
		h.gvr = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: map[string]string{
			"Deployment": "deployments", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets"}[h.kind]}
	}
	return h
}

func (h holder) String() string { return fmt.Sprintf("%s %s/%s", h.kind, h.namespace, h.name) }

// current is what a write is decided on: the holder as read from the API server just before, its
// resourceVersion, our annotation's value on its pod template, and the other field managers that own
// that annotation (managedFields).
type current struct {
	rv     string
	value  string
	has    bool
	owners []string
}

// currentOf reads current from the holder's metadata and pod template annotations.
func currentOf(meta metav1.Object, annotations map[string]string) (current, error) {
	cur := current{rv: meta.GetResourceVersion()}
	cur.value, cur.has = annotations[api.ConfigHashAnnotation]
	path := []string{"f:spec", "f:template", "f:metadata", "f:annotations", "f:" + api.ConfigHashAnnotation}
	for _, mf := range meta.GetManagedFields() {
		if mf.Manager == api.FieldManager || mf.FieldsV1 == nil || slices.Contains(cur.owners, mf.Manager) {
			continue
		}
		var fields map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &fields); err != nil {
			return current{}, fmt.Errorf("reading the managedFields of %s: %w", meta.GetName(), err)
		}
		if _, ok, _ := unstructured.NestedFieldNoCopy(fields, path...); ok {
			cur.owners = append(cur.owners, mf.Manager)
		}
	}
	return cur, nil
}

// write sets (or removes) our one annotation on the holder's pod template with server-side apply
// under our field manager. The applied configuration names nothing else, so the API server records
// us as the owner of that one field and of nothing else; removing it is an apply that names nothing,
// which deletes the fields only we owned.
//
// Every write carries the resourceVersion the decision read (checkCurrent) as a precondition: a
// deploy landing between that read and the write (a Helm upgrade whose workload comes a moment after
// its config) makes it fail with a conflict, retried with a fresh read that sees the deploy's own
// revision, instead of adding a second revision to it.
//
// takeBack: another field manager owns the annotation with a value we wrote (a rollback copied it).
// The apply is then forced, which takes ownership of exactly that one field; the precondition keeps
// it from overwriting what we have not seen. A removal cannot be forced (an apply that names nothing
// takes nothing), so it is a merge patch of that one key to null, under the same precondition.
func (c *Controller) write(ctx context.Context, h holder, p plan, cur current, takeBack bool) error {
	res := c.dynamic.Resource(h.gvr).Namespace(h.namespace)
	var out *unstructured.Unstructured
	var err error
	if takeBack && !p.set {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cur.rv},
			"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": map[string]any{api.ConfigHashAnnotation: nil}}}}})
		out, err = res.Patch(ctx, h.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	} else {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": h.apiVersion, "kind": h.kind,
			"metadata": map[string]any{"name": h.name, "namespace": h.namespace, "resourceVersion": cur.rv},
		}}
		if p.set {
			obj.Object["spec"] = map[string]any{"template": map[string]any{"metadata": map[string]any{
				"annotations": map[string]any{api.ConfigHashAnnotation: p.value}}}}
		}
		out, err = res.Apply(ctx, h.name, obj, metav1.ApplyOptions{FieldManager: api.FieldManager, Force: takeBack})
	}
	if err != nil {
		// A conflict (another manager took the field, or the precondition failed) is retried: the
		// next sync reads the holder again and decides anew.
		return fmt.Errorf("writing %s on the pod template of %s: %w", api.ConfigHashAnnotation, h, err)
	}
	got, found, _ := unstructured.NestedString(out.Object, "spec", "template", "metadata", "annotations", api.ConfigHashAnnotation)
	if found != p.set || got != p.value {
		return fmt.Errorf("writing %s on the pod template of %s: it still carries %q (another field manager took it meanwhile)", api.ConfigHashAnnotation, h, got)
	}
	return nil
}
