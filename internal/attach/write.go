package attach

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/retry"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/parallel"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Writer writes changes through the metadata client: we never need, and never send, config data.
type Writer struct {
	Client metadata.Interface
	Events EventSink // optional
}

// Validate sends every change as a server-side dry run, so RBAC, admission plugins (e.g.
// OwnerReferencesPermissionEnforcement) and webhooks get their say before anything is written. It
// checks permission, not concurrency: without a resourceVersion, another attacher writing meanwhile
// does not fail it (Apply handles that race).
func (w *Writer) Validate(ctx context.Context, changes []Change) error {
	for _, c := range changes {
		if _, err := w.patch(ctx, c, "", true); err != nil {
			return err
		}
	}
	return nil
}

// applyParallelism bounds the PATCHes in flight for one revision: its objects are independent writes,
// and under load each waits on the API server.
const applyParallelism = 4

// write writes the changes and sorts them into r: written, gone (the object was deleted meanwhile:
// nothing left to attach) or dropped (a re-read shows the object no longer wanted). Every other failure
// is returned, joined: one object's transient error must not hide behind another's success or
// disappearance. A change whose object gained the reference meanwhile (another attacher) costs no
// write and is in no list.
func (w *Writer) write(ctx context.Context, changes []Change, wanted func(*metav1.PartialObjectMetadata) bool, r *Result) error {
	var mu sync.Mutex // r
	g := parallel.New(applyParallelism)
	for _, c := range changes {
		g.Go(func() error {
			outcome, written, err := w.apply(ctx, c, wanted)
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				r.Gone = append(r.Gone, c)
			case outcome == wrote:
				c.Object.Meta = written
				r.Written = append(r.Written, c)
			case outcome == unwanted:
				r.Dropped = append(r.Dropped, c)
			}
			return nil
		})
	}
	return g.Wait()
}

// outcome of one change.
type outcome int

const (
	unchanged outcome = iota // someone else attached it meanwhile
	wrote
	unwanted // the re-read object is no longer one to attach
)

// apply writes one change, and returns the object as the API server returned it when it wrote.
func (w *Writer) apply(ctx context.Context, c Change, wanted func(*metav1.PartialObjectMetadata) bool) (outcome, *metav1.PartialObjectMetadata, error) {
	log := logging.FromContext(ctx).With("object", c.Object.String(), "revision", c.Revision.String())
	rv := c.Object.Meta.ResourceVersion
	result := unchanged
	var out *metav1.PartialObjectMetadata
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if rv == "" {
			// Our view was stale: re-read and decide again rather than risk merging into an
			// ownerReference someone else wrote with the same uid.
			fresh, err := w.Client.Resource(c.Object.Kind.GVR()).Namespace(c.Object.Meta.Namespace).
				Get(ctx, c.Object.Meta.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if revision.OwnedBy(&fresh.ObjectMeta, c.Revision.UID) {
				log.Debug("already attached by someone else")
				return nil
			}
			if wanted != nil && !wanted(fresh) {
				// Opted out (or being deleted) since we planned: the plan no longer holds.
				log.Info("not attaching: the object changed and is no longer opted in")
				result = unwanted
				return nil
			}
			rv = fresh.ResourceVersion
		}
		patched, err := w.patch(ctx, c, rv, false)
		if apierrors.IsConflict(err) {
			rv = ""
			return err
		}
		if err != nil {
			return err
		}
		result, out = wrote, patched
		return nil
	})
	if err != nil {
		return unchanged, nil, err
	}
	if result == wrote {
		log.Info("attached", "uid", c.Revision.UID, "revisionNumber", c.Revision.Number)
		if w.Events != nil {
			w.Events.Attached(ctx, c.Object, "Attached to "+c.Revision.Describe())
		}
	}
	return result, out, nil
}

// patch sends a strategic merge patch: ownerReferences merge by uid, so other owners stay. The
// resourceVersion makes it conditional: we only add a reference we saw absent at that version, which
// guarantees we never rewrite an existing entry with the same uid.
func (w *Writer) patch(ctx context.Context, c Change, rv string, dryRun bool) (*metav1.PartialObjectMetadata, error) {
	meta := map[string]any{"ownerReferences": []metav1.OwnerReference{c.Revision.OwnerReference()}}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	out, err := w.PatchMetadata(ctx, c.Object, meta, dryRun)
	if err != nil {
		return nil, fmt.Errorf("patching %s: %w", c.Object, err)
	}
	return out, nil
}

// PatchMetadata sends {"metadata": meta} to an object as a strategic merge patch under our field
// manager (a server-side dry run when asked): lists with a merge key merge by it (ownerReferences by
// uid), maps by key, and finalizers through $deleteFromPrimitiveList, so nothing another writer set is
// replaced. Every write of ours to a ConfigMap's or Secret's metadata goes through here.
func PatchMetadata(ctx context.Context, client metadata.Interface, kind refs.Kind, namespace, name string, meta map[string]any, dryRun bool) (*metav1.PartialObjectMetadata, error) {
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: api.FieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := client.Resource(kind.GVR()).Namespace(namespace).Patch(ctx, name, types.StrategicMergePatchType, body, opts)
	if err != nil {
		return nil, err
	}
	logging.FromContext(ctx).Debug("patched", "object", fmt.Sprintf("%s %s/%s", kind, namespace, name), "dryRun", dryRun, slog.String("patch", string(body)))
	return out, nil
}

// PatchMetadata is the package function for one of the writer's objects.
func (w *Writer) PatchMetadata(ctx context.Context, o Object, meta map[string]any, dryRun bool) (*metav1.PartialObjectMetadata, error) {
	return PatchMetadata(ctx, w.Client, o.Kind, o.Meta.Namespace, o.Meta.Name, meta, dryRun)
}
