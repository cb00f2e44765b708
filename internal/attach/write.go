package attach

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/util/retry"

	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// FieldManager names our writes in managedFields and audit logs.
const FieldManager = "configmap-attacher"

// EventSink records that an object was attached; failures there never fail an attach.
type EventSink interface {
	Attached(ctx context.Context, obj *metav1.PartialObjectMetadata, kind refs.Kind, message string)
}

// Writer writes changes through the metadata client: we never need, and never send, config data.
type Writer struct {
	Client metadata.Interface
	Events EventSink // optional
}

// GVR returns the API resource of a config kind.
func GVR(kind refs.Kind) schema.GroupVersionResource {
	return schema.GroupVersionResource{Version: "v1", Resource: kind.Resource()}
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

// Apply writes the changes, several at once (one ReplicaSet's objects are independent writes, and
// under load each PATCH waits on the API server), and returns those it actually wrote plus the first
// error. A change whose object gained the reference meanwhile (another attacher) costs no write.
func (w *Writer) Apply(ctx context.Context, changes []Change) ([]Change, error) {
	const parallel = 4
	var (
		mu       sync.Mutex
		written  []Change
		firstErr error
		wg       sync.WaitGroup
		slots    = make(chan struct{}, parallel)
	)
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
			case err != nil && firstErr == nil:
				firstErr = err
			case wrote:
				written = append(written, c)
			}
		}()
	}
	wg.Wait()
	return written, firstErr
}

func (w *Writer) apply(ctx context.Context, c Change) (bool, error) {
	log := logging.FromContext(ctx).With("object", c.Object.String(), "replicaSet", c.ReplicaSet.Name)
	rv := c.Object.Meta.ResourceVersion
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if rv == "" {
			// Our view was stale: re-read and decide again rather than risk merging into an
			// ownerReference someone else wrote with the same uid.
			fresh, err := w.Client.Resource(GVR(c.Object.Kind)).Namespace(c.Object.Meta.Namespace).
				Get(ctx, c.Object.Meta.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if Owns(&fresh.ObjectMeta, c.ReplicaSet) {
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
		log.Info("attached", "uid", c.ReplicaSet.UID, "revision", workload.Revision(c.ReplicaSet))
		if w.Events != nil {
			w.Events.Attached(ctx, c.Object.Meta, c.Object.Kind, fmt.Sprintf("Attached to ReplicaSet %s (revision %d)",
				c.ReplicaSet.Name, workload.Revision(c.ReplicaSet)))
		}
	}
	return wrote, nil
}

// patch sends a strategic merge patch: ownerReferences merge by uid, so other owners stay. The
// resourceVersion makes it conditional: we only add a reference we saw absent at that version, which
// guarantees we never rewrite an existing entry with the same uid.
func (w *Writer) patch(ctx context.Context, c Change, rv string, dryRun bool) (*metav1.PartialObjectMetadata, error) {
	meta := map[string]any{"ownerReferences": []metav1.OwnerReference{OwnerReference(c.ReplicaSet)}}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	opts := metav1.PatchOptions{FieldManager: FieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := w.Client.Resource(GVR(c.Object.Kind)).Namespace(c.Object.Meta.Namespace).
		Patch(ctx, c.Object.Meta.Name, types.StrategicMergePatchType, body, opts)
	if err != nil {
		return nil, fmt.Errorf("patching %s: %w", c.Object, err)
	}
	logging.FromContext(ctx).Debug("patched", "object", c.Object.String(), "dryRun", dryRun, slog.String("patch", string(body)))
	return out, nil
}
