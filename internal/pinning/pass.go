package pinning

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Pass is one pass of snapshot taking over a namespace's revisions: each object is read from the API
// server once, the namespace's snapshots are listed once, and what the pass writes is kept, so that
// the pass's next revision with the same content costs one write (its ownerReference) instead of six
// requests. A namespace just labelled, or our return after an outage, is many revisions at once, each
// waiting on every other one's requests.
//
// The reads are as good as per-revision reads for every revision seen before the pass began: an object
// labelled, or changed, in the same deploy as a revision is read after that revision was seen either
// way. So a pass is for revisions already seen when it is made, and lives for one sync. Not safe for
// concurrent use.
type Pass struct {
	t         *Taker
	namespace string
	objects   map[refs.Ref]read
	// snapshots are the namespace's snapshots of each kind, as listed then as written by the pass.
	snapshots map[refs.Kind][]*metav1.PartialObjectMetadata
}

// read is an object as read from the API server, or the error reading it gave.
type read struct {
	obj metav1.Object
	err error
}

// Pass starts a pass over namespace's revisions.
func (t *Taker) Pass(namespace string) *Pass {
	return &Pass{t: t, namespace: namespace, objects: map[refs.Ref]read{}, snapshots: map[refs.Kind][]*metav1.PartialObjectMetadata{}}
}

// Get is object r as the API server had it when the pass first asked (a NotFound error included).
func (p *Pass) Get(ctx context.Context, r refs.Ref) (metav1.Object, error) {
	if got, ok := p.objects[r]; ok {
		return got.obj, got.err
	}
	var obj metav1.Object
	var err error
	switch r.Kind {
	case refs.ConfigMap:
		obj, err = p.t.Kube.CoreV1().ConfigMaps(p.namespace).Get(ctx, r.Name, metav1.GetOptions{})
	case refs.Secret:
		obj, err = p.t.Kube.CoreV1().Secrets(p.namespace).Get(ctx, r.Name, metav1.GetOptions{})
	default:
		return nil, fmt.Errorf("%s is not a config kind", r.Kind)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err // not kept: the next revision asks again
	}
	p.objects[r] = read{obj: obj, err: err}
	return obj, err
}

// Take is Taker.Take within the pass.
func (p *Pass) Take(ctx context.Context, rev *revision.Revision, r refs.Ref) (string, error) {
	snaps, err := p.listed(ctx, r.Kind)
	if err != nil {
		return "", err
	}
	if name, ok := caches.PinAmong(snaps, rev.Namespace, string(rev.UID), r); ok {
		return name, nil
	}
	live, err := p.Get(ctx, r)
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
	name := snap.GetName()
	// A snapshot of this name that exists may be going away (a pruned revision's, with the same
	// content: a revert), and its deletion can complete at any point below. Once gone, it is created
	// again: the revision must get a snapshot that exists, not its name alone.
	existing := p.snapshot(r.Kind, name)
	for range takeAttempts {
		if existing != nil {
			res, err := p.t.Writer.Attach(ctx, rev, []attach.Object{{Kind: r.Kind, Meta: existing}}, attach.Options{})
			if err != nil {
				return "", fmt.Errorf("pinning %s to snapshot %s: %w", rev, name, err)
			}
			if len(res.Gone) == 0 {
				for _, c := range res.Written {
					p.keep(r.Kind, c.Object.Meta)
				}
				return name, nil
			}
			p.forget(r.Kind, name)
		}
		created, err := p.create(ctx, snap)
		if err == nil {
			p.keep(r.Kind, &metav1.PartialObjectMetadata{ObjectMeta: *created.DeepCopy()})
			return name, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("snapshotting %s %s/%s for %s: %w", r.Kind, rev.Namespace, r.Name, rev, err)
		}
		existing, err = p.t.Writer.Client.Resource(r.Kind.GVR()).Namespace(rev.Namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			existing = nil
			continue
		}
		if err != nil {
			return "", err
		}
	}
	// Not a NotFound: the webhook reads that as "the pinned object is gone" and admits the pod unpinned.
	return "", fmt.Errorf("snapshotting %s %s/%s for %s: %w", r.Kind, rev.Namespace, r.Name, rev, errSnapshotGone)
}

// takeAttempts bounds the creates of a snapshot whose name keeps being taken by one going away.
const takeAttempts = 3

// errSnapshotGone: a snapshot of the same name was there at each create and gone at each read.
var errSnapshotGone = errors.New("a snapshot of the same name kept going away; try again")

// listed are the namespace's snapshots of kind, listed from the API server at the pass's first ask.
func (p *Pass) listed(ctx context.Context, kind refs.Kind) ([]*metav1.PartialObjectMetadata, error) {
	if snaps, ok := p.snapshots[kind]; ok {
		return snaps, nil
	}
	list, err := p.t.Writer.Client.Resource(kind.GVR()).Namespace(p.namespace).List(ctx,
		metav1.ListOptions{LabelSelector: api.SnapshotLabel + "=" + api.SnapshotValue})
	if err != nil {
		return nil, fmt.Errorf("listing the %s snapshots of %s: %w", kind, p.namespace, err)
	}
	snaps := make([]*metav1.PartialObjectMetadata, len(list.Items))
	for i := range list.Items {
		snaps[i] = &list.Items[i]
	}
	p.snapshots[kind] = snaps
	return snaps, nil
}

// snapshot is the pass's view of snapshot name (nil: not listed, nor written since).
func (p *Pass) snapshot(kind refs.Kind, name string) *metav1.PartialObjectMetadata {
	for _, s := range p.snapshots[kind] {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// keep records a snapshot as the pass wrote it.
func (p *Pass) keep(kind refs.Kind, meta *metav1.PartialObjectMetadata) {
	p.forget(kind, meta.Name)
	p.snapshots[kind] = append(p.snapshots[kind], meta)
}

// forget drops a snapshot found gone.
func (p *Pass) forget(kind refs.Kind, name string) {
	snaps := p.snapshots[kind][:0:0]
	for _, s := range p.snapshots[kind] {
		if s.Name != name {
			snaps = append(snaps, s)
		}
	}
	p.snapshots[kind] = snaps
}

// create creates a snapshot, and returns its metadata as created.
func (p *Pass) create(ctx context.Context, obj metav1.Object) (*metav1.ObjectMeta, error) {
	opts := metav1.CreateOptions{FieldManager: api.FieldManager}
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		out, err := p.t.Kube.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, opts)
		if err != nil {
			return nil, err
		}
		return &out.ObjectMeta, nil
	case *corev1.Secret:
		out, err := p.t.Kube.CoreV1().Secrets(o.Namespace).Create(ctx, o, opts)
		if err != nil {
			return nil, err
		}
		return &out.ObjectMeta, nil
	}
	return nil, fmt.Errorf("%T is not a config kind", obj)
}
