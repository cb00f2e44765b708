package caches

import (
	"errors"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Index names, besides the namespace index every informer has: on User informers, which Rollouts
// take their template from a Deployment (ByTemplateRef, "namespace/deployment") and which workloads
// name objects of a kind in a Reloader reload list (ByReloadList, "namespace/Kind"), both kept by few
// objects.
//
// There is no index by config object, owner or uid: an index keeps a set for every value, ~270 bytes,
// and nearly every value is one object's (each revision reads its own ConfigMap; most revisions own
// one or two). With 150,000 Pods those sets weighed more than the objects. Who uses a config object,
// what a revision owns, are found by looking through the objects of one namespace (InNamespace), as
// kube-controller-manager's ReplicaSet controller lists a namespace's pods for each ReplicaSet.
const (
	ByTemplateRef = "byTemplateRef"
	ByReloadList  = "byReloadList"
)

// UserIndexers are the indexes every User informer has besides the namespace index. Each keeps an
// entry only for the few objects that have a value.
func UserIndexers() cache.Indexers {
	return cache.Indexers{ByTemplateRef: indexByTemplateRef, ByReloadList: indexByReloadList}
}

func indexByTemplateRef(obj any) ([]string, error) {
	if ns, _, _, st := workloadOf(obj); st != nil && st.TemplateRef != "" {
		return []string{ns + "/" + st.TemplateRef}, nil
	}
	return nil, nil
}

// workloadOf reads, of a stored user, what the indexes read: its namespace, annotations, template
// annotations and, for a workload, its status (nil for other kinds).
func workloadOf(obj any) (namespace string, annotations, template map[string]string, status *WorkloadStatus) {
	switch o := obj.(type) {
	case *User:
		return o.Namespace, o.Annotations, o.TemplateAnnotations, o.Status
	case *entry:
		if m := o.more; m != nil {
			return o.id.namespace(), m.annotations, m.templateAnnotations, m.status
		}
	}
	return "", nil, nil, nil
}

// ReloadListKey is the ByReloadList index value of the workloads of namespace with a reload list of
// config kind.
func ReloadListKey(namespace string, kind refs.Kind) string { return namespace + "/" + string(kind) }

func indexByReloadList(obj any) ([]string, error) {
	ns, annotations, template, status := workloadOf(obj)
	if status == nil {
		return nil, nil
	}
	var out []string
	for kind, key := range map[refs.Kind]string{refs.ConfigMap: api.ReloaderConfigMapReload, refs.Secret: api.ReloaderSecretReload} {
		if annotations[key] != "" || template[key] != "" {
			out = append(out, ReloadListKey(ns, kind))
		}
	}
	return out, nil
}

// Using matches the Users whose pods or pod template reference r.
func Using(r refs.Ref) func(*User) bool { return func(u *User) bool { return u.Uses(r) } }

// ControlledBy matches the Users whose controller has uid.
func ControlledBy(uid types.UID) func(*User) bool {
	return func(u *User) bool { return u.Owner != nil && u.Owner.UID == uid }
}

// OwnedBy matches the config objects among whose owners is uid.
func OwnedBy(uid types.UID) func(*metav1.PartialObjectMetadata) bool {
	return func(m *metav1.PartialObjectMetadata) bool { return revision.OwnedBy(&m.ObjectMeta, uid) }
}

// Informer is one resource's cache over one or more namespaces (a single informer when watching all
// of them). Controllers read it; internal/manager builds and starts it; tests fill Indexers directly.
// What its stores hold is what view turns into a T when read (records.go): every read, and every event
// handed to a handler, gets an object of its own, made from the stored one. A filtered Informer
// (Filtered) is a view of another: it shares its informers and shows only the objects keep accepts.
type Informer[T runtime.Object] struct {
	informers []Source
	keep      func(T) bool // nil: every object
	view      func(any) (T, bool)
}

// NewInformer joins the informers of one resource, one per namespace watched; their stores hold Ts.
func NewInformer[T runtime.Object](informers ...Source) *Informer[T] {
	return &Informer[T]{informers: informers, view: func(obj any) (T, bool) {
		t, ok := obj.(T)
		return t, ok
	}}
}

// newViewInformer joins informers whose stores hold what view turns into Ts.
func newViewInformer[T runtime.Object](view func(any) (T, bool), informers ...Source) *Informer[T] {
	return &Informer[T]{informers: informers, view: view}
}

// Filtered is a view of the informer showing only the objects keep accepts, to readers and to event
// handlers alike: an object that stops being accepted is deleted from the view's point of view, one
// that starts being accepted is added, and changes to objects it never accepts are not seen at all.
// So a controller written for a label-selected informer keeps its semantics over a wider one.
func (i *Informer[T]) Filtered(keep func(T) bool) *Informer[T] {
	return &Informer[T]{informers: i.informers, keep: keep, view: i.view}
}

// shows returns what the view shows of a stored object, or of a tombstone of one (the object it
// holds), and whether it shows it.
func (i *Informer[T]) shows(obj any) (T, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	t, ok := i.view(obj)
	return t, ok && (i.keep == nil || i.keep(t))
}

// Get returns the cached object namespace/name (namespace "" for a cluster-scoped object).
func (i *Informer[T]) Get(namespace, name string) (T, bool, error) {
	var zero T
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	for _, inf := range i.informers {
		obj, exists, err := inf.GetIndexer().GetByKey(key)
		if err != nil || !exists {
			if err != nil {
				return zero, false, err
			}
			continue
		}
		t, ok := i.view(obj)
		if !ok {
			return zero, false, fmt.Errorf("cache of %T holds a %T", zero, obj)
		}
		if i.keep != nil && !i.keep(t) {
			return zero, false, nil
		}
		return t, true, nil
	}
	return zero, false, nil
}

// ByIndex returns the cached objects whose index has value.
func (i *Informer[T]) ByIndex(index, value string) ([]T, error) {
	var out []T
	var errs []error
	for _, inf := range i.informers {
		objs, err := inf.GetIndexer().ByIndex(index, value)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, o := range objs {
			if t, ok := i.shows(o); ok {
				out = append(out, t)
			}
		}
	}
	return out, errors.Join(errs...)
}

// InNamespace returns the cached objects of namespace that match (the namespace index, then match on
// each). See the index names for why there is no index to ask instead.
func (i *Informer[T]) InNamespace(namespace string, match func(T) bool) ([]T, error) {
	return i.inNamespace(namespace, nil, match)
}

// inNamespace is InNamespace with pre, when not nil, asked of each stored record before a view is
// made of it: a question the record answers (an owner's uid) spares making a view per object.
func (i *Informer[T]) inNamespace(namespace string, pre func(any) bool, match func(T) bool) ([]T, error) {
	var out []T
	var errs []error
	for _, inf := range i.informers {
		objs, err := inf.GetIndexer().ByIndex(cache.NamespaceIndex, namespace)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, o := range objs {
			if pre != nil && !pre(o) {
				continue
			}
			if t, ok := i.shows(o); ok && match(t) {
				out = append(out, t)
			}
		}
	}
	return out, errors.Join(errs...)
}

// List returns every cached object.
func (i *Informer[T]) List() []T {
	var out []T
	for _, inf := range i.informers {
		for _, o := range inf.GetIndexer().List() {
			if t, ok := i.shows(o); ok {
				out = append(out, t)
			}
		}
	}
	return out
}

// AddEventHandler registers h with every namespace's informer: h gets the view's objects (through
// the view's filter, if any).
func (i *Informer[T]) AddEventHandler(h cache.ResourceEventHandler) error {
	return i.addEventHandler(filteringHandler[T]{view: i, h: h})
}

// AddEventHandlerAfterFirstList is AddEventHandler for a handler that does nothing with the adds of
// the first list (a controller that looks at every object once the caches are synced instead): it is
// not called for them, so no view is made of those objects for it, which for a cluster's Pods is
// 150,000 Users made and dropped at each start, per handler.
func (i *Informer[T]) AddEventHandlerAfterFirstList(h cache.ResourceEventHandler) error {
	return i.addEventHandler(filteringHandler[T]{view: i, h: h, afterFirstList: true})
}

func (i *Informer[T]) addEventHandler(fh filteringHandler[T]) error {
	for _, inf := range i.informers {
		if _, err := inf.AddEventHandler(fh); err != nil {
			return err
		}
	}
	return nil
}

// filteringHandler passes a view's events on as the view sees them.
type filteringHandler[T runtime.Object] struct {
	view           *Informer[T]
	h              cache.ResourceEventHandler
	afterFirstList bool // no adds of the first list
}

// skipsFirstList tells the informer's listener not to queue the first list's adds at all.
func (f filteringHandler[T]) skipsFirstList() bool { return f.afterFirstList }

func (f filteringHandler[T]) OnAdd(obj any, initial bool) {
	if initial && f.afterFirstList {
		return
	}
	if t, ok := f.view.shows(obj); ok {
		f.h.OnAdd(t, initial)
	}
}

func (f filteringHandler[T]) OnUpdate(old, cur any) {
	o, was := f.view.shows(old)
	n, is := f.view.shows(cur)
	switch {
	case was && is:
		f.h.OnUpdate(o, n)
	case is:
		f.h.OnAdd(n, false)
	case was:
		// Left the view (e.g. its opt-in label was removed): a delete, as a label-selected watch
		// reports it; handlers get the last state the view showed.
		f.h.OnDelete(o)
	}
}

func (f filteringHandler[T]) OnDelete(obj any) {
	t, ok := f.view.shows(obj)
	if !ok {
		return
	}
	if d, tomb := obj.(cache.DeletedFinalStateUnknown); tomb {
		f.h.OnDelete(cache.DeletedFinalStateUnknown{Key: d.Key, Obj: t})
		return
	}
	f.h.OnDelete(t)
}

// HasSynced reports whether every namespace's informer has synced.
func (i *Informer[T]) HasSynced() bool {
	for _, inf := range i.informers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// Indexers are the stores behind the informer, one per namespace: what unit tests fill. A store may
// hold Ts as they are, besides the records the informers store.
func (i *Informer[T]) Indexers() []cache.Indexer {
	out := make([]cache.Indexer, len(i.informers))
	for j, inf := range i.informers {
		out[j] = inf.GetIndexer()
	}
	return out
}

// stored returns the object the store holds under key, as it holds it.
func (i *Informer[T]) stored(key string) (any, bool) {
	for _, inf := range i.informers {
		if obj, exists, err := inf.GetIndexer().GetByKey(key); err == nil && exists {
			return obj, true
		}
	}
	return nil, false
}

// userView is what the User informers hand out of what they store.
func userView(obj any) (*User, bool) {
	switch o := obj.(type) {
	case *User:
		return o, true
	case *entry:
		return o.user(), true
	case *podStub:
		return o.user(), true
	}
	return nil, false
}

// configView is what a config informer of kind hands out of what it stores.
func configView(kind refs.Kind) func(any) (*metav1.PartialObjectMetadata, bool) {
	return func(obj any) (*metav1.PartialObjectMetadata, bool) {
		switch o := obj.(type) {
		case *metav1.PartialObjectMetadata:
			return o, true
		case *configRecord:
			return o.meta(kind), true
		}
		return nil, false
	}
}

// MetaOf returns the metadata of a cached config object, seeing through tombstones.
func MetaOf(obj any) (*metav1.PartialObjectMetadata, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	return m, ok
}

// UserOf returns a cached User, seeing through tombstones.
func UserOf(obj any) (*User, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*User)
	return u, ok
}

// NewUserInformerForTest is a User informer that is never started: tests add objects to it directly.
func NewUserInformerForTest(users ...*User) *Informer[*User] {
	return newUserInformerForTest(UserIndexers(), users...)
}

func newUserInformerForTest(indexers cache.Indexers, users ...*User) *Informer[*User] {
	inf := newTestInformer(indexers)
	for _, u := range users {
		_ = inf.store.Add(u)
	}
	return newViewInformer(userView, inf)
}

// NewConfigInformerForTest is a config informer that is never started: tests add objects to it directly.
func NewConfigInformerForTest(objs ...*metav1.PartialObjectMetadata) *Informer[*metav1.PartialObjectMetadata] {
	inf := newTestInformer(nil)
	for _, o := range objs {
		_ = inf.store.Add(o)
	}
	return NewInformer[*metav1.PartialObjectMetadata](inf)
}

// NewForTest builds caches that are never started, holding users and configs, as the controllers'
// unit tests need them. They are built as the controller builds them with the config trigger on:
// AllConfigs holds every config object (reduced to its record as on arrival), Configs is the view of
// the opted-in ones, so every controller's tests run against the widened informers.
func NewForTest(users []*User, configs []*metav1.PartialObjectMetadata) *Caches {
	cs := &Caches{Users: map[Kind]*Informer[*User]{}, Configs: map[refs.Kind]*Informer[*metav1.PartialObjectMetadata]{}}
	byKind := map[Kind][]*User{}
	for _, u := range users {
		byKind[u.Kind()] = append(byKind[u.Kind()], u)
	}
	for _, k := range UserKinds() {
		indexers := UserIndexers()
		if k == Pod {
			indexers = nil // as New builds the Pod informer
		}
		cs.Users[k] = newUserInformerForTest(indexers, byKind[k]...)
	}
	r := newReducer(nil, false, true)
	for _, k := range refs.Kinds() {
		inf := newTestInformer(snapshotIndexers(k))
		for _, m := range configs {
			if m.Kind == string(k) {
				_ = inf.store.Add(r.config(m.DeepCopy(), keepForTrigger))
			}
		}
		cs.Configs[k] = newViewInformer(configView(k), inf)
	}
	cs.widen()
	return cs
}

// UsersUsing returns the cached users of a kind in namespace whose pods or pod template reference r.
// Each record is looked at before a User is made of it: a config event asks this of every revision
// kind of its namespace, and a namespace may hold hundreds of revisions and pods.
func (c *Caches) UsersUsing(kind Kind, namespace string, r refs.Ref) ([]*User, error) {
	letter, ok := kindLetters[r.Kind]
	if !ok {
		letter = '?'
	}
	item := string(letter) + r.Name
	return c.usersWhere(kind, namespace, func(stored any) bool {
		switch o := stored.(type) {
		case *entry:
			return o.refs.has(item)
		case *podStub:
			if o.own != nil {
				return o.own.has(item)
			}
			return o.owner.refs.has(item)
		}
		return true
	}, Using(r))
}

// UsersControlledBy returns the cached users of a kind in namespace whose controller has uid,
// looking at each record first (UsersUsing).
func (c *Caches) UsersControlledBy(kind Kind, namespace string, uid types.UID) ([]*User, error) {
	return c.usersWhere(kind, namespace, func(stored any) bool {
		switch o := stored.(type) {
		case *entry:
			return o.owner != nil && o.owner.uid.is(uid)
		case *podStub:
			return o.owner.uid.is(uid)
		}
		return true
	}, ControlledBy(uid))
}

// usersWhere returns the users of a kind in namespace whose record passes pre and whose view match.
func (c *Caches) usersWhere(kind Kind, namespace string, pre func(any) bool, match func(*User) bool) ([]*User, error) {
	inf, ok := c.Users[kind]
	if !ok {
		return nil, nil
	}
	return inf.inNamespace(namespace, pre, match)
}

// UsersOf returns every cached object, of any kind, whose pods or pod template reference r, and the
// cached objects the given owner references name (the revisions a pinning snapshot belongs to, which
// need it while they exist, pods or not).
func (c *Caches) UsersOf(namespace string, r refs.Ref, owners ...metav1.OwnerReference) ([]*User, error) {
	var out []*User
	var errs []error
	for _, kind := range UserKinds() {
		us, err := c.UsersUsing(kind, namespace, r)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, us...)
	}
	for _, o := range owners {
		inf, ok := c.Users[Kind(o.Kind)]
		if !ok {
			continue
		}
		u, exists, err := inf.Get(namespace, o.Name)
		if err != nil {
			errs = append(errs, err)
		}
		if exists && u.UID == o.UID {
			out = append(out, u)
		}
	}
	return out, errors.Join(errs...)
}

// EachRevision calls fn for every cached object of kind that may be a revision of its own. A pod with
// a controller is none (its controller's revision reads the config): its record is passed over before
// a view is made of it, as 150,000 Users would be made for nothing at 150,000 Pods.
func (c *Caches) EachRevision(kind Kind, fn func(*User)) {
	inf, ok := c.Users[kind]
	if !ok {
		return
	}
	for _, s := range inf.informers {
		for _, o := range s.GetIndexer().List() {
			if _, controlled := o.(*podStub); controlled {
				continue
			}
			if u, ok := inf.shows(o); ok {
				fn(u)
			}
		}
	}
}

// OwnedConfigs returns the cached opted-in objects of a kind in namespace among whose owners is uid:
// what a revision owns. Each object's record is looked at before any view is made of it: a sync of
// each of a cluster's ~100,000 revisions asks, and each namespace holds dozens of config objects.
func (c *Caches) OwnedConfigs(kind refs.Kind, namespace string, uid types.UID) ([]*metav1.PartialObjectMetadata, error) {
	inf, ok := c.Configs[kind]
	if !ok {
		return nil, nil
	}
	return inf.inNamespace(namespace, func(stored any) bool {
		rec, ok := stored.(*configRecord)
		return !ok || slices.ContainsFunc(rec.owners, func(l ownerLink) bool { return l.id.uid.is(uid) })
	}, func(m *metav1.PartialObjectMetadata) bool { return revision.OwnedBy(&m.ObjectMeta, uid) })
}

// ConfigFacts is what a look at every cached config object reads of each (the protection metrics at
// every scrape, its periodic look at held deletions): read from the object's record, with no view made
// of it. At 150,000 Pods the caches hold ~87,000 objects; a view of each, for each of three gauges,
// made every scrape allocate ~100 MB, and the bench's scrapes every 100 ms held our attaches back.
type ConfigFacts struct {
	Kind       refs.Kind
	Key        string // namespace/name
	Finalizers []string
	Deleted    *metav1.Time // the deletionTimestamp
}

// NamespaceName splits the key, for the few facts that need it (a scan's other objects do not).
func (f ConfigFacts) NamespaceName() (namespace, name string) { return splitKey(f.Key) }

// EachConfig calls fn with the facts of every cached opted-in object of every kind (with the config
// trigger the stores hold every object, and Configs' views only the opted-in: so does this). fn runs
// under its store's read lock: it must not call the caches.
func (c *Caches) EachConfig(fn func(ConfigFacts)) {
	for kind, inf := range c.Configs {
		for _, src := range inf.informers {
			visit := func(o any) {
				switch r := o.(type) {
				case *configRecord:
					if !api.OptedIn(r.labels) {
						return
					}
					f := ConfigFacts{Kind: kind, Key: r.key, Deleted: r.deleted}
					if r.finalizers != nil {
						f.Finalizers = *r.finalizers
					}
					fn(f)
				case *metav1.PartialObjectMetadata:
					if !api.OptedIn(r.Labels) {
						return
					}
					fn(ConfigFacts{Kind: kind, Key: r.Namespace + "/" + r.Name, Finalizers: r.Finalizers, Deleted: r.DeletionTimestamp})
				}
			}
			if s, ok := src.GetIndexer().(*store); ok {
				s.each(visit)
				continue
			}
			for _, o := range src.GetIndexer().List() {
				visit(o)
			}
		}
	}
}

// CountConfigs counts the cached opted-in objects of every kind that match.
func (c *Caches) CountConfigs(match func(ConfigFacts) bool) int {
	n := 0
	c.EachConfig(func(f ConfigFacts) {
		if match(f) {
			n++
		}
	})
	return n
}
