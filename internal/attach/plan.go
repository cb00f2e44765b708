// Package attach decides and writes the ownerReferences that tie config objects to ReplicaSets.
//
// It is the core shared by the Job and the controller: both hand it a ReplicaSet and the config objects
// that ReplicaSet's pod template uses, and it adds what is missing. Garbage collection deletes data on the
// strength of what this package writes, so it only ever adds one well-formed reference and never touches
// references it did not write.
package attach

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Object is a config object as the attacher sees it: its kind and metadata, never its data.
type Object struct {
	Kind refs.Kind
	Meta *metav1.PartialObjectMetadata
}

func (o Object) String() string {
	return fmt.Sprintf("%s %s/%s", o.Kind, o.Meta.Namespace, o.Meta.Name)
}

// Change adds an ownerReference to ReplicaSet to Object.
type Change struct {
	Object     Object
	ReplicaSet *appsv1.ReplicaSet
}

// OwnerReference is the only reference we ever write. controller:false because the ReplicaSet does not
// manage the object; no blockOwnerDeletion because nothing should wait for config before deleting a
// ReplicaSet, and setting it needs extra RBAC under OwnerReferencesPermissionEnforcement.
func OwnerReference(rs *appsv1.ReplicaSet) metav1.OwnerReference {
	controller := false
	return metav1.OwnerReference{
		APIVersion: appsv1.SchemeGroupVersion.String(),
		Kind:       "ReplicaSet",
		Name:       rs.Name,
		UID:        rs.UID,
		Controller: &controller,
	}
}

// Owns reports whether meta already carries a reference to the ReplicaSet, by uid: a ReplicaSet
// recreated under the same name is a different owner.
func Owns(meta *metav1.ObjectMeta, rs *appsv1.ReplicaSet) bool {
	for _, ref := range meta.OwnerReferences {
		if ref.UID == rs.UID {
			return true
		}
	}
	return false
}

// Plan returns the changes that make every object owned by rs; objects already owned need none. It
// refuses inputs the garbage collector would punish: a ReplicaSet without uid, being deleted, or in
// another namespace (a cross-namespace owner counts as absent, and the GC deletes the dependent).
func Plan(rs *appsv1.ReplicaSet, objects []Object) ([]Change, error) {
	if rs.UID == "" || rs.Name == "" {
		return nil, fmt.Errorf("ReplicaSet %s/%s has no uid: only live ReplicaSets can own config: %w", rs.Namespace, rs.Name, ErrInvalid)
	}
	if rs.DeletionTimestamp != nil {
		return nil, fmt.Errorf("ReplicaSet %s/%s is being deleted: attaching would make its config garbage: %w", rs.Namespace, rs.Name, ErrInvalid)
	}
	var changes []Change
	for _, o := range objects {
		if o.Meta.Namespace != rs.Namespace {
			return nil, fmt.Errorf("%s is not in the namespace of ReplicaSet %s/%s: %w", o, rs.Namespace, rs.Name, ErrInvalid)
		}
		if o.Meta.UID == "" {
			return nil, fmt.Errorf("%s has no uid: %w", o, ErrInvalid)
		}
		if Owns(&o.Meta.ObjectMeta, rs) {
			continue
		}
		changes = append(changes, Change{Object: o, ReplicaSet: rs})
	}
	return changes, nil
}

// Describe is the one-line, human form of a change, used in logs, events and dry-run output.
func (c Change) Describe() string {
	return fmt.Sprintf("%s: add ownerReference to ReplicaSet %s (uid %s, revision %d)",
		c.Object, c.ReplicaSet.Name, c.ReplicaSet.UID, workload.Revision(c.ReplicaSet))
}
