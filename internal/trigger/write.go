package trigger

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// errOwnedElsewhere: another field manager owns the annotation (it set it, or changed our value),
// so our apply, which never forces, was refused or could not remove it.
var errOwnedElsewhere = errors.New("the annotation is owned by another field manager")

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

// write sets (or removes) our one annotation on the holder's pod template with server-side apply
// under our field manager. The applied configuration names nothing else, so the API server records
// us as the owner of that one field and of nothing else; removing it is an apply that names nothing,
// which deletes the fields only we owned. Never forced: a field another manager owns is theirs
// (errOwnedElsewhere).
func (c *Controller) write(ctx context.Context, h holder, p plan) error {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": h.apiVersion, "kind": h.kind,
		"metadata": map[string]any{"name": h.name, "namespace": h.namespace},
	}}
	if p.set {
		obj.Object["spec"] = map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": map[string]any{api.ConfigHashAnnotation: p.value}}}}
	}
	out, err := c.dynamic.Resource(h.gvr).Namespace(h.namespace).Apply(ctx, h.name, obj,
		metav1.ApplyOptions{FieldManager: api.FieldManager})
	if apierrors.IsConflict(err) {
		return fmt.Errorf("%w: %v", errOwnedElsewhere, err)
	}
	if err != nil {
		return fmt.Errorf("writing %s on the pod template of %s: %w", api.ConfigHashAnnotation, h, err)
	}
	got, found, _ := unstructured.NestedString(out.Object, "spec", "template", "metadata", "annotations", api.ConfigHashAnnotation)
	if found != p.set || got != p.value {
		return fmt.Errorf("%w: %s still carries %s=%q", errOwnedElsewhere, h, api.ConfigHashAnnotation, got)
	}
	return nil
}
