package attach

import (
	"bytes"
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/logging"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// Written returns the uids of the ownerReferences meta carries that this project alone wrote, as the
// API server recorded in managedFields: an entry another manager also set is theirs too, and stays.
func Written(meta *metav1.ObjectMeta) map[types.UID]bool {
	byManager := map[bool]map[types.UID]bool{true: {}, false: {}}
	for _, mf := range meta.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		set := &fieldpath.Set{}
		if err := set.FromJSON(bytes.NewReader(mf.FieldsV1.Raw)); err != nil {
			continue
		}
		ours := mf.Manager == api.FieldManager
		set.Iterate(func(p fieldpath.Path) {
			if len(p) < 3 || p[0].FieldName == nil || *p[0].FieldName != "metadata" ||
				p[1].FieldName == nil || *p[1].FieldName != "ownerReferences" || p[2].Key == nil {
				return
			}
			for _, f := range *p[2].Key {
				if f.Name == "uid" && f.Value.IsString() {
					byManager[ours][types.UID(f.Value.AsString())] = true
				}
			}
		})
	}
	out := map[types.UID]bool{}
	for uid := range byManager[true] {
		if !byManager[false][uid] {
			out[uid] = true
		}
	}
	return out
}

// Detach removes from an object the ownerReferences this project alone wrote to the given owners, or
// to any owner when none is given, and returns the uids it removed. It re-reads the object (the caches
// drop managedFields) and writes a strategic merge patch deleting by uid, conditional on the version
// read, so a reference someone else wrote meanwhile is never touched. A missing object is no error.
func (w *Writer) Detach(ctx context.Context, kind refs.Kind, namespace, name string, owners ...types.UID) ([]types.UID, error) {
	return w.detach(ctx, kind, namespace, name, false, owners)
}

// DetachUnlessLast is Detach, except that it removes nothing when that would leave the object with no
// ownerReference at all: the garbage collector never deletes an object without owners, so an object
// whose last owner we took back would outlive everything that used it, forever. Kept, it goes with
// that owner.
func (w *Writer) DetachUnlessLast(ctx context.Context, kind refs.Kind, namespace, name string, owners ...types.UID) ([]types.UID, error) {
	return w.detach(ctx, kind, namespace, name, true, owners)
}

func (w *Writer) detach(ctx context.Context, kind refs.Kind, namespace, name string, unlessLast bool, owners []types.UID) ([]types.UID, error) {
	var removed []types.UID
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		removed = nil
		fresh, err := w.Client.Resource(kind.GVR()).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		written := Written(&fresh.ObjectMeta)
		var deletes []map[string]any
		for _, ref := range fresh.OwnerReferences {
			if !written[ref.UID] || (len(owners) > 0 && !containsUID(owners, ref.UID)) {
				continue
			}
			deletes = append(deletes, map[string]any{"$patch": "delete", "uid": ref.UID})
			removed = append(removed, ref.UID)
		}
		if len(deletes) == 0 {
			return nil
		}
		if unlessLast && len(deletes) == len(fresh.OwnerReferences) {
			logging.FromContext(ctx).Debug("kept the last ownerReference", "object", fmt.Sprintf("%s %s/%s", kind, namespace, name))
			removed = nil
			return nil
		}
		_, err = PatchMetadata(ctx, w.Client, kind, namespace, name,
			map[string]any{"resourceVersion": fresh.ResourceVersion, "ownerReferences": deletes}, false)
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("detaching %s %s/%s: %w", kind, namespace, name, err)
	}
	if len(removed) > 0 {
		logging.FromContext(ctx).Info("detached", "object", fmt.Sprintf("%s %s/%s", kind, namespace, name), "owners", removed)
	}
	return removed, nil
}

func containsUID(uids []types.UID, u types.UID) bool {
	for _, x := range uids {
		if x == u {
			return true
		}
	}
	return false
}
