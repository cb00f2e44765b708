// Package api is configmap-attacher's interface with users and their scripts: the labels and
// annotations it reads and writes on their objects, and the name its writes carry. Every name and
// value here is relied on by manifests and scripts: never change one.
package api

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Prefix starts every label and annotation key of ours.
const Prefix = "configmap-attacher.io/"

// RevisionedLabel opts a ConfigMap or Secret in: the chart and the renderer set it, and nothing without
// it is ever attached, so a hand-made object never becomes garbage because a workload went away.
const (
	RevisionedLabel = "configmap-attacher.io/revisioned"
	RevisionedValue = "true"
)

// OptedIn reports whether an object carries the opt-in label.
func OptedIn(labels map[string]string) bool { return labels[RevisionedLabel] == RevisionedValue }

// AttachAllAnnotation on a Rollout or Deployment (value "true") opts in every ConfigMap and Secret its
// ReplicaSets reference, labelled or not. Risky by design: an object shared with another workload gets
// deleted when the last ReplicaSet of this one goes. Documented in docs/controller.md.
const AttachAllAnnotation = "configmap-attacher.io/attach-all"

// OriginalNameAnnotation records the name a revisioned object had before `render` gave it its content
// hash: how a second render recognises its own output and how `diff` pairs revisions of one object.
const OriginalNameAnnotation = "configmap-attacher.io/name"

// FieldManager names our writes in managedFields and audit logs; managedFields is also how we tell the
// ownerReferences we wrote from those anyone else wrote.
const FieldManager = "configmap-attacher"

// InUseFinalizer holds an opted-in ConfigMap or Secret while anything live uses it: a deletion from any
// source (the garbage collector, Helm, kubectl) then completes only once nothing does. The controller
// adds it and alone removes it; `configmap-attacher release` takes it off everywhere (uninstall).
const InUseFinalizer = "configmap-attacher.io/in-use-protection"

// HasFinalizer reports whether finalizers holds f.
func HasFinalizer(finalizers []string, f string) bool {
	for _, x := range finalizers {
		if x == f {
			return true
		}
	}
	return false
}

// Zero-touch pinning (docs/pinning.md): each revision's pods read the config the revision was created
// with, though the config object keeps its name and is changed in place.
const (
	// PinningNamespaceLabel=PinningEnabled on a Namespace turns pinning on for its pods.
	PinningNamespaceLabel = "configmap-attacher.io/pinning"
	PinningEnabled        = "enabled"
	// PinningDisabled, as the value of PinningNamespaceLabel on a pod (its template), keeps the pod
	// away from the webhook: the emergency escape for pods that must start while it cannot answer.
	PinningDisabled = "disabled"
	// PinLabel=PinValue on a ConfigMap or Secret pins it: pods get the snapshot of their revision
	// instead. Only labelled objects, so Secrets rotated in place by cert-manager or external-secrets
	// are never pinned by accident.
	PinLabel = "configmap-attacher.io/pin"
	PinValue = "true"
	// SnapshotLabel=SnapshotValue marks the immutable snapshots we take; their OriginalNameAnnotation
	// names the object they copy, their ownerReferences the revisions pinned to them.
	SnapshotLabel = "configmap-attacher.io/snapshot"
	SnapshotValue = "true"
)

// Pinned reports whether an object carries the pin label.
func Pinned(labels map[string]string) bool { return labels[PinLabel] == PinValue }

// BetterPin reports whether snapshot a, rather than b, is the pin of a revision that owns both; the
// webhook, the controller and `history` all pick the same one. One not being deleted comes first: a
// snapshot deleted by hand while its revision lives is held by in-use protection, and the webhook gives
// new pods another pin if the revision has one. Without one, the revision keeps reading the held
// snapshot (its deletion then waits for the revision, as in-use protection has any deletion wait)
// rather than get a new snapshot of whatever the object holds now. Then EarlierPin.
func BetterPin(a, b metav1.Object) bool {
	if da, db := a.GetDeletionTimestamp() != nil, b.GetDeletionTimestamp() != nil; da != db {
		return db
	}
	return EarlierPin(a, b)
}

// EarlierPin reports whether snapshot a, rather than b, is the pin of a revision that owns both: the
// older one, taken when the revision was created; by name when both were created in the same second.
// The takers check the API before they snapshot, so two are left only by two takers racing while the
// object changed.
func EarlierPin(a, b metav1.Object) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}
