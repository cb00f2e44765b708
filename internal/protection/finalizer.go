package protection

import (
	"context"
	"fmt"

	"k8s.io/client-go/metadata"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/attach"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Finalizers adds and removes our finalizer, and only ours: a strategic merge patch merges the
// finalizers list as a set, and $deleteFromPrimitiveList takes out exactly our entry, both conditional
// on the resourceVersion the decision was made from. Never a JSON merge patch or an Update, which
// would rewrite the list.
type Finalizers struct {
	Client metadata.Interface
}

// Add puts our finalizer on the object as it was at resourceVersion rv.
func (f Finalizers) Add(ctx context.Context, kind refs.Kind, namespace, name, rv string) error {
	return f.patch(ctx, kind, namespace, name, map[string]any{"finalizers": []string{api.InUseFinalizer}, "resourceVersion": rv})
}

// Remove takes our finalizer off the object as it was at resourceVersion rv ("" when the caller just
// read it and any version will do).
func (f Finalizers) Remove(ctx context.Context, kind refs.Kind, namespace, name, rv string) error {
	meta := map[string]any{"$deleteFromPrimitiveList/finalizers": []string{api.InUseFinalizer}}
	if rv != "" {
		meta["resourceVersion"] = rv
	}
	return f.patch(ctx, kind, namespace, name, meta)
}

func (f Finalizers) patch(ctx context.Context, kind refs.Kind, namespace, name string, meta map[string]any) error {
	if _, err := attach.PatchMetadata(ctx, f.Client, kind, namespace, name, meta, false); err != nil {
		return fmt.Errorf("patching the finalizers of %s %s/%s: %w", kind, namespace, name, err)
	}
	return nil
}
