package caches

import (
	"encoding/json"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Reduce turns an object of a kind that uses config (typed, or an unstructured Rollout) into the User
// the caches keep of it, labels included. The live double-check of the protection controller reduces
// what it lists the same way, so cache and API server are judged alike.
func Reduce(obj any) (*User, error) { return reduceObject(nil, obj, true) }

// reduceObject is Reduce; keepLabels says whether ReplicaSets keep their labels, s shares what an
// object has in common with its controller (nil: nothing).
func reduceObject(s *sharing, obj any, keepLabels bool) (*User, error) {
	switch o := obj.(type) {
	case *User:
		return o, nil // transforms may see an object twice
	case *corev1.Pod:
		u := reduce(s, "v1", Pod, &o.ObjectMeta, refs.FromPodSpec(&o.Spec), keepLabels)
		u.Finished = o.Status.Phase == corev1.PodSucceeded || o.Status.Phase == corev1.PodFailed
		return u, nil
	case *appsv1.ReplicaSet:
		u := reduce(s, "apps/v1", ReplicaSet, &o.ObjectMeta, refs.FromPodSpec(&o.Spec.Template.Spec), keepLabels)
		u.Number = revision.Number(o.Annotations)
		u.TemplateAnnotations = configHash(o.Spec.Template.Annotations)
		return u, nil
	case *appsv1.ControllerRevision:
		t, err := ControllerRevisionTemplate(o)
		if err != nil {
			return nil, err
		}
		u := reduce(s, "apps/v1", ControllerRevision, &o.ObjectMeta, refs.FromPodSpec(&t.Spec), keepLabels)
		u.Number = o.Revision
		u.TemplateAnnotations = configHash(t.Annotations)
		return u, nil
	case *batchv1.Job:
		return reduce(s, "batch/v1", Job, &o.ObjectMeta, refs.FromPodSpec(&o.Spec.Template.Spec), keepLabels), nil
	case *batchv1.CronJob:
		return reduce(s, "batch/v1", CronJob, &o.ObjectMeta, refs.FromPodSpec(&o.Spec.JobTemplate.Spec.Template.Spec), keepLabels), nil
	case *appsv1.Deployment:
		u := reduceWorkload(s, "apps/v1", Deployment, &o.ObjectMeta, &o.Spec.Template, o.Status.ObservedGeneration, keepLabels)
		u.Status.Paused = o.Spec.Paused
		return u, nil
	case *appsv1.StatefulSet:
		return reduceWorkload(s, "apps/v1", StatefulSet, &o.ObjectMeta, &o.Spec.Template, o.Status.ObservedGeneration, keepLabels), nil
	case *appsv1.DaemonSet:
		return reduceWorkload(s, "apps/v1", DaemonSet, &o.ObjectMeta, &o.Spec.Template, o.Status.ObservedGeneration, keepLabels), nil
	case *unstructured.Unstructured:
		ro, err := workload.RolloutFromUnstructured(o)
		if err != nil {
			return nil, err
		}
		// Argo Rollouts writes generations as strings; one it does not write as a number is taken as
		// observed rather than waited for for ever.
		observed, err := strconv.ParseInt(ro.Status.ObservedGeneration, 10, 64)
		if err != nil {
			observed = ro.Generation
		}
		if ro.Spec.Template == nil { // a Rollout with workloadRef has none: its Deployment is watched
			u := reduceWorkload(s, o.GetAPIVersion(), Rollout, &ro.ObjectMeta, &corev1.PodTemplateSpec{}, observed, keepLabels)
			if ref := ro.Spec.WorkloadRef; ref != nil && ref.Kind == "Deployment" {
				u.Status.TemplateRef = ref.Name
				u.Status.TemplateRefObserved, _ = strconv.ParseInt(ro.Status.WorkloadObservedGeneration, 10, 64)
			}
			return u, nil
		}
		return reduceWorkload(s, o.GetAPIVersion(), Rollout, &ro.ObjectMeta, ro.Spec.Template, observed, keepLabels), nil
	}
	return nil, fmt.Errorf("%T is not a kind that uses config", obj)
}

// reduceWorkload reduces a Deployment, StatefulSet, DaemonSet or Rollout: its pod template's references
// and what its containers read of them, its Reloader annotations and our config-hash, and whether its
// controller observed generation observed.
func reduceWorkload(s *sharing, apiVersion string, kind Kind, meta *metav1.ObjectMeta, t *corev1.PodTemplateSpec, observed int64, keepLabels bool) *User {
	u := reduce(s, apiVersion, kind, meta, refs.FromPodSpec(&t.Spec), keepLabels)
	u.Reads = refs.Reads(&t.Spec)
	u.TemplateAnnotations = reloaderAnnotations(t.Annotations)
	if v, ok := t.Annotations[api.ConfigHashAnnotation]; ok {
		if u.TemplateAnnotations == nil {
			u.TemplateAnnotations = map[string]string{}
		}
		u.TemplateAnnotations[api.ConfigHashAnnotation] = v
	}
	u.Status = &WorkloadStatus{Observed: observed >= meta.Generation}
	return u
}

// configHash keeps our config-hash of a revision's template annotations, nil without it: the config
// trigger reads which value each revision was made with.
func configHash(annotations map[string]string) map[string]string {
	if v, ok := annotations[api.ConfigHashAnnotation]; ok {
		return map[string]string{api.ConfigHashAnnotation: v}
	}
	return nil
}

// transform is the informers' transform: everything they store is a User. keepLabels: see reduce.
func transform(s *sharing, keepLabels bool) cache.TransformFunc {
	return func(obj any) (any, error) { return reduceObject(s, obj, keepLabels) }
}

// ControllerRevisionTemplate decodes the pod template a StatefulSet's or DaemonSet's
// ControllerRevision keeps: its data is a patch of the workload holding spec.template (with
// "$patch": "replace").
func ControllerRevisionTemplate(cr *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	var data struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	raw := cr.Data.Raw
	if len(raw) == 0 && cr.Data.Object != nil {
		var err error
		if raw, err = json.Marshal(cr.Data.Object); err != nil {
			return nil, err
		}
	}
	if len(raw) == 0 {
		return &corev1.PodTemplateSpec{}, nil
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, fmt.Errorf("decoding ControllerRevision %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	return &data.Spec.Template, nil
}
