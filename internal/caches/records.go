package caches

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// What the caches store is not what they hand out. Each object is held in the smallest form that
// still says everything a decision reads of it (a podStub, an entry, a configRecord), and readers get
// a User or a PartialObjectMetadata made from it when they read (Informer's view): at 150,000 Pods, a
// form that keeps no field of what nobody reads is what fits the cache in a fraction of the memory.
// A record's name is held once: it is the store's key (see storeKey), and a name is a part of it.
//
// Records are never modified once stored; what they point to (identities, interned maps and lists) is
// shared, and views hand those out as they are: nothing may modify what a view holds either.

// flags of a stored object.
type flags uint8

const (
	// finished: a pod the kubelet is done with (Succeeded or Failed): it reads no config any more.
	finished flags = 1 << iota
	// shutDown: a pod deleted with no grace period left: the kubelet has stopped it.
	shutDown
	// deleting: a pod being deleted (a podStub keeps no time).
	deleting
)

// storeKey is the metadata client-go's store keys an object by: the key func concatenates namespace,
// "/" and name unless the namespace is empty, when it takes the name as it is. Handing it the record's
// key ("namespace/name") as the name, and no namespace, makes the store keep the record's own string
// as its key instead of a copy: with 400,000 objects cached, the second copy of every name is ~15 MiB.
// (The caches' stores are their own, store.go; the key matters to client-go's reflector, whose
// watch-list keeps the objects of its first list in a store of client-go's until the list ends: they
// reach it as records, initial.go.)
func storeKey(key string) metav1.Object { return &metav1.ObjectMeta{Name: key} }

// Records are runtime.Objects because a watch-list's initial events carry them to the reflector
// (initial.go). A record is never modified once made: its copy is itself.

func (p *podStub) GetObjectKind() schema.ObjectKind      { return schema.EmptyObjectKind }
func (p *podStub) DeepCopyObject() runtime.Object        { return p }
func (e *entry) GetObjectKind() schema.ObjectKind        { return schema.EmptyObjectKind }
func (e *entry) DeepCopyObject() runtime.Object          { return e }
func (c *configRecord) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (c *configRecord) DeepCopyObject() runtime.Object   { return c }

// A podStub is a Pod with a controller: what protection and pinning read of it (its controller, the
// config it reads, whether the kubelet still runs it), nothing else. Most pods read what their
// controller's template names: own is then nil and the controller's identity holds the list.
type podStub struct {
	key   string
	uid   compactUID
	owner *identity
	own   *refList
	flags flags
}

func (p *podStub) GetObjectMeta() metav1.Object { return storeKey(p.key) }

var podType = metav1.TypeMeta{APIVersion: "v1", Kind: string(Pod)}

func (p *podStub) user() *User {
	ns, name := splitKey(p.key)
	u := &User{TypeMeta: podType, Namespace: ns, Name: name, UID: p.uid.get(), Owner: p.owner.reference(), Refs: p.owner.refs.refs(),
		Finished: p.flags&finished != 0, ShutDown: p.flags&shutDown != 0}
	if p.own != nil {
		u.Refs = p.own.refs()
	}
	if p.flags&deleting != 0 {
		u.DeletionTimestamp = &metav1.Time{}
	}
	return u
}

// An entry is every other object that uses config: a workload, a revision, a Job or CronJob, a Pod no
// controller manages (which is a revision of its own). What only a few of them carry is in more.
type entry struct {
	id    *identity
	owner *identity // the controller's, nil when none
	// refs share the list of the controller's or the object's identity when they are the same.
	refs       refList
	created    int64 // unix seconds; 0 when unset
	deleted    *metav1.Time
	generation int64
	number     int64
	more       *more
	flags      flags
}

// more is what only some users carry: a ReplicaSet's labels (with -replicaset-selector), the
// attach-all and Reloader annotations, our config-hash on a template, and a workload's reads and status.
type more struct {
	labels, annotations, templateAnnotations map[string]string
	reads                                    []refs.Read
	status                                   *WorkloadStatus
	// resourceVersion is a revision's, in the config trigger's caches only (reducer.revisionVersion).
	resourceVersion string
}

func (e *entry) GetObjectMeta() metav1.Object { return storeKey(e.id.key) }

func (e *entry) user() *User {
	ns, name := splitKey(e.id.key)
	u := &User{TypeMeta: metav1.TypeMeta{APIVersion: e.id.apiVersion.Value(), Kind: e.id.kind.Value()}, Namespace: ns,
		Name: name, UID: e.id.uid.get(), Generation: e.generation, CreationTimestamp: unixTime(e.created),
		DeletionTimestamp: e.deleted, Refs: e.refs.refs(), Number: e.number, Finished: e.flags&finished != 0, ShutDown: e.flags&shutDown != 0}
	if e.owner != nil {
		u.Owner = e.owner.reference()
	}
	if m := e.more; m != nil {
		u.Labels, u.Annotations, u.TemplateAnnotations, u.Reads, u.Status, u.ResourceVersion = m.labels, m.annotations, m.templateAnnotations, m.reads, m.status, m.resourceVersion
	}
	return u
}

func (e *entry) with() *more {
	if e.more == nil {
		e.more = &more{}
	}
	return e.more
}

// A configRecord is an opted-in ConfigMap's or Secret's metadata (or, for the config trigger, any
// one's): of the labels only ours, of the annotations only those a reader needs, each owner as the
// identity it shares with the owner's own cached object.
type configRecord struct {
	key         string
	uid         compactUID
	rv          string
	created     int64
	deleted     *metav1.Time
	labels      map[string]string // interned
	finalizers  *[]string         // interned
	annotations map[string]string
	owners      []ownerLink
}

// ownerLink is one ownerReference of a config object: the owner's identity and its two flags.
type ownerLink struct {
	id                     *identity
	controller, blockOwner tristate
}

// tristate is a *bool's three values: unset, false, true.
type tristate uint8

func tri(b *bool) tristate {
	switch {
	case b == nil:
		return 0
	case *b:
		return 2
	}
	return 1
}

func (c *configRecord) GetObjectMeta() metav1.Object { return storeKey(c.key) }

// meta is the record's view: the metadata of a ConfigMap or Secret (kind), as the metadata informer
// decoded it, less what the transform dropped.
func (c *configRecord) meta(kind refs.Kind) *metav1.PartialObjectMetadata {
	ns, name := splitKey(c.key)
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(kind)}, ObjectMeta: metav1.ObjectMeta{
		Namespace: ns, Name: name, UID: c.uid.get(), ResourceVersion: c.rv, CreationTimestamp: unixTime(c.created), DeletionTimestamp: c.deleted,
		Labels: c.labels, Annotations: c.annotations}}
	if c.finalizers != nil {
		m.Finalizers = *c.finalizers
	}
	if len(c.owners) > 0 {
		m.OwnerReferences = make([]metav1.OwnerReference, len(c.owners))
		for i, o := range c.owners {
			m.OwnerReferences[i] = metav1.OwnerReference{APIVersion: o.id.apiVersion.Value(), Kind: o.id.kind.Value(), Name: o.id.name(),
				UID: o.id.uid.get(), Controller: o.controller.ptr(), BlockOwnerDeletion: o.blockOwner.ptr()}
		}
	}
	return m
}

func (t tristate) ptr() *bool {
	if t == 0 {
		return nil
	}
	b := t == 2
	return &b
}

func unixTime(s int64) metav1.Time {
	if s == 0 {
		return metav1.Time{}
	}
	return metav1.NewTime(time.Unix(s, 0))
}

func unixSeconds(t metav1.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}
