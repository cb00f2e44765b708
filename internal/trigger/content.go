package trigger

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// contents are the content hashes of what workloads read of the config objects they follow. The
// caches hold config objects as metadata only, so an object's data is read from the API server, and
// only when its resourceVersion changed since the last read and a workload follows it; a pinned
// object's data is already in the pinning cache and is hashed from there.
type contents struct {
	kube kubernetes.Interface
	pins *caches.Pinning // may be nil

	mu   sync.Mutex
	memo map[string]memo // memoKey -> hashes of that version
	// snaps are the hashes of keys of snapshots (read from the API server: the snapshot cache is
	// metadata only), by namespace/objectKey of the snapshot; a snapshot's content never changes.
	snaps map[string]string
}

type memo struct {
	rv     string            // the resourceVersion the hashes were taken at
	hashes map[string]string // by the keys read (keysKey); not the data: the memory it takes is ours
}

func newContents(kube kubernetes.Interface, pins *caches.Pinning) *contents {
	return &contents{kube: kube, pins: pins, memo: map[string]memo{}, snaps: map[string]string{}}
}

// errCacheBehind: the API server holds a newer version of a config object than the cache shows; its
// event is on the way. Deciding from the newer content before that event would misplace the change
// in the order of events (seen), so the sync waits for it.
var errCacheBehind = errors.New("the config cache is behind the API server")

// objectKey names what a workload reads of a config object in records and messages:
// "ConfigMap/app-config" (the whole object), "ConfigMap/app-config[a,b]" (keys a and b only).
func objectKey(kind refs.Kind, name string, keys []string) string {
	return refs.Read{Ref: refs.Ref{Kind: kind, Name: name}, Keys: keys}.String()
}

func memoKey(kind refs.Kind, ns, name string) string { return ns + "/" + string(kind) + "/" + name }

func keysKey(keys []string) string {
	if keys == nil {
		return "*"
	}
	return strings.Join(keys, ",")
}

// hash returns the content hash of keys (nil: all) of the object the cache shows as m.
func (c *contents) hash(ctx context.Context, kind refs.Kind, m *metav1.PartialObjectMetadata, keys []string) (string, error) {
	key, kk := memoKey(kind, m.Namespace, m.Name), keysKey(keys)
	c.mu.Lock()
	got, ok := c.memo[key]
	if ok && got.rv == m.ResourceVersion {
		if h, ok := got.hashes[kk]; ok {
			c.mu.Unlock()
			return h, nil
		}
	}
	c.mu.Unlock()
	obj, rv, err := c.read(ctx, kind, m)
	if err != nil {
		return "", err
	}
	if rv != m.ResourceVersion {
		return "", fmt.Errorf("%w: %s %s/%s is at resourceVersion %s, the cache at %s", errCacheBehind, kind, m.Namespace, m.Name, rv, m.ResourceVersion)
	}
	h, err := content.OfKeys(obj, keys)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if got, ok = c.memo[key]; !ok || got.rv != rv {
		got = memo{rv: rv, hashes: map[string]string{}}
	}
	got.hashes[kk] = h
	c.memo[key] = got
	return h, nil
}

// snapshotKeys returns the content hash of keys of snapshot name (a ConfigMap or Secret of ours).
func (c *contents) snapshotKeys(ctx context.Context, kind refs.Kind, ns, name string, keys []string) (string, error) {
	key := ns + "/" + objectKey(kind, name, keys)
	c.mu.Lock()
	h, ok := c.snaps[key]
	c.mu.Unlock()
	if ok {
		return h, nil
	}
	obj, _, err := c.read(ctx, kind, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	if err != nil {
		return "", err
	}
	if h, err = content.OfKeys(obj, keys); err != nil {
		return "", err
	}
	c.mu.Lock()
	c.snaps[key] = h
	c.mu.Unlock()
	return h, nil
}

// forgetSnapshot drops what is known of a deleted snapshot.
func (c *contents) forgetSnapshot(kind refs.Kind, ns, name string) {
	prefix := ns + "/" + string(kind) + "/" + name + "["
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.snaps {
		if strings.HasPrefix(k, prefix) {
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
