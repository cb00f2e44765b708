// Package attach is the one attach step: given a revision object (a ReplicaSet, ...) and the config
// objects its pod template uses, it adds the ownerReferences that are missing, so the garbage collector
// deletes each config object with the last revision using it. The Job mode (internal/oneshot) and the
// controller (internal/controller) both call Writer.Attach and nothing else writes ownerReferences.
//
// Garbage collection deletes data on the strength of what this package writes, so it only ever adds one
// well-formed reference (revision.Revision.OwnerReference) and never touches references it did not write.
package attach

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Object is a config object as the attacher sees it: its kind and metadata, never its data.
type Object struct {
	Kind refs.Kind
	Meta *metav1.PartialObjectMetadata
}

func (o Object) String() string {
	return fmt.Sprintf("%s %s/%s", o.Kind, o.Meta.Namespace, o.Meta.Name)
}

// Change adds an ownerReference to Revision to Object.
type Change struct {
	Object   Object
	Revision *revision.Revision
}

// Describe is the one-line, human form of a change, used in logs and dry-run output.
func (c Change) Describe() string {
	return fmt.Sprintf("%s: add ownerReference to %s (uid %s)", c.Object, c.Revision.Describe(), c.Revision.UID)
}

// Plan splits objects into the changes that make each owned by rev and the objects already owned. It
// refuses inputs the garbage collector would punish: a revision without uid, being deleted, or in
// another namespace (a cross-namespace owner counts as absent, and the GC deletes the dependent).
func Plan(rev *revision.Revision, objects []Object) (changes []Change, owned []Object, err error) {
	if rev.UID == "" || rev.Name == "" {
		return nil, nil, fmt.Errorf("%s/%s has no uid: only live objects can own config: %w", rev.Kind, rev.Name, ErrInvalid)
	}
	if rev.Deleting {
		return nil, nil, fmt.Errorf("%s %s/%s is being deleted: attaching would make its config garbage: %w", rev.Kind, rev.Namespace, rev.Name, ErrInvalid)
	}
	for _, o := range objects {
		if o.Meta.Namespace != rev.Namespace {
			return nil, nil, fmt.Errorf("%s is not in the namespace of %s %s/%s: %w", o, rev.Kind, rev.Namespace, rev.Name, ErrInvalid)
		}
		if o.Meta.UID == "" {
			return nil, nil, fmt.Errorf("%s has no uid: %w", o, ErrInvalid)
		}
		if revision.OwnedBy(&o.Meta.ObjectMeta, rev.UID) {
			owned = append(owned, o)
			continue
		}
		changes = append(changes, Change{Object: o, Revision: rev})
	}
	return changes, owned, nil
}
