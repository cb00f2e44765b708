// Package revision knows the objects that hold one revision of a workload: the pod template that
// revision's pods are made from, and the object a config object is tied to by ownerReference so that
// the garbage collector deletes it with the last revision using it.
//
// A Deployment's or Rollout's revision is a ReplicaSet. The ownerReference is the only thing this
// project writes that the garbage collector acts on, so it is built here and nowhere else.
package revision

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Annotations in which the owning controllers number a ReplicaSet's revision.
const (
	RolloutAnnotation    = "rollout.argoproj.io/revision"
	DeploymentAnnotation = "deployment.kubernetes.io/revision"
)

// Revision is one revision object as the attacher sees it.
type Revision struct {
	// APIVersion and Kind are the revision object's own, e.g. apps/v1 ReplicaSet.
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	UID        types.UID
	// Number is the revision number its workload gave it; 0 when it has none.
	Number int64
	// Deleting is true once the object has a deletionTimestamp: config attached to it now would be
	// garbage as soon as it goes.
	Deleting bool
	// Spec is the pod spec the revision's pods are made from.
	Spec *corev1.PodSpec
}

// FromReplicaSet is the revision a ReplicaSet holds.
func FromReplicaSet(rs *appsv1.ReplicaSet) *Revision {
	return &Revision{
		APIVersion: appsv1.SchemeGroupVersion.String(), Kind: "ReplicaSet",
		Namespace: rs.Namespace, Name: rs.Name, UID: rs.UID,
		Number:   Number(rs.Annotations),
		Deleting: rs.DeletionTimestamp != nil,
		Spec:     &rs.Spec.Template.Spec,
	}
}

// Number reads a ReplicaSet's revision number from its annotations, 0 when absent.
func Number(annotations map[string]string) int64 {
	for _, key := range []string{RolloutAnnotation, DeploymentAnnotation} {
		if v, ok := annotations[key]; ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil {
				return n
			}
		}
	}
	return 0
}

// OwnerReference is the only reference we ever write. controller:false because the revision does not
// manage the object; no blockOwnerDeletion because nothing should wait for config before deleting a
// revision, and setting it needs extra RBAC under OwnerReferencesPermissionEnforcement.
func (r *Revision) OwnerReference() metav1.OwnerReference {
	controller := false
	return metav1.OwnerReference{APIVersion: r.APIVersion, Kind: r.Kind, Name: r.Name, UID: r.UID, Controller: &controller}
}

// String names the object, e.g. "ReplicaSet demo-5bc6857c5f".
func (r *Revision) String() string { return r.Kind + " " + r.Name }

// Describe names the object with its revision number when it has one.
func (r *Revision) Describe() string {
	if r.Number == 0 {
		return r.String()
	}
	return fmt.Sprintf("%s (revision %d)", r, r.Number)
}

// OwnedBy reports whether meta carries an ownerReference to the revision object with this uid. The uid
// decides: an object recreated under the same name is a different owner.
func OwnedBy(meta *metav1.ObjectMeta, uid types.UID) bool {
	for _, ref := range meta.OwnerReferences {
		if ref.UID == uid {
			return true
		}
	}
	return false
}
