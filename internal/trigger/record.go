package trigger

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/caches"
	"github.com/configmap-attacher/configmap-attacher/internal/content"
)

// The record: what the trigger must remember of a workload across restarts, in a small ConfigMap of
// ours owned by the workload (controller: false, no blockOwnerDeletion), so the garbage collector
// removes it with the workload. Not an annotation on a ReplicaSet (the Deployment controller copies a
// Deployment's annotations onto its ReplicaSets and `kubectl rollout undo` copies a ReplicaSet's back
// onto the Deployment) and not another field of the user's workload. It lives in an annotation of the
// ConfigMap, so the metadata-only config cache holds it and reading it costs no request.
type record struct {
	// Revisions is, per revision uid, the content hash of each followed object (objectKey) the
	// revision was created with, for the objects no snapshot pins: a pinned revision's snapshot names
	// carry its content already.
	Revisions map[types.UID]map[string]string `json:"revisions,omitempty"`
	// Acknowledged is the content of the followed objects as it was when Revision became the newest
	// revision, or when the trigger last started one: a revision is started only for a change since.
	Acknowledged acknowledged `json:"acknowledged"`
}

type acknowledged struct {
	Revision types.UID         `json:"revision,omitempty"`
	Content  map[string]string `json:"content,omitempty"`
}

func (r *record) clone() *record {
	out := &record{Revisions: map[types.UID]map[string]string{}, Acknowledged: acknowledged{Revision: r.Acknowledged.Revision,
		Content: maps.Clone(r.Acknowledged.Content)}}
	for uid, c := range r.Revisions {
		out.Revisions[uid] = maps.Clone(c)
	}
	if out.Acknowledged.Content == nil {
		out.Acknowledged.Content = map[string]string{}
	}
	return out
}

func (r *record) equal(o *record) bool {
	if r.Acknowledged.Revision != o.Acknowledged.Revision || !maps.Equal(r.Acknowledged.Content, o.Acknowledged.Content) ||
		len(r.Revisions) != len(o.Revisions) {
		return false
	}
	for uid, c := range r.Revisions {
		if oc, ok := o.Revisions[uid]; !ok || !maps.Equal(c, oc) {
			return false
		}
	}
	return true
}

func recordName(w *caches.User) string { return RecordName(string(w.Kind()), w.Name) }

// RecordName is the name of the record of a workload of kind: configmap-attacher.<kind>.<workload>,
// shortened with a hash of the whole when that is too long for a ConfigMap name.
func RecordName(kind, workload string) string {
	name := fmt.Sprintf("configmap-attacher.%s.%s", strings.ToLower(kind), workload)
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	h, _ := content.HashJSON(name)
	return content.Name(name, h)
}

// records reads and writes records.
type records struct {
	kube    kubernetes.Interface
	configs *caches.Informer[*metav1.PartialObjectMetadata] // the widened ConfigMap informer
}

// load returns the workload's record from the cache: an empty one if there is none yet, and
// errForeign if a ConfigMap of that name exists that is not the workload's record.
func (rs records) load(w *caches.User) (*record, bool, error) {
	m, exists, err := rs.configs.Get(w.Namespace, recordName(w))
	if err != nil || !exists {
		return (&record{}).clone(), false, err
	}
	if !isRecordOf(m, w) {
		return nil, true, fmt.Errorf("%w: ConfigMap %s/%s exists and is not %s's record (label %s=%s, owned by it): rename it",
			errForeign, w.Namespace, m.Name, describe(w), api.RecordLabel, api.RecordValue)
	}
	r := &record{}
	if v := m.Annotations[api.RecordAnnotation]; v != "" {
		if err := json.Unmarshal([]byte(v), r); err != nil {
			// Someone edited it: start over, as on first sight.
			r = &record{}
		}
	}
	return r.clone(), true, nil
}

func isRecordOf(m *metav1.PartialObjectMetadata, w *caches.User) bool {
	if m.Labels[api.RecordLabel] != api.RecordValue {
		return false
	}
	for _, o := range m.OwnerReferences {
		if o.UID == w.UID {
			return true
		}
	}
	return false
}

// save writes the record: created with its ownerReference, or applied over the version the cache
// shows (a conflict means the cache is behind: the sync is retried). Server-side apply under our
// field manager lists only our label, our annotation and our ownerReference, so nothing another
// writer put on it is touched.
func (rs records) save(ctx context.Context, w *caches.User, r *record, exists bool) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	name := recordName(w)
	owner := ownerOf(w)
	if !exists {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.Namespace,
			Labels:          map[string]string{api.RecordLabel: api.RecordValue},
			Annotations:     map[string]string{api.RecordAnnotation: string(b)},
			OwnerReferences: []metav1.OwnerReference{owner}}}
		_, err := rs.kube.CoreV1().ConfigMaps(w.Namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: api.FieldManager})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the record %s/%s: the cache is behind: %w", w.Namespace, name, err)
		}
		return err
	}
	m, _, err := rs.configs.Get(w.Namespace, name)
	if err != nil {
		return err
	}
	ac := corev1ac.ConfigMap(name, w.Namespace).
		WithResourceVersion(m.ResourceVersion).
		WithLabels(map[string]string{api.RecordLabel: api.RecordValue}).
		WithAnnotations(map[string]string{api.RecordAnnotation: string(b)}).
		WithOwnerReferences(metav1ac.OwnerReference().WithAPIVersion(owner.APIVersion).WithKind(owner.Kind).
			WithName(owner.Name).WithUID(owner.UID).WithController(false))
	_, err = rs.kube.CoreV1().ConfigMaps(w.Namespace).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: api.FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("writing the record %s/%s: %w", w.Namespace, name, err)
	}
	return nil
}

// ownerOf is the ownerReference the record carries: the workload, controller false, no
// blockOwnerDeletion (nothing should wait for it to delete a workload).
func ownerOf(w *caches.User) metav1.OwnerReference {
	no := false
	return metav1.OwnerReference{APIVersion: w.APIVersion, Kind: w.TypeMeta.Kind, Name: w.Name, UID: w.UID, Controller: &no}
}
