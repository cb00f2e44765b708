package caches

import (
	"slices"
	"strings"
	"sync"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// An identity is what every cached object naming one object shares of it: a Pod of its ReplicaSet, a
// ReplicaSet of its Deployment, a config object of each of its owners, and the object itself. It holds
// what they all name (apiVersion, kind, namespace/name, uid: the object's store key, which the name is
// a part of, and a reference to it) and one list of config references, the first seen among it and its
// dependents: a ReplicaSet's pods read what its template names, so most of them need no list of their
// own. With 150,000 Pods every copy of these is tens of MiB. Nothing may modify an identity once an
// object holding it is cached, refs excepted (set once, under identities.mu, before anything that
// shares them is cached).
type identity struct {
	key              string
	uid              compactUID
	apiVersion, kind unique.Handle[string]
	refs             refList
	refsSet          bool
}

func newIdentity(apiVersion, kind, namespace, name string, uid types.UID) *identity {
	return &identity{key: namespace + "/" + name, uid: makeUID(uid), apiVersion: unique.Make(apiVersion), kind: unique.Make(kind)}
}

func (id *identity) namespace() string { ns, _ := splitKey(id.key); return ns }

func (id *identity) name() string { _, name := splitKey(id.key); return name }

// reference is the reference to the object, as a controller's: what a pod's Owner holds.
func (id *identity) reference() *metav1.OwnerReference {
	yes := true
	return &metav1.OwnerReference{APIVersion: id.apiVersion.Value(), Kind: id.kind.Value(), Name: id.name(), UID: id.uid.get(), Controller: &yes}
}

// names reports whether id is the identity of the object ref names in namespace.
func (id *identity) names(namespace string, ref *metav1.OwnerReference) bool {
	ns, name := splitKey(id.key)
	return name == ref.Name && ns == namespace && id.kind.Value() == ref.Kind && id.apiVersion.Value() == ref.APIVersion && id.uid.is(ref.UID)
}

// identities hand out identities so that one object's is shared whichever of it and the objects naming
// it arrives first. Every informer starts at once, so while the caches make their first lists a pod
// often arrives before its ReplicaSet, a config object before its owners: starting holds, by uid, the
// identity of every object seen or named so far. Once every informer has synced it is dropped, and an
// object finds the identity of what it names in the cache of that kind (cached), where, from then on,
// it nearly always is already (a ReplicaSet is created, and seen, before its pods). An identity not
// found is made for the one object, and shares nothing.
type identities struct {
	mu       sync.Mutex
	starting map[types.UID]*identity
	// cached returns the identity of the cached object key ("namespace/name") of a kind, nil if none.
	cached func(kind Kind, key string) *identity
}

func newIdentities(cached func(Kind, string) *identity) *identities {
	return &identities{starting: map[types.UID]*identity{}, cached: cached}
}

// settle drops what the caches' first lists needed: called once every informer has synced.
func (t *identities) settle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.starting = nil
}

// self returns the identity of an object of kind arriving in its cache: the one its earlier version,
// or during the first lists an object naming it, holds.
func (t *identities) self(apiVersion string, kind Kind, meta *metav1.ObjectMeta) *identity {
	if t == nil {
		return newIdentity(apiVersion, string(kind), meta.Namespace, meta.Name, meta.UID)
	}
	ref := metav1.OwnerReference{APIVersion: apiVersion, Kind: string(kind), Name: meta.Name, UID: meta.UID}
	if id := t.cached(kind, meta.Namespace+"/"+meta.Name); id != nil && id.names(meta.Namespace, &ref) {
		return id
	}
	return t.lookup(meta.Namespace, &ref, false)
}

// of returns the identity of the object a reference names (a controller, an owner) from namespace.
func (t *identities) of(namespace string, ref *metav1.OwnerReference) *identity {
	if t == nil {
		return newIdentity(ref.APIVersion, ref.Kind, namespace, ref.Name, ref.UID)
	}
	return t.lookup(namespace, ref, true)
}

func (t *identities) lookup(namespace string, ref *metav1.OwnerReference, tryCache bool) *identity {
	t.mu.Lock()
	starting := t.starting
	if starting != nil {
		if id, ok := starting[ref.UID]; ok && id.names(namespace, ref) {
			t.mu.Unlock()
			return id
		}
	}
	t.mu.Unlock()
	if tryCache && isUserKind(ref.Kind) {
		if id := t.cached(Kind(ref.Kind), namespace+"/"+ref.Name); id != nil && id.names(namespace, ref) {
			return id
		}
	}
	id := newIdentity(ref.APIVersion, ref.Kind, namespace, ref.Name, ref.UID)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.starting == nil {
		return id
	}
	if other, ok := t.starting[ref.UID]; ok && other.names(namespace, ref) {
		return other // made by another informer meanwhile
	}
	t.starting[ref.UID] = id
	return id
}

// share returns the list an object referencing used keeps: id's when it is the same, which it becomes
// when id has none yet and claim is set (an object or its pods may claim their own identity's and
// their controller's: what the pods of a ReplicaSet read is what it names; a revision does not claim its
// workload's, which may name a newer revision's config).
func (t *identities) share(id *identity, used refList, claim bool) (refList, bool) {
	if id == nil {
		return used, false
	}
	if t != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
	}
	if !id.refsSet {
		if !claim {
			return used, false
		}
		id.refs, id.refsSet = used, true
		return used, true
	}
	if id.refs == used {
		return id.refs, true
	}
	return used, false
}

// isUserKind reports whether kind is one the caches hold as Users.
func isUserKind(kind string) bool {
	return slices.Contains(UserKinds(), Kind(kind))
}

// splitKey splits a store key "namespace/name".
func splitKey(key string) (namespace, name string) {
	ns, name, _ := strings.Cut(key, "/")
	return ns, name
}
