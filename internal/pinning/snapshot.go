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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
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
	if name, ok, err := t.pinned(ctx, rev, r); err != nil || ok {
		return name, err
	}
	live, err := t.get(ctx, rev.Namespace, r)
	if err != nil {
		return "", err
	}
	if !api.Pinned(live.GetLabels()) {
		return "", fmt.Errorf("%s %s/%s: %w", r.Kind, rev.Namespace, r.Name, ErrNotPinned)
	}
	if s, ok := live.(*corev1.Secret); ok && s.Type == corev1.SecretTypeServiceAccountToken {
		return "", fmt.Errorf("%s %s/%s: %w", r.Kind, rev.Namespace, r.Name, ErrNotPinnable)
	}
	snap, err := snapshotOf(live, rev)
	if err != nil {
		return "", err
	}
	// A snapshot of this name that exists may be going away (a pruned revision's, with the same
	// content: a revert), and its deletion can complete at any point below. Once gone, it is created
	// again: the revision must get a snapshot that exists, not its name alone.
	for range takeAttempts {
		err = t.create(ctx, r.Kind, snap)
		if err == nil {
			return snap.GetName(), nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("snapshotting %s %s/%s for %s: %w", r.Kind, rev.Namespace, r.Name, rev, err)
		}
		m, err := t.Writer.Client.Resource(r.Kind.GVR()).Namespace(rev.Namespace).Get(ctx, snap.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return "", err
		}
		res, err := t.Writer.Attach(ctx, rev, []attach.Object{{Kind: r.Kind, Meta: m}}, attach.Options{})
		if err != nil {
			return "", fmt.Errorf("pinning %s to snapshot %s: %w", rev, snap.GetName(), err)
		}
		if len(res.Gone) == 0 {
			return snap.GetName(), nil
		}
	}
	// Not a NotFound: the webhook reads that as "the pinned object is gone" and admits the pod unpinned.
	return "", fmt.Errorf("snapshotting %s %s/%s for %s: %w", r.Kind, rev.Namespace, r.Name, rev, errSnapshotGone)
}

// takeAttempts bounds the creates of a snapshot whose name keeps being taken by one going away.
const takeAttempts = 3

// errSnapshotGone: a snapshot of the same name was there at each create and gone at each read.
var errSnapshotGone = errors.New("a snapshot of the same name kept going away; try again")

// DryRunName is the name Take would return, computed from a cached copy without writing anything:
// what a server-side dry run of a pod gets (the webhook declares sideEffects NoneOnDryRun).
func DryRunName(cached metav1.Object) (string, error) { return SnapshotName(cached) }

// pinned finds rev's pin for r on the API server.
func (t *Taker) pinned(ctx context.Context, rev *revision.Revision, r refs.Ref) (string, bool, error) {
	list, err := t.Writer.Client.Resource(r.Kind.GVR()).Namespace(rev.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: api.SnapshotLabel + "=" + api.SnapshotValue})
	if err != nil {
		return "", false, fmt.Errorf("listing the snapshots of %s %s/%s: %w", r.Kind, rev.Namespace, r.Name, err)
	}
	snaps := make([]*metav1.PartialObjectMetadata, len(list.Items))
	for i := range list.Items {
		snaps[i] = &list.Items[i]
	}
	name, ok := caches.PinAmong(snaps, rev.Namespace, string(rev.UID), r)
	return name, ok, nil
}

func (t *Taker) get(ctx context.Context, ns string, r refs.Ref) (metav1.Object, error) {
	switch r.Kind {
	case refs.ConfigMap:
		return t.Kube.CoreV1().ConfigMaps(ns).Get(ctx, r.Name, metav1.GetOptions{})
	case refs.Secret:
		return t.Kube.CoreV1().Secrets(ns).Get(ctx, r.Name, metav1.GetOptions{})
	}
	return nil, fmt.Errorf("%s is not a config kind", r.Kind)
}

func (t *Taker) create(ctx context.Context, kind refs.Kind, obj metav1.Object) error {
	opts := metav1.CreateOptions{FieldManager: api.FieldManager}
	var err error
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		_, err = t.Kube.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, opts)
	case *corev1.Secret:
		_, err = t.Kube.CoreV1().Secrets(o.Namespace).Create(ctx, o, opts)
	default:
		err = fmt.Errorf("%s is not a config kind", kind)
	}
	return err
}
