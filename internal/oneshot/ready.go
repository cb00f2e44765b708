package oneshot

import (
	"context"
	"errors"
	"fmt"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// readiness is the outcome of one look at the cluster: either everything the Job needs is in place, or
// the list of what is still missing (each phrased so it can end a timeout error).
type readiness struct {
	ReplicaSet *appsv1.ReplicaSet
	Objects    []attach.Object
	Pending    []string
	// WorkloadRef is the Deployment a Rollout takes its template from, once the Rollout was read.
	WorkloadRef string
}

// objectGetter reads a config object's metadata; apierrors.IsNotFound when absent.
type objectGetter func(context.Context, refs.Ref) (*metav1.PartialObjectMetadata, error)

// checkReady resolves the workload's current ReplicaSet and checks it references every target, and that
// every target exists. Errors are returned only for what waiting cannot fix (RBAC, bad data). The reads
// are independent, so they go out at once: one round trip to the API server instead of one per object.
func checkReady(ctx context.Context, src workload.Source, get objectGetter, ref workload.Ref, targets []refs.Ref) (*readiness, error) {
	type read struct {
		meta *metav1.PartialObjectMetadata
		err  error
	}
	reads := make([]read, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reads[i].meta, reads[i].err = get(ctx, t)
		}()
	}
	res, resolveErr := workload.Resolve(ctx, src, ref)
	wg.Wait()

	r := &readiness{}
	for i, t := range targets {
		meta, err := reads[i].meta, reads[i].err
		switch {
		case apierrors.IsNotFound(err):
			r.Pending = append(r.Pending, fmt.Sprintf("%s %s/%s does not exist", t.Kind, ref.Namespace, t.Name))
			continue
		case err != nil:
			return nil, fmt.Errorf("reading %s %s/%s: %w", t.Kind, ref.Namespace, t.Name, kube.Explain(err))
		}
		r.Objects = append(r.Objects, attach.Object{Kind: t.Kind, Meta: meta})
	}

	switch err := resolveErr; {
	case errors.Is(err, workload.ErrNotFound):
		r.Pending = append(r.Pending, err.Error()+" (check -namespace and the workload name)")
		return r, nil
	case err != nil:
		return nil, kube.Explain(err)
	}
	if ro := res.Rollout; ro != nil && ro.Spec.WorkloadRef != nil {
		r.WorkloadRef = ro.Spec.WorkloadRef.Name
	}
	rs, err := res.Current()
	if errors.Is(err, workload.ErrNotObserved) {
		r.Pending = append(r.Pending, "waiting for the current ReplicaSet: "+err.Error())
		return r, nil
	}
	if err != nil {
		return nil, err
	}
	used := refs.FromPodSpec(&rs.Spec.Template.Spec)
	var missing []refs.Ref
	for _, t := range targets {
		if !used.Has(t) {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		r.Pending = append(r.Pending, fmt.Sprintf("current ReplicaSet %s (revision %d) does not reference %v; it references %v",
			rs.Name, revision.Number(rs.Annotations), missing, used.Sorted()))
		return r, nil
	}
	r.ReplicaSet = rs
	return r, nil
}

// Ready reports whether the Job can attach.
func (r *readiness) Ready() bool { return len(r.Pending) == 0 && r.ReplicaSet != nil }
