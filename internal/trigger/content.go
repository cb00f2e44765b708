package trigger

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// contents are the content hashes of the config objects workloads follow. The caches hold config
// objects as metadata only, so an object's data is read from the API server, and only when its
// resourceVersion changed since the last read and a workload follows it; a pinned object's data is
// already in the pinning cache and is hashed from there.
type contents struct {
	kube kubernetes.Interface
	pins *caches.Pinning // may be nil

	mu   sync.Mutex
	memo map[string]memo // objectKey -> hash
}

type memo struct {
	// rv is the resourceVersion the hash was taken at; seen the one the cache showed when it was read
	// (the API server may have answered with a newer one).
	rv, seen string
	hash     string
}

func newContents(kube kubernetes.Interface, pins *caches.Pinning) *contents {
	return &contents{kube: kube, pins: pins, memo: map[string]memo{}}
}

// objectKey names a config object of a namespace in records and messages: "ConfigMap/app-config".
func objectKey(kind refs.Kind, name string) string { return string(kind) + "/" + name }

func memoKey(kind refs.Kind, ns, name string) string { return ns + "/" + objectKey(kind, name) }

// hash returns the content hash of the object the cache shows as m.
func (c *contents) hash(ctx context.Context, kind refs.Kind, m *metav1.PartialObjectMetadata) (string, error) {
	key := memoKey(kind, m.Namespace, m.Name)
	c.mu.Lock()
	got, ok := c.memo[key]
	c.mu.Unlock()
	if ok && (got.rv == m.ResourceVersion || got.seen == m.ResourceVersion) {
		return got.hash, nil
	}
	obj, rv, err := c.read(ctx, kind, m)
	if err != nil {
		return "", err
	}
	h, err := content.Of(obj)
	if err != nil {
		return "", err
	}
	c.mu.Lock()
	c.memo[key] = memo{rv: rv, seen: m.ResourceVersion, hash: h}
	c.mu.Unlock()
	return h, nil
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
