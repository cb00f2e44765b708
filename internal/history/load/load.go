// Package load reads what package history models from the API server: a workload with its
// ReplicaSets, and the config objects they reference (metadata only for history, with content for diff).
package load

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Resolve reads the workload and its ReplicaSets straight from the API server.
func Resolve(ctx context.Context, c *kube.Clients, ref workload.Ref) (*workload.Resolved, error) {
	res, err := workload.Resolve(ctx, workload.ClientSource{Kube: c.Kube, Dynamic: c.Dynamic}, ref)
	if errors.Is(err, workload.ErrNotFound) {
		return nil, fmt.Errorf("%w (check the name and the namespace, -n)", err)
	}
	return res, kube.Explain(err)
}

// Read reads the config objects named; absent ones are left out of the result. With content it reads
// ConfigMaps and Secrets whole (diff); without, only their metadata (history), so history never reads
// a Secret value.
func Read(ctx context.Context, c *kube.Clients, namespace string, wanted []refs.Ref, content bool) (history.Objects, error) {
	objs := history.Objects{}
	for _, r := range wanted {
		o, err := get(ctx, c, namespace, r, content)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, kube.Explain(fmt.Errorf("reading %s %s/%s: %w", r.Kind, namespace, r.Name, err))
		}
		objs.Add(o)
	}
	return objs, nil
}

func get(ctx context.Context, c *kube.Clients, ns string, r refs.Ref, content bool) (*history.Object, error) {
	if !content {
		gvr := schema.GroupVersionResource{Version: "v1", Resource: r.Kind.Resource()}
		m, err := c.Metadata.Resource(gvr).Namespace(ns).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return history.FromMetadata(r.Kind, m), nil
	}
	switch r.Kind {
	case refs.ConfigMap:
		cm, err := c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return history.FromConfigMap(cm), nil
	case refs.Secret:
		s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, r.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		return history.FromSecret(s), nil
	}
	return nil, fmt.Errorf("%s is not a config kind", r.Kind)
}
