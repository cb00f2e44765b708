package attach

import (
	"context"
	"encoding/json"
	"errors"
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

// Apply writes the changes and returns those it wrote and those whose object was deleted meanwhile
// (nothing left to attach). Every other failure is returned, joined: one object's transient error must
// not hide behind another's success or disappearance. A change whose object gained the reference
// meanwhile (another attacher) costs no write and is in neither list.
func (w *Writer) Apply(ctx context.Context, changes []Change) (written, gone []Change, err error) {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	slots := make(chan struct{}, applyParallelism)
	for _, c := range changes {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			wrote, err := w.apply(ctx, c)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case apierrors.IsNotFound(err):
				gone = append(gone, c)
			case err != nil:
				errs = append(errs, err)
			case wrote:
				written = append(written, c)
			}
		}()
	}
	wg.Wait()
	return written, gone, errors.Join(errs...)
}

func (w *Writer) apply(ctx context.Context, c Change) (bool, error) {
	log := logging.FromContext(ctx).With("object", c.Object.String(), "revision", c.Revision.String())
	rv := c.Object.Meta.ResourceVersion
	wrote := false
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
			rv = fresh.ResourceVersion
		}
		_, err := w.patch(ctx, c, rv, false)
		if apierrors.IsConflict(err) {
			rv = ""
			return err
		}
		if err != nil {
			return err
		}
		wrote = true
		return nil
	})
	if err != nil {
		return false, err
	}
	if wrote {
		log.Info("attached", "uid", c.Revision.UID, "revisionNumber", c.Revision.Number)
		if w.Events != nil {
			w.Events.Attached(ctx, c.Object, "Attached to "+c.Revision.Describe())
		}
	}
	return wrote, nil
}

// patch sends a strategic merge patch: ownerReferences merge by uid, so other owners stay. The
// resourceVersion makes it conditional: we only add a reference we saw absent at that version, which
// guarantees we never rewrite an existing entry with the same uid.
func (w *Writer) patch(ctx context.Context, c Change, rv string, dryRun bool) (*metav1.PartialObjectMetadata, error) {
	meta := map[string]any{"ownerReferences": []metav1.OwnerReference{c.Revision.OwnerReference()}}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: api.FieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := w.Client.Resource(c.Object.Kind.GVR()).Namespace(c.Object.Meta.Namespace).
		Patch(ctx, c.Object.Meta.Name, types.StrategicMergePatchType, body, opts)
	if err != nil {
		return nil, fmt.Errorf("patching %s: %w", c.Object, err)
	}
	logging.FromContext(ctx).Debug("patched", "object", c.Object.String(), "dryRun", dryRun, slog.String("patch", string(body)))
	return out, nil
}
