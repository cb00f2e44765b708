package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
)

// Waking a workload's controller. The ReplicaSet, StatefulSet and DaemonSet controllers retry a
// refused pod creation after a per-object back-off, 5 ms doubling to 1,000 s: a revision whose pods
// were refused for a minute while we were away would wait tens of seconds more after its entry is
// written, minutes after a longer outage. Each of them queues its object at once, without that
// back-off, on an update it watches (kube-controller-manager v1.37): the ReplicaSet controller on any
// update of the ReplicaSet (updateRS), the DaemonSet controller on any update of one of its
// ControllerRevisions (updateHistory), the StatefulSet controller on any update of the StatefulSet
// (it has no handler for its ControllerRevisions). So once the entry of such a revision is written,
// the controller writes one annotation of ours (api.PinEntryAnnotation) in the metadata of that
// object: the revision object itself (the ReplicaSet; a DaemonSet's ControllerRevision), or the
// StatefulSet's own object. Never a pod template (a template change is a new revision), never another
// field. It takes the annotation off again after wakeClear (a second wake-up, should the API server's
// copy of the tables have lagged the first): the Deployment controller leaves an annotation it did not
// write on a ReplicaSet, but `kubectl rollout undo` copies a ReplicaSet's annotations onto the
// Deployment.
//
// The decision, for each entry a write has just made present in the API server's tables:
//
// | the policies enforce the tables | the entry was in the tables before | the revision is older than wakeAge | it has fewer pods than it wants | step |
// | --- | --- | --- | --- | --- |
// | no (webhook mode: tables kept for a switch) | | | | nothing (no pod was refused for an entry) |
// | yes | yes | | | nothing (its pods were admitted) |
// | yes | no | no | | nothing (its controller's back-off is still milliseconds) |
// | yes | no | yes | no | nothing (no pod waits) |
// | yes | no | yes | yes | wake its controller |

const (
	// wakeAge: a revision younger than this when its entry is written was refused for less (its
	// controller's back-off has not grown past it).
	wakeAge = time.Second
	// wakeClear is how long the annotation stays.
	wakeClear = 2 * time.Second
)

// wakeFacts are what decide whether to wake a revision's controller.
type wakeFacts struct {
	enforced    bool          // the admission policies enforce the tables (policy mode)
	wasPresent  bool          // the entry was in the tables before this write
	age         time.Duration // the revision's age when its entry was written
	podsMissing bool          // the revision (its workload, for a ControllerRevision) has fewer pods than it wants
}

// shouldWake is the decision of the table above.
func shouldWake(f wakeFacts) bool {
	return f.enforced && !f.wasPresent && f.age >= wakeAge && f.podsMissing
}

// wakeTarget is the object whose update wakes a revision's controller (Kind, Name, UID), and the
// object that has the revision's pods (Workload, WorkloadName, WorkloadUID).
type wakeTarget struct {
	Kind, Namespace, Name  string
	UID                    types.UID
	Workload, WorkloadName string
	WorkloadUID            types.UID
}

func (w wakeTarget) String() string { return w.Kind + " " + w.Namespace + "/" + w.Name }

// targetOf is the object to update for revision u: a ReplicaSet itself; a StatefulSet's
// ControllerRevision's StatefulSet; a DaemonSet's ControllerRevision itself.
func targetOf(u *caches.User) (wakeTarget, bool) {
	switch {
	case u.Kind() == caches.ReplicaSet:
		return wakeTarget{Kind: "ReplicaSet", Namespace: u.Namespace, Name: u.Name, UID: u.UID, Workload: "ReplicaSet", WorkloadName: u.Name, WorkloadUID: u.UID}, true
	case u.Owner == nil || u.Owner.APIVersion != "apps/v1":
		return wakeTarget{}, false
	case u.Owner.Kind == "StatefulSet":
		return wakeTarget{Kind: "StatefulSet", Namespace: u.Namespace, Name: u.Owner.Name, UID: u.Owner.UID,
			Workload: "StatefulSet", WorkloadName: u.Owner.Name, WorkloadUID: u.Owner.UID}, true
	case u.Owner.Kind == "DaemonSet":
		return wakeTarget{Kind: "ControllerRevision", Namespace: u.Namespace, Name: u.Name, UID: u.UID,
			Workload: "DaemonSet", WorkloadName: u.Owner.Name, WorkloadUID: u.Owner.UID}, true
	}
	return wakeTarget{}, false
}

// podsMissing reads whether the target has fewer pods than it wants: a ReplicaSet's status.replicas
// below spec.replicas; a StatefulSet's, likewise, or not every pod of its update revision yet; a
// DaemonSet's scheduled pods below the desired number, or not every one updated.
func (c *Controller) podsMissing(ctx context.Context, t wakeTarget) (bool, error) {
	apps := c.clients.Kube.AppsV1()
	switch t.Workload {
	case "ReplicaSet":
		rs, err := apps.ReplicaSets(t.Namespace).Get(ctx, t.WorkloadName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return rs.UID == t.WorkloadUID && rs.Spec.Replicas != nil && rs.Status.Replicas < *rs.Spec.Replicas, nil
	case "StatefulSet":
		s, err := apps.StatefulSets(t.Namespace).Get(ctx, t.WorkloadName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		want := int32(1)
		if s.Spec.Replicas != nil {
			want = *s.Spec.Replicas
		}
		return s.UID == t.WorkloadUID && (s.Status.Replicas < want || s.Status.UpdatedReplicas < want), nil
	case "DaemonSet":
		d, err := apps.DaemonSets(t.Namespace).Get(ctx, t.WorkloadName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := d.Status
		return d.UID == t.WorkloadUID && (s.CurrentNumberScheduled < s.DesiredNumberScheduled || s.UpdatedNumberScheduled < s.DesiredNumberScheduled), nil
	}
	return false, nil
}

// annotate sets (value non-nil) or removes api.PinEntryAnnotation on the target, by a merge patch of
// that one key, with a uid precondition (a workload deleted and made again under the same name is
// left alone).
func (c *Controller) annotate(ctx context.Context, t wakeTarget, value *string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         t.UID,
		"annotations": map[string]any{api.PinEntryAnnotation: value},
	}})
	if err != nil {
		return err
	}
	apps := c.clients.Kube.AppsV1()
	opts := metav1.PatchOptions{FieldManager: api.FieldManager}
	switch t.Kind {
	case "ReplicaSet":
		_, err = apps.ReplicaSets(t.Namespace).Patch(ctx, t.Name, types.MergePatchType, patch, opts)
	case "StatefulSet":
		_, err = apps.StatefulSets(t.Namespace).Patch(ctx, t.Name, types.MergePatchType, patch, opts)
	case "ControllerRevision":
		_, err = apps.ControllerRevisions(t.Namespace).Patch(ctx, t.Name, types.MergePatchType, patch, opts)
	default:
		return nil
	}
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or another object of that name now: nothing to wake
	}
	if err != nil {
		return fmt.Errorf("waking the controller of %s: %w", t, err)
	}
	return nil
}
