package workload

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Source reads workloads and ReplicaSets. Informer listers back it where we watch (Job wait,
// controller); plain GETs back it for one-shot commands. Implementations return errors satisfying
// apierrors.IsNotFound for absent objects, and never expect callers to mutate what they return.
type Source interface {
	Rollout(ctx context.Context, namespace, name string) (*RolloutObject, error)
	Deployment(ctx context.Context, namespace, name string) (*appsv1.Deployment, error)
	ReplicaSets(ctx context.Context, namespace string) ([]*appsv1.ReplicaSet, error)
}

// Resolved is a workload with its ReplicaSets.
type Resolved struct {
	Ref        Ref
	Rollout    *RolloutObject     // set for Rollouts
	Deployment *appsv1.Deployment // set for Deployments, and for Rollouts with a Deployment workloadRef
	Owner      metav1.Object      // the object owning the ReplicaSets
	// Owned are the ReplicaSets the owner controls, newest revision first.
	Owned []*appsv1.ReplicaSet
}

// Resolve reads the workload and the ReplicaSets it controls (by owner uid, so a same-named workload
// recreated under a new uid does not claim its predecessor's ReplicaSets).
func Resolve(ctx context.Context, src Source, ref Ref) (*Resolved, error) {
	res := &Resolved{Ref: ref}
	switch ref.Kind {
	case Rollout:
		ro, err := src.Rollout(ctx, ref.Namespace, ref.Name)
		if err != nil {
			return nil, notFound(err, ref.String())
		}
		res.Rollout, res.Owner = ro, ro
		if w := ro.Spec.WorkloadRef; w != nil && w.Kind == "Deployment" {
			d, err := src.Deployment(ctx, ref.Namespace, w.Name)
			if err != nil {
				return nil, notFound(err, fmt.Sprintf("Deployment %s/%s (workloadRef of %s)", ref.Namespace, w.Name, ref))
			}
			res.Deployment = d
		}
	case Deployment:
		d, err := src.Deployment(ctx, ref.Namespace, ref.Name)
		if err != nil {
			return nil, notFound(err, ref.String())
		}
		res.Deployment, res.Owner = d, d
	default:
		return nil, fmt.Errorf("unsupported workload kind %q", ref.Kind)
	}
	all, err := src.ReplicaSets(ctx, ref.Namespace)
	if err != nil {
		return nil, fmt.Errorf("listing ReplicaSets in namespace %s: %w", ref.Namespace, err)
	}
	for _, rs := range all {
		if metav1.IsControlledBy(rs, res.Owner) {
			res.Owned = append(res.Owned, rs)
		}
	}
	sort.SliceStable(res.Owned, func(i, j int) bool {
		ri, rj := revision.Number(res.Owned[i].Annotations), revision.Number(res.Owned[j].Annotations)
		if ri != rj {
			return ri > rj
		}
		return res.Owned[i].Name < res.Owned[j].Name
	})
	return res, nil
}

// Current returns the ReplicaSet running the workload's latest spec. It returns an error wrapping
// ErrNotObserved while the owning controller has not yet processed the latest spec or created that
// ReplicaSet; waiting is the cure.
func (r *Resolved) Current() (*appsv1.ReplicaSet, error) {
	if r.Ref.Kind == Rollout {
		return r.currentForRollout()
	}
	return r.currentForDeployment()
}

func (r *Resolved) currentForRollout() (*appsv1.ReplicaSet, error) {
	ro := r.Rollout
	if !generationObserved(ro.Status.ObservedGeneration, ro.Generation) {
		return nil, fmt.Errorf("%s: generation %d, status.observedGeneration %q: %w",
			r.Ref, ro.Generation, ro.Status.ObservedGeneration, ErrNotObserved)
	}
	if d := r.Deployment; d != nil && !generationObserved(ro.Status.WorkloadObservedGeneration, d.Generation) {
		return nil, fmt.Errorf("%s: workloadRef Deployment %s generation %d, status.workloadObservedGeneration %q: %w",
			r.Ref, d.Name, d.Generation, ro.Status.WorkloadObservedGeneration, ErrNotObserved)
	}
	hash := ro.Status.CurrentPodHash
	if hash == "" {
		return nil, fmt.Errorf("%s: status.currentPodHash is empty: %w", r.Ref, ErrNotObserved)
	}
	if rs := r.ByHash(hash); rs != nil {
		return rs, nil
	}
	return nil, fmt.Errorf("%s: no ReplicaSet with %s=%s yet: %w", r.Ref, RolloutHashLabel, hash, ErrNotObserved)
}

func (r *Resolved) currentForDeployment() (*appsv1.ReplicaSet, error) {
	d := r.Deployment
	if d.Status.ObservedGeneration < d.Generation {
		return nil, fmt.Errorf("%s: generation %d, status.observedGeneration %d: %w",
			r.Ref, d.Generation, d.Status.ObservedGeneration, ErrNotObserved)
	}
	// The deployment controller itself identifies its new ReplicaSet by template equality ignoring the
	// hash label; computing the hash would mean copying its hashing code.
	for _, rs := range r.Owned { // newest revision first, so a duplicate (which it never makes) loses
		if runsTemplate(rs, d) {
			return rs, nil
		}
	}
	return nil, fmt.Errorf("%s: no ReplicaSet matches its pod template yet: %w", r.Ref, ErrNotObserved)
}

// ByHash returns the owned ReplicaSet whose pod-template-hash label equals hash.
func (r *Resolved) ByHash(hash string) *appsv1.ReplicaSet {
	label := r.Ref.Kind.HashLabel()
	for _, rs := range r.Owned {
		if rs.Labels[label] == hash {
			return rs
		}
	}
	return nil
}

// runsTemplate reports whether rs was made from d's current pod template, the way the deployment
// controller compares them: equal ignoring the pod-template-hash label.
func runsTemplate(rs *appsv1.ReplicaSet, d *appsv1.Deployment) bool {
	return equalIgnoreHash(&rs.Spec.Template.ObjectMeta, &d.Spec.Template.ObjectMeta) &&
		apiequality.Semantic.DeepEqual(rs.Spec.Template.Spec, d.Spec.Template.Spec)
}

func equalIgnoreHash(rsMeta, templateMeta *metav1.ObjectMeta) bool {
	a, b := rsMeta.DeepCopy(), templateMeta.DeepCopy()
	delete(a.Labels, DeploymentHashLabel)
	delete(b.Labels, DeploymentHashLabel)
	if len(a.Labels) == 0 {
		a.Labels = nil
	}
	if len(b.Labels) == 0 {
		b.Labels = nil
	}
	return apiequality.Semantic.DeepEqual(a, b)
}

// generationObserved compares Argo Rollouts' string generations. Very old Rollouts versions stored a spec
// hash there; we cannot compare it, so we rely on the caller's other checks (template references).
func generationObserved(observed string, generation int64) bool {
	n, err := strconv.ParseInt(observed, 10, 64)
	if err != nil {
		return observed != ""
	}
	return n >= generation
}
