package trigger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// plan is the one write a content change calls for: the config-hash annotation set to value, or
// removed (set false). back names the existing revision the template then equals again.
type plan struct {
	value string
	set   bool
	back  *caches.User
}

// revisionTemplate is a revision with the pod template it holds, read from the API server: the
// caches keep no templates.
type revisionTemplate struct {
	u    *caches.User
	tmpl *corev1.PodTemplateSpec
}

// planFor decides the write for live content, and reads the holder it goes to (current).
// Deterministic: the same content gives the same template. It reads from the API server the templates
// of the newest revision and of the revisions that can matter (made with the live content, or carrying
// the value it would write): the caches keep no templates.
//
//  1. Back: a revision created with exactly this content whose template differs from the newest
//     one's only by our annotation. The annotation is set to what that revision has (or removed, if
//     it has none: the revision made before the workload opted in), so the template equals it again
//     and its controller reuses it: a Deployment its old ReplicaSet, a Rollout its stable one.
//  2. New: the annotation set to the hash of the content, with its check (value.go). Should a
//     revision with that very template exist that was created with other content (a deploy that
//     changed config and template together left an older value of ours in place), the hash gets a
//     suffix: the controller must never reuse a revision whose pods read other content.
func planFor(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, w *caches.User, revs []*caches.User, live map[string]string,
	contentOf func(*caches.User) map[string]string) (plan, current, error) {
	h, err := content.HashJSON(live)
	if err != nil {
		return plan{}, current{}, err
	}
	var all []revisionTemplate
	for i, r := range revs {
		v, has := r.TemplateAnnotations[api.ConfigHashAnnotation]
		if i > 0 && !sameContent(contentOf(r), live) && (!has || !strings.HasPrefix(v, h)) {
			continue // neither a revision to go back to nor one whose value could be taken
		}
		t, err := fetchTemplate(ctx, kube, r)
		if apierrors.IsNotFound(err) {
			continue // pruned meanwhile
		}
		if err != nil {
			return plan{}, current{}, err
		}
		all = append(all, revisionTemplate{u: r, tmpl: t})
	}
	if len(all) == 0 || all[0].u.UID != revs[0].UID {
		return plan{}, current{}, fmt.Errorf("reading the newest revision %s of %s: gone", revs[0].Name, revs[0].Namespace)
	}
	cur, err := checkCurrent(ctx, kube, dyn, w, all[0])
	if err != nil {
		return plan{}, current{}, err
	}
	base := withoutOurs(all[0].tmpl)
	// The newest itself is one to go back to only while our write waits on a paused workload: the
	// decision otherwise never starts for content the newest was made with.
	for _, r := range all {
		if sameContent(contentOf(r.u), live) && apiequality.Semantic.DeepEqual(withoutOurs(r.tmpl), base) {
			v, set := r.tmpl.Annotations[api.ConfigHashAnnotation]
			return plan{value: v, set: set, back: r.u}, cur, nil
		}
	}
	for n := 1; ; n++ {
		v := valueOf(h, n)
		taken := false
		for _, r := range all {
			if r.tmpl.Annotations[api.ConfigHashAnnotation] == v && !sameContent(contentOf(r.u), live) &&
				apiequality.Semantic.DeepEqual(withoutOurs(r.tmpl), base) {
				taken = true
				break
			}
		}
		if !taken {
			return plan{value: v, set: true}, cur, nil
		}
	}
}

// withoutOurs is a template as its workload's controller compares it, less our annotation: the hash
// labels the controllers add to their revisions' templates go too.
func withoutOurs(t *corev1.PodTemplateSpec) *corev1.PodTemplateSpec {
	out := t.DeepCopy()
	delete(out.Annotations, api.ConfigHashAnnotation)
	delete(out.Labels, workload.DeploymentHashLabel)
	delete(out.Labels, workload.RolloutHashLabel)
	if len(out.Annotations) == 0 {
		out.Annotations = nil
	}
	if len(out.Labels) == 0 {
		out.Labels = nil
	}
	return out
}

// fetchTemplate reads the pod template a revision holds.
func fetchTemplate(ctx context.Context, kube kubernetes.Interface, r *caches.User) (*corev1.PodTemplateSpec, error) {
	switch r.Kind() {
	case caches.ReplicaSet:
		rs, err := kube.AppsV1().ReplicaSets(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if rs.UID != r.UID {
			return nil, apierrors.NewNotFound(appsv1.Resource("replicasets"), r.Name)
		}
		t := rs.Spec.Template
		t.Annotations = maps.Clone(t.Annotations)
		return &t, nil
	case caches.ControllerRevision:
		cr, err := kube.AppsV1().ControllerRevisions(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		if cr.UID != r.UID {
			return nil, apierrors.NewNotFound(appsv1.Resource("controllerrevisions"), r.Name)
		}
		return caches.ControllerRevisionTemplate(cr)
	}
	return nil, fmt.Errorf("%s is not a revision kind", r.Kind())
}

// errNotCurrent: the newest revision in the cache is not the one the workload's template makes yet
// (its controller, or our cache, is behind; or the workload is paused): retried with backoff.
var errNotCurrent = errors.New("the newest revision is not the one its template makes yet")

// checkCurrent verifies, before a write, that the newest revision is the one the workload's template
// makes now, the way its controller tells: a Rollout by its status.currentPodHash, the others by
// template equality (less the hash label). Writing on a stale newest revision would start a second
// revision right after one a deploy started. It returns what the write is decided on of the holder
// (current): read here, in the same request where the holder is the workload.
func checkCurrent(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, w *caches.User, newest revisionTemplate) (current, error) {
	var want *corev1.PodTemplateSpec
	var meta metav1.Object
	switch w.Kind() {
	case caches.Rollout:
		ro, err := dyn.Resource(workload.RolloutGVR).Namespace(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return current{}, err
		}
		hash, _, _ := unstructured.NestedString(ro.Object, "status", "currentPodHash")
		if hash == "" || newest.tmpl.Labels[workload.RolloutHashLabel] != hash {
			return current{}, fmt.Errorf("%w: Rollout %s/%s runs %q, the newest ReplicaSet is %s", errNotCurrent, w.Namespace, w.Name, hash, newest.u.Name)
		}
		if w.Status != nil && w.Status.TemplateRef != "" {
			d, err := kube.AppsV1().Deployments(w.Namespace).Get(ctx, w.Status.TemplateRef, metav1.GetOptions{})
			if err != nil {
				return current{}, err
			}
			return currentOf(d, d.Spec.Template.Annotations)
		}
		annotations, _, _ := unstructured.NestedStringMap(ro.Object, "spec", "template", "metadata", "annotations")
		return currentOf(ro, annotations)
	case caches.Deployment:
		d, err := kube.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return current{}, err
		}
		want, meta = &d.Spec.Template, d
	case caches.StatefulSet:
		s, err := kube.AppsV1().StatefulSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return current{}, err
		}
		want, meta = &s.Spec.Template, s
	case caches.DaemonSet:
		d, err := kube.AppsV1().DaemonSets(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
		if err != nil {
			return current{}, err
		}
		want, meta = &d.Spec.Template, d
	}
	got := newest.tmpl.DeepCopy()
	delete(got.Labels, workload.DeploymentHashLabel)
	if len(got.Labels) == 0 {
		got.Labels = nil
	}
	if want == nil || !apiequality.Semantic.DeepEqual(got, want) {
		return current{}, fmt.Errorf("%w: %s is not the template of %s", errNotCurrent, newest.u.Name, describe(w))
	}
	return currentOf(meta, want.Annotations)
}
