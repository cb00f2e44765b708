package caches

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// ByPin indexes snapshots by "<revision uid>/<Kind>/<original name>" (PinKey): the pin of one revision
// for one config object, found without listing.
const ByPin = "byPin"

// PinKey is the ByPin index value of a revision's pin for a config object.
func PinKey(revision string, r refs.Ref) string {
	return fmt.Sprintf("%s/%s/%s", revision, r.Kind, r.Name)
}

func indexByPin(kind refs.Kind) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		orig, owners, _ := snapshotOf(obj)
		if orig == "" {
			return nil, nil
		}
		out := make([]string, len(owners))
		for i, o := range owners {
			out[i] = PinKey(string(o), refs.Ref{Kind: kind, Name: orig})
		}
		return out, nil
	}
}

// snapshotOf reads, of a stored config object, what the snapshot indexes read: the original name it
// copies ("" when it is no snapshot), the uids of its owners and its namespace.
func snapshotOf(obj any) (original string, owners []types.UID, namespace string) {
	switch o := obj.(type) {
	case *configRecord:
		if original = o.annotations[api.OriginalNameAnnotation]; original == "" {
			return "", nil, ""
		}
		owners = make([]types.UID, len(o.owners))
		for i, l := range o.owners {
			owners[i] = l.id.uid.get()
		}
		namespace, _ = splitKey(o.key)
	case *metav1.PartialObjectMetadata:
		if original = o.Annotations[api.OriginalNameAnnotation]; original == "" {
			return "", nil, ""
		}
		owners = make([]types.UID, len(o.OwnerReferences))
		for i, r := range o.OwnerReferences {
			owners[i] = r.UID
		}
		namespace = o.Namespace
	}
	return original, owners, namespace
}

// ByCopied indexes snapshots by "<namespace>/<Kind>/<original name>" (CopiedKey): every snapshot of
// one config object, whichever revisions own them.
const ByCopied = "byCopied"

// CopiedKey is the ByCopied index value of the snapshots of r in namespace.
func CopiedKey(namespace string, r refs.Ref) string {
	return fmt.Sprintf("%s/%s/%s", namespace, r.Kind, r.Name)
}

func indexByCopied(kind refs.Kind) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		orig, _, ns := snapshotOf(obj)
		if orig == "" {
			return nil, nil
		}
		return []string{CopiedKey(ns, refs.Ref{Kind: kind, Name: orig})}, nil
	}
}

// snapshotIndexers are the snapshot caches' indexes.
func snapshotIndexers(kind refs.Kind) cache.Indexers {
	return cache.Indexers{ByPin: indexByPin(kind), ByCopied: indexByCopied(kind)}
}

// Pinning are the caches zero-touch pinning reads; the webhook's pod path reads nothing else.
type Pinning struct {
	// Pins are the objects labelled configmap-attacher.io/pin, whole: their content is snapshotted.
	Pins map[refs.Kind]*Informer[runtime.Object]
	// Snapshots are our snapshots, metadata only, indexed ByPin.
	Snapshots map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]
	// Namespaces, metadata only: which have pinning enabled.
	Namespaces *Informer[*metav1.PartialObjectMetadata]
}

// NewPinning adds the pinning caches to c.
func (c *Caches) NewPinning(clients *kube.Clients, o Options) error {
	p := &Pinning{Pins: map[refs.Kind]*Informer[runtime.Object]{}, Snapshots: map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]{}}
	clients, err := clients.WithCompression(compressInitialLists)
	if err != nil {
		return err
	}
	namespaces := o.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	pins := map[refs.Kind][]Source{}
	snaps := map[refs.Kind][]Source{}
	pinSelector := labels.SelectorFromSet(labels.Set{api.PinLabel: api.PinValue}).String()
	snapSelector := labels.SelectorFromSet(labels.Set{api.SnapshotLabel: api.SnapshotValue}).String()
	tweak := func(lo *metav1.ListOptions) { lo.LabelSelector = pinSelector }
	for _, ns := range namespaces {
		for _, kind := range o.ConfigKinds {
			var inf cache.SharedIndexInformer
			ix := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
			switch kind {
			case refs.ConfigMap:
				inf = coreinformers.NewFilteredConfigMapInformer(clients.Kube, ns, 0, ix, tweak)
			case refs.Secret:
				inf = coreinformers.NewFilteredSecretInformer(clients.Kube, ns, 0, ix, tweak)
			default:
				continue
			}
			if err := inf.SetTransform(trimPin); err != nil {
				return err
			}
			shared := &sharedInformer{SharedIndexInformer: inf}
			pins[kind] = append(pins[kind], shared)
			c.add(shared)
		}
		if c.AllConfigs != nil {
			continue // the snapshots are a view of the config informers (below)
		}
		if err := c.metadataInformers(apiSources{clients}, ns, snapSelector, o.ConfigKinds, keepOriginalName, snapshotIndexers, snaps); err != nil {
			return err
		}
	}
	for kind, infs := range pins {
		p.Pins[kind] = NewInformer[runtime.Object](infs...)
	}
	for kind, infs := range snaps {
		p.Snapshots[kind] = newViewInformer(configView(kind), infs...)
	}
	for kind, inf := range c.AllConfigs {
		p.Snapshots[kind] = inf.Filtered(isSnapshot)
	}
	nsInf := metadatainformer.NewFilteredMetadataInformer(clients.Metadata, corev1.SchemeGroupVersion.WithResource("namespaces"), metav1.NamespaceAll, 0,
		cache.Indexers{}, nil).Informer()
	if err := nsInf.SetTransform(trimNamespace); err != nil {
		return err
	}
	shared := &sharedInformer{SharedIndexInformer: nsInf}
	p.Namespaces = NewInformer[*metav1.PartialObjectMetadata](shared)
	c.add(shared)
	c.Pinning = p
	return nil
}

// Snapshot returns the name of the snapshot pinned for revision uid and config object r, if any.
func (p *Pinning) Snapshot(namespace, revision string, r refs.Ref) (string, bool) {
	inf, ok := p.Snapshots[r.Kind]
	if !ok {
		return "", false
	}
	snaps, err := inf.ByIndex(ByPin, PinKey(revision, r))
	if err != nil {
		return "", false
	}
	return PinAmong(snaps, namespace, revision, r)
}

// PinAmong finds a revision's pin for r among snapshots: one that copies r and is owned by the
// revision; api.BetterPin's choice if there are several.
func PinAmong(snaps []*metav1.PartialObjectMetadata, namespace, revision string, r refs.Ref) (string, bool) {
	var pin *metav1.PartialObjectMetadata
	for _, s := range snaps {
		if s.Namespace != namespace || s.Annotations[api.OriginalNameAnnotation] != r.Name ||
			!slices.ContainsFunc(s.OwnerReferences, func(o metav1.OwnerReference) bool { return string(o.UID) == revision }) {
			continue
		}
		if pin == nil || api.BetterPin(s, pin) {
			pin = s
		}
	}
	if pin == nil {
		return "", false
	}
	return pin.Name, true
}

// SnapshotsOf names the snapshots of r in namespace that are not being deleted, whichever revisions
// own them: r was pinned when they were taken.
func (p *Pinning) SnapshotsOf(namespace string, r refs.Ref) []string {
	inf, ok := p.Snapshots[r.Kind]
	if !ok {
		return nil
	}
	snaps, err := inf.ByIndex(ByCopied, CopiedKey(namespace, r))
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range snaps {
		if s.DeletionTimestamp == nil {
			out = append(out, s.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Pin returns the pinned object r in namespace, if it is labelled for pinning.
func (p *Pinning) Pin(namespace string, r refs.Ref) (runtime.Object, bool) {
	inf, ok := p.Pins[r.Kind]
	if !ok {
		return nil, false
	}
	obj, exists, err := inf.Get(namespace, r.Name)
	return obj, err == nil && exists
}

// Enabled reports whether the namespace has pinning on.
func (p *Pinning) Enabled(namespace string) bool {
	ns, exists, err := p.Namespaces.Get("", namespace)
	return err == nil && exists && ns.Labels[api.PinningNamespaceLabel] == api.PinningEnabled
}

// trimPin keeps a pinned object's content and identity; managedFields and the last-applied
// annotation (a copy of all the data) go.
func trimPin(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.ConfigMap:
		o.ManagedFields = nil
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
	case *corev1.Secret:
		o.ManagedFields = nil
		delete(o.Annotations, corev1.LastAppliedConfigAnnotation)
	}
	return obj, nil
}

func isSnapshot(m *metav1.PartialObjectMetadata) bool {
	return m.Labels[api.SnapshotLabel] == api.SnapshotValue
}

func trimNamespace(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		m.ManagedFields = nil
		m.Annotations = nil
	}
	return obj, nil
}

// NewPinningForTest is pinning caches that are never started: tests fill them directly. pins are
// ConfigMaps and Secrets labelled for pinning, snapshots their snapshots' metadata, enabled the
// namespaces with pinning on.
func NewPinningForTest(pins []runtime.Object, snapshots []*metav1.PartialObjectMetadata, enabled ...string) *Pinning {
	p := &Pinning{Pins: map[refs.Kind]*Informer[runtime.Object]{}, Snapshots: map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]{}}
	for _, kind := range refs.Kinds() {
		pinInf := cache.NewSharedIndexInformer(nil, &corev1.ConfigMap{}, 0, cache.Indexers{})
		for _, o := range pins {
			if (kind == refs.ConfigMap) == isConfigMap(o) {
				_ = pinInf.GetIndexer().Add(o)
			}
		}
		p.Pins[kind] = NewInformer[runtime.Object](pinInf)
		snapInf := cache.NewSharedIndexInformer(nil, &metav1.PartialObjectMetadata{}, 0, snapshotIndexers(kind))
		for _, s := range snapshots {
			if s.Kind == string(kind) {
				_ = snapInf.GetIndexer().Add(s)
			}
		}
		p.Snapshots[kind] = NewInformer[*metav1.PartialObjectMetadata](snapInf)
	}
	nsInf := cache.NewSharedIndexInformer(nil, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	for _, ns := range enabled {
		_ = nsInf.GetIndexer().Add(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: ns,
			Labels: map[string]string{api.PinningNamespaceLabel: api.PinningEnabled}}})
	}
	p.Namespaces = NewInformer[*metav1.PartialObjectMetadata](nsInf)
	return p
}

func isConfigMap(o runtime.Object) bool {
	_, ok := o.(*corev1.ConfigMap)
	return ok
}
