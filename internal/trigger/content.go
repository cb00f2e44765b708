package trigger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Content values besides hashes. Neither is ten hex digits, so neither is ever taken for a hash.
const (
	// absentContent is the content of an object the template reads as optional that does not exist:
	// its pods start without it, so its appearing (or going) is a change of what they read.
	absentContent = "absent"
	// unknownContent is what a revision was made with when all that is known is that it was not what
	// the object holds now (an edit reached us after the revision appeared, before we read the version
	// it was made with; a record made with another hash key): never equal to a live content, so the
	// decision errs toward a new revision.
	unknownContent = "?"
)

// contents are the content hashes of what workloads read of the config objects they follow. The
// caches hold config objects as metadata only, so an object's data is read from the API server, and
// only when its resourceVersion changed since the last read and a workload follows it; a pinned
// object's data is already in the pinning cache and is hashed from there. What a workload reads of a
// Secret is hashed with the controller's key (hashKey).
type contents struct {
	kube kubernetes.Interface
	pins *caches.Pinning // may be nil

	mu sync.Mutex
	// memo holds, per object (memoKey), the hashes of its last few versions, oldest first: the
	// version a revision appeared with is looked up there once the object has changed since.
	memo map[string][]memo
	// snaps are the hashes of what is read of snapshots (read from the API server: the snapshot cache
	// is metadata only), by namespace/objectKey of the snapshot; a snapshot's content never changes.
	snaps map[string]string
}

type memo struct {
	rv     string            // the resourceVersion the hashes were taken at
	hashes map[string]string // by what is read (readKey); not the data: the memory it takes is ours
}

// versionsKept is how many versions of an object the memo keeps hashes of.
const versionsKept = 4

func newContents(kube kubernetes.Interface, pins *caches.Pinning) *contents {
	return &contents{kube: kube, pins: pins, memo: map[string][]memo{}, snaps: map[string]string{}}
}

// errCacheBehind: the API server holds a newer version of a config object than the cache shows; its
// event is on the way. Deciding from the newer content before that event would take the version a
// revision appeared with for another, so the sync waits for it.
var errCacheBehind = errors.New("the config cache is behind the API server")

// objectKey names what a workload reads of a config object in records and messages:
// "ConfigMap/app-config" (the whole object), "ConfigMap/app-config[a,b]" (keys a and b only).
func objectKey(kind refs.Kind, name string, keys []string) string {
	return refs.Read{Ref: refs.Ref{Kind: kind, Name: name}, Keys: keys}.String()
}

func memoKey(kind refs.Kind, ns, name string) string { return ns + "/" + string(kind) + "/" + name }

// readKey names what is read of an object for the memo: the keys ("*": all), whether the environment
// alone reads it (a ConfigMap's binaryData then is not read), and for a Secret the id of the key its
// hash is taken with.
func readKey(kind refs.Kind, keys []string, dataOnly bool, kv keyVersion) string {
	k := "*"
	if keys != nil {
		k = strings.Join(keys, ",")
	}
	if dataOnly {
		k = "env:" + k
	}
	if kind == refs.Secret {
		k = kv.id + "/" + k
	}
	return k
}

// hash returns the content hash of what the workload reads of o, as the cache shows it; a Secret's
// keyed with kv.
func (c *contents) hash(ctx context.Context, o followed, kv keyVersion) (string, error) {
	if o.absent {
		return absentContent, nil
	}
	m := o.meta
	key, rk := memoKey(o.kind, m.Namespace, m.Name), readKey(o.kind, o.keys, o.dataOnly, kv)
	if h, ok := c.at(key, m.ResourceVersion, rk); ok {
		return h, nil
	}
	if o.kind == refs.Secret && kv.key == nil {
		return "", fmt.Errorf("%w: no key held with id %q", errKeyUnavailable, kv.id)
	}
	obj, rv, err := c.read(ctx, o.kind, m)
	if err != nil {
		return "", err
	}
	if rv != m.ResourceVersion {
		return "", fmt.Errorf("%w: %s %s/%s is at resourceVersion %s, the cache at %s", errCacheBehind, o.kind, m.Namespace, m.Name, rv, m.ResourceVersion)
	}
	h, err := c.of(o.kind, obj, o.keys, o.dataOnly, kv)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	versions := c.memo[key]
	i := slices.IndexFunc(versions, func(v memo) bool { return v.rv == rv })
	if i < 0 {
		versions = append(versions, memo{rv: rv, hashes: map[string]string{}})
		if len(versions) > versionsKept {
			versions = slices.Delete(versions, 0, len(versions)-versionsKept)
		}
		i = len(versions) - 1
	}
	versions[i].hashes[rk] = h
	c.memo[key] = versions
	return h, nil
}

// at returns the hash, taken earlier, of what rk reads of version rv of the object memoKey names.
func (c *contents) at(key, rv, rk string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range c.memo[key] {
		if v.rv == rv {
			h, ok := v.hashes[rk]
			return h, ok
		}
	}
	return "", false
}

// earlier is the hash of what o reads of the object's version rv (a Secret's keyed with kv), if this
// process took it.
func (c *contents) earlier(o followed, rv string, kv keyVersion) (string, bool) {
	return c.at(memoKey(o.kind, o.meta.Namespace, o.meta.Name), rv, readKey(o.kind, o.keys, o.dataOnly, kv))
}

// of is the content hash of what keys (nil: all) of obj a pod reads: the plain content hash for a
// ConfigMap, keyed with kv for a Secret.
func (c *contents) of(kind refs.Kind, obj runtime.Object, keys []string, dataOnly bool, kv keyVersion) (string, error) {
	read, err := content.Read(obj, keys, dataOnly)
	if err != nil {
		return "", err
	}
	if kind != refs.Secret {
		return content.HashJSON(read)
	}
	if kv.key == nil {
		return "", fmt.Errorf("%w: no key held with id %q", errKeyUnavailable, kv.id)
	}
	return content.KeyedHash(kv.key, read)
}

// keyedAgain is the hash of what o reads now under key kv, read from the API server (or the pinning
// cache): a record made with a key this process held is re-keyed by it.
func (c *contents) keyedAgain(ctx context.Context, o followed, kv keyVersion) (string, error) {
	if o.absent {
		return absentContent, nil
	}
	obj, _, err := c.read(ctx, o.kind, o.meta)
	if err != nil {
		return "", err
	}
	return c.of(o.kind, obj, o.keys, o.dataOnly, kv)
}

// legacy is the hash the records before issue 37 kept of what o reads now: plain, binaryData
// included. A record of then is carried over by it (record.migrate).
func (c *contents) legacy(ctx context.Context, o followed) (string, error) {
	if o.absent {
		return absentContent, nil
	}
	obj, _, err := c.read(ctx, o.kind, o.meta)
	if err != nil {
		return "", err
	}
	return content.OfKeys(obj, o.keys)
}

// snapshot returns the content hash of what o reads of snapshot name (a ConfigMap or Secret of ours;
// a Secret's keyed with kv). A ConfigMap read whole is known by the name (<name>-<content hash>);
// anything else is read, once: a snapshot never changes.
func (c *contents) snapshot(ctx context.Context, o followed, ns, name string, kv keyVersion) (string, error) {
	if o.kind == refs.ConfigMap && o.keys == nil && !o.dataOnly {
		if h, ok := content.HashOfName(name, o.meta.Name); ok {
			return h, nil
		}
	}
	if o.kind == refs.Secret && kv.key == nil {
		return "", fmt.Errorf("%w: no key held with id %q", errKeyUnavailable, kv.id)
	}
	key := ns + "/" + readKey(o.kind, o.keys, o.dataOnly, kv) + "/" + objectKey(o.kind, name, nil)
	c.mu.Lock()
	h, ok := c.snaps[key]
	c.mu.Unlock()
	if ok {
		return h, nil
	}
	obj, _, err := c.read(ctx, o.kind, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	if err != nil {
		return "", err
	}
	if h, err = c.of(o.kind, obj, o.keys, o.dataOnly, kv); err != nil {
		return "", err
	}
	c.mu.Lock()
	c.snaps[key] = h
	c.mu.Unlock()
	return h, nil
}

// forgetSnapshot drops what is known of a deleted snapshot.
func (c *contents) forgetSnapshot(kind refs.Kind, ns, name string) {
	suffix := "/" + objectKey(kind, name, nil)
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.snaps {
		if strings.HasPrefix(k, ns+"/") && strings.HasSuffix(k, suffix) {
			delete(c.snaps, k)
		}
	}
}

// read returns the object with its data: from the pinning cache when it holds that version, else
// from the API server.
func (c *contents) read(ctx context.Context, kind refs.Kind, m *metav1.PartialObjectMetadata) (runtime.Object, string, error) {
	if c.pins != nil {
		if obj, ok := c.pins.Pin(m.Namespace, refs.Ref{Kind: kind, Name: m.Name}); ok {
			if o, ok := obj.(metav1.Object); ok && o.GetResourceVersion() == m.ResourceVersion {
				return obj, m.ResourceVersion, nil
			}
		}
	}
	var obj interface {
		runtime.Object
		GetResourceVersion() string
	}
	var err error
	switch kind {
	case refs.ConfigMap:
		obj, err = c.kube.CoreV1().ConfigMaps(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
	case refs.Secret:
		obj, err = c.kube.CoreV1().Secrets(m.Namespace).Get(ctx, m.Name, metav1.GetOptions{})
	default:
		return nil, "", fmt.Errorf("%s is not a config kind", kind)
	}
	if err != nil {
		return nil, "", fmt.Errorf("reading %s %s/%s: %w", kind, m.Namespace, m.Name, err)
	}
	return obj, obj.GetResourceVersion(), nil
}

// forget drops what is known of a deleted object.
func (c *contents) forget(kind refs.Kind, ns, name string) {
	c.mu.Lock()
	delete(c.memo, memoKey(kind, ns, name))
	c.mu.Unlock()
}
