package protection

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/parallel"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// eachObject calls fn for every ConfigMap and Secret (of kinds) in namespaces ("" is all) that selector
// (a label selector, "" for every object) selects, read page by page through the metadata API: no
// data, and never the whole list in memory at once.
func eachObject(ctx context.Context, w *attach.Writer, namespaces []string, kinds []refs.Kind, selector string,
	fn func(refs.Kind, *metav1.PartialObjectMetadata) error) error {
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var errs []error
	for _, ns := range namespaces {
		for _, kind := range kinds {
			p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
				return w.Client.Resource(kind.GVR()).Namespace(ns).List(ctx, opts)
			})
			err := p.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(obj runtime.Object) error {
				m, ok := obj.(*metav1.PartialObjectMetadata)
				if !ok {
					return fmt.Errorf("listing %s: got a %T", kind.Resource(), obj)
				}
				if err := fn(kind, m); err != nil {
					errs = append(errs, err)
				}
				return nil
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("listing %s in %q: %w", kind.Resource(), ns, err))
			}
		}
	}
	return errors.Join(errs...)
}

// notOptedIn selects the objects api.OptedIn does not: without our label, or with another value.
const notOptedIn = api.RevisionedLabel + "!=" + api.RevisionedValue

// releaseWorkers patch at once: one at a time, a remote API server's latency, not the rate limit,
// would set the pace.
const releaseWorkers = 8

// Release takes our finalizer off every ConfigMap and Secret in namespaces ("" is all), so that nothing
// waits on a controller that is gone: what uninstall does. ownerReferences stay: they are the garbage
// collector's, and still true. With dryRun it only reports. It returns how many objects it released.
// Its pace is the client's rate limit (-kube-api-qps).
func Release(ctx context.Context, w *attach.Writer, namespaces []string, kinds []refs.Kind, dryRun bool, out io.Writer) (int, error) {
	f := Finalizers{Client: w.Client}
	var mu sync.Mutex // out
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format, args...)
	}
	g := parallel.New(releaseWorkers)
	n := 0
	err := eachObject(ctx, w, namespaces, kinds, "", func(kind refs.Kind, m *metav1.PartialObjectMetadata) error {
		if !api.HasFinalizer(m.Finalizers, api.InUseFinalizer) {
			return nil
		}
		n++ // eachObject calls one object at a time
		state := ""
		if m.DeletionTimestamp != nil {
			state = " (being deleted: it goes now)"
		}
		if dryRun {
			say("would release %s %s/%s%s\n", kind, m.Namespace, m.Name, state)
			return nil
		}
		g.Go(func() error {
			if err := ignoreGone(f.Remove(ctx, kind, m.Namespace, m.Name, "")); err != nil {
				return err
			}
			say("released %s %s/%s%s\n", kind, m.Namespace, m.Name, state)
			return nil
		})
		return nil
	})
	return n, errors.Join(g.Wait(), err)
}

// Sweep undoes what we wrote on objects that were opted out while no controller ran: their label is
// gone, so the label-selected caches never show them. Our finalizer is the proof an object was opted in:
// an unlabelled object with our ownerReferences and no finalizer may have been attached by the Job mode
// (which attaches named objects whatever their labels) or under attach-all, and keeps them.
// Run once when the caches have synced. The API server lists only objects not opted in: at 150,000
// Pods of the scale benchmark's mix the opted-in ones are 7 in 10 of ~130,000, whose metadata a leader
// decoded as it started, at the start's peak of memory.
func Sweep(ctx context.Context, w *attach.Writer, namespaces []string, kinds []refs.Kind) error {
	f := Finalizers{Client: w.Client}
	n := 0
	err := eachObject(ctx, w, namespaces, kinds, notOptedIn, func(kind refs.Kind, m *metav1.PartialObjectMetadata) error {
		if api.OptedIn(m.Labels) || !api.HasFinalizer(m.Finalizers, api.InUseFinalizer) {
			return nil
		}
		n++
		return optOut(ctx, w, f, kind, m)
	})
	logging.FromContext(ctx).Info("swept objects opted out while the controller was away", "released", n)
	return err
}
