// Package pinning is zero-touch pinning: every revision's pods read the config the revision was
// created with, though the ConfigMap or Secret keeps its name and is changed in place.
//
// When a revision (a ReplicaSet, or a StatefulSet's or DaemonSet's ControllerRevision) appears in a
// namespace labelled configmap-attacher.io/pinning=enabled, the controller snapshots every object
// labelled configmap-attacher.io/pin its pod template references: an immutable copy named
// <name>-<content hash>, owned by the revision (the garbage collector frees it with the last revision
// pinned to it) and protected while in use. A mutating admission webhook then rewrites each new pod's
// references to the snapshots of the pod's own revision. Templates are never changed: the Deployment
// controller finds its ReplicaSets by template equality, and Argo Rollouts' undo copies templates back.
//
// The pin is "the snapshot this revision's uid owns", found through an index; nothing is stored in an
// annotation, which `kubectl rollout undo` would copy from revision to revision.
package pinning

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// ErrNotPinned means the object is not (or no longer) labelled for pinning.
var ErrNotPinned = errors.New("not labelled " + api.PinLabel + "=" + api.PinValue)

// ErrNotPinnable means the object is labelled but never snapshotted: a service-account-token Secret,
// whose copy the token controller would fill with a token of its own (and which the chart's admission
// policy forbids us to create). Pods keep reading it by its name.
var ErrNotPinnable = errors.New("a " + string(corev1.SecretTypeServiceAccountToken) + " Secret is never snapshotted: its token is its ServiceAccount's; remove the " + api.PinLabel + " label")

// SnapshotName is the name of the snapshot of obj's current content.
func SnapshotName(obj metav1.Object) (string, error) {
	ro, ok := obj.(runtime.Object)
	if !ok {
		return "", fmt.Errorf("%T is not a ConfigMap or Secret", obj)
	}
	hash, err := content.Of(ro)
	if err != nil {
		return "", err
	}
	return content.Name(obj.GetName(), hash), nil
}

// snapshotOf is the immutable copy of obj for rev: its content, none of its labels and annotations
// (Helm's and Argo CD's tracking metadata would make them claim the copy), our labels (opted in, so
// in-use protection covers it; a snapshot), the name of the original, our finalizer from the start,
// and an ownerReference to the revision.
func snapshotOf(obj metav1.Object, rev *revision.Revision) (metav1.Object, error) {
	name, err := SnapshotName(obj)
	if err != nil {
		return nil, err
	}
	meta := metav1.ObjectMeta{
		Name: name, Namespace: obj.GetNamespace(),
		Labels:          map[string]string{api.RevisionedLabel: api.RevisionedValue, api.SnapshotLabel: api.SnapshotValue},
		Annotations:     map[string]string{api.OriginalNameAnnotation: obj.GetName()},
		Finalizers:      []string{api.InUseFinalizer},
		OwnerReferences: []metav1.OwnerReference{rev.OwnerReference()},
	}
	yes := true
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		return &corev1.ConfigMap{ObjectMeta: meta, Data: o.Data, BinaryData: o.BinaryData, Immutable: &yes}, nil
	case *corev1.Secret:
		return &corev1.Secret{ObjectMeta: meta, Type: o.Type, Data: o.Data, Immutable: &yes}, nil
	}
	return nil, fmt.Errorf("%T is not a ConfigMap or Secret", obj)
}

// Taker takes snapshots.
type Taker struct {
	Kube   kubernetes.Interface
	Writer *attach.Writer // adds the revision to a snapshot that exists already (same content)
}

// Take snapshots the object r as it is now, for rev, and returns the snapshot's name. It reads from
// the API server, not a cache: a revision created right after the object changed must get the new
// content. A pin rev has already is returned as it is: the callers looked in their caches, which may
// not show a snapshot taken a moment ago (by this process or the webhook of another replica), and
// snapshotting again after the object changed would pin the revision to the new content too. Taking
// what exists already (the same content, another revision or a concurrent taker) only adds rev's
// ownerReference, through the one attach step.
func (t *Taker) Take(ctx context.Context, rev *revision.Revision, r refs.Ref) (string, error) {
	return t.Pass(rev.Namespace).Take(ctx, rev, r)
}

// DryRunName is the name Take would return, computed from a cached copy without writing anything:
// what a server-side dry run of a pod gets (the webhook declares sideEffects NoneOnDryRun).
func DryRunName(cached metav1.Object) (string, error) { return SnapshotName(cached) }
