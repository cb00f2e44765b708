// Package load reads what package history models from the API server: a workload with its
// ReplicaSets, and the config objects they reference (metadata only for history, with content for diff).
// With zero-touch pinning it also finds the snapshots each revision's pods read, and hashes a pinned
// object's content to tell whether it drifted from them.
package load

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/history"
	"github.com/configmap-attacher/configmap-attacher/internal/kube"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// History reads what `history` shows and builds it: the metadata of every object the ReplicaSets
// reference; when some are pinned, the metadata of the namespace's snapshots of that kind (a list:
// nothing else names them); and the content of the pinned objects the current revision reads through
// a snapshot, hashed to detect drift and dropped. No other content, so no other Secret value, is read.
func History(ctx context.Context, c *kube.Clients, res *workload.Resolved) (*history.History, error) {
	ns := res.Ref.Namespace
	objs, err := Read(ctx, c, ns, history.AllConfigRefs(res), false)
	if err != nil {
		return nil, err
	}
	if err := addSnapshots(ctx, c, ns, objs); err != nil {
		return nil, err
	}
	h := history.Build(res, objs)
	wanted := history.DriftRefs(h)
	if len(wanted) == 0 {
		return h, nil
	}
	for _, r := range wanted {
		name, err := liveSnapshot(ctx, c, ns, r)
		if apierrors.IsNotFound(err) {
			continue // deleted since: the table says so on the next run
		}
		if err != nil {
			return nil, kube.Explain(fmt.Errorf("reading %s %s/%s: %w", r.Kind, ns, r.Name, err))
		}
		objs[r].LiveSnapshot = name
	}
	return history.Build(res, objs), nil
}

// Comparison reads what `diff` compares and pairs it: the revisions are chosen first (numbers given,
// or the defaults; live compares with the pinned objects as they are now), then only their objects are
// read with content — for pinned objects, the snapshots the two revisions own.
func Comparison(ctx context.Context, c *kube.Clients, res *workload.Resolved, revisions []int64, live bool) (*history.Comparison, error) {
	ns := res.Ref.Namespace
	pick := func(h *history.History) (*history.Revision, *history.Revision, error) {
		if live {
			return history.SelectLive(h, revisions)
		}
		return history.Select(h, revisions)
	}
	// Select before reading anything: a wrong revision number costs no read.
	h := history.Build(res, nil)
	from, to, err := pick(h)
	if err != nil {
		return nil, err
	}
	objs, err := Read(ctx, c, ns, history.ConfigRefs(from, to), true)
	if err != nil {
		return nil, err
	}
	if len(history.PinnedKinds(objs)) > 0 {
		if err := addSnapshots(ctx, c, ns, objs); err != nil {
			return nil, err
		}
		h = history.Build(res, objs)
		if from, to, err = pick(h); err != nil {
			return nil, err
		}
		snaps, err := Read(ctx, c, ns, history.SnapshotRefs(from, to), true)
		if err != nil {
			return nil, err
		}
		for _, o := range snaps {
			objs.Add(o)
		}
	}
	return history.Compare(h, from, to, objs), nil
}

// addSnapshots adds the metadata of the namespace's snapshots of every kind objs holds a pinned
// object of. Listing needs `list` on that kind; a namespace without pinned objects needs nothing new.
func addSnapshots(ctx context.Context, c *kube.Clients, ns string, objs history.Objects) error {
	for _, kind := range history.PinnedKinds(objs) {
		list, err := c.Metadata.Resource(kind.GVR()).Namespace(ns).List(ctx, metav1.ListOptions{
			LabelSelector: api.SnapshotLabel + "=" + api.SnapshotValue})
		if err != nil {
			return kube.Explain(fmt.Errorf("listing the snapshots (%s) in %s: %w", kind.Resource(), ns, err))
		}
		for i := range list.Items {
			o := history.FromMetadata(kind, &list.Items[i])
			if objs[o.Ref] == nil {
				objs.Add(o)
			}
		}
	}
	return nil
}

// liveSnapshot reads a pinned object whole and returns the name a snapshot of its content gets now,
// computed as the controller computes it; the content goes out of scope with the call.
func liveSnapshot(ctx context.Context, c *kube.Clients, ns string, r refs.Ref) (string, error) {
	var obj metav1.Object
	var err error
	switch r.Kind {
	case refs.ConfigMap:
		obj, err = c.Kube.CoreV1().ConfigMaps(ns).Get(ctx, r.Name, metav1.GetOptions{})
	case refs.Secret:
		obj, err = c.Kube.CoreV1().Secrets(ns).Get(ctx, r.Name, metav1.GetOptions{})
	default:
		return "", fmt.Errorf("%s is not a config kind", r.Kind)
	}
	if err != nil {
		return "", err
	}
	return pinning.SnapshotName(obj)
}

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
