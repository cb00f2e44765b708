package trigger

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
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
	// Written is, per config-hash value we wrote (set, or set back), the content it was written for:
	// the content hash of what the workload reads of each followed object (objectKey). A revision our
	// write makes is known by it, not by a later look; a value on a template that is in here is ours
	// to take back.
	Written map[string]map[string]string `json:"written,omitempty"`
	// Revisions is, per revision uid, what the revision was made with, for the objects no snapshot
	// pins (a pinned revision's snapshot names carry its content already): an entry for every
	// revision the trigger has acknowledged as the newest.
	Revisions map[types.UID]map[string]string `json:"revisions,omitempty"`
	// Acknowledged is the newest revision as last decided and the content then: a revision is started
	// only for a change since.
	Acknowledged acknowledged `json:"acknowledged"`
	// Unpinned are the objects its pods read that no snapshot pins, as last told (ConfigNotPinned).
	Unpinned []string `json:"unpinned,omitempty"`
}

type acknowledged struct {
	// Revision is the newest revision acknowledged; with Wrote, the one our write was made on.
	Revision types.UID `json:"revision,omitempty"`
	// Wrote is our last write on the template until the record is next written: the revision it
	// makes is then the newest, made with Content. Not resolved at once, so a change costs one write
	// of the record.
	Wrote   *wrote            `json:"wrote,omitempty"`
	Content map[string]string `json:"content,omitempty"`
}

// wrote is a write of ours on the pod template: config-hash set to Value (Set) or removed, when the
// newest revision was numbered After; Back is the existing revision it goes back to.
type wrote struct {
	Value string    `json:"value,omitempty"`
	Set   bool      `json:"set"`
	After int64     `json:"after"`
	Back  types.UID `json:"back,omitempty"`
}

// made is the revision the write made, once it appeared: the revision it goes back to, renumbered
// above After; or the first revision numbered above After that carries the value (a later deploy
// keeping our value makes more of them).
func (w *wrote) made(revs []*caches.User) *caches.User {
	var first *caches.User
	for _, r := range revs {
		switch {
		case r.Number <= w.After:
		case w.Back != "":
			if r.UID == w.Back {
				return r
			}
		case w.Set && carries(r, w.Value) && (first == nil || r.Number < first.Number):
			first = r
		}
	}
	return first
}

// carries reports whether a revision's (or a workload's) pod template has config-hash value v.
func carries(u *caches.User, v string) bool {
	got, ok := u.TemplateAnnotations[api.ConfigHashAnnotation]
	return ok && got == v
}

func (r *record) clone() *record {
	out := &record{Written: map[string]map[string]string{}, Revisions: map[types.UID]map[string]string{},
		Acknowledged: acknowledged{Revision: r.Acknowledged.Revision, Content: maps.Clone(r.Acknowledged.Content)},
		Unpinned:     slices.Clone(r.Unpinned)}
	for v, c := range r.Written {
		out.Written[v] = maps.Clone(c)
	}
	for uid, c := range r.Revisions {
		out.Revisions[uid] = maps.Clone(c)
	}
	if w := r.Acknowledged.Wrote; w != nil {
		cp := *w
		out.Acknowledged.Wrote = &cp
	}
	if out.Acknowledged.Content == nil {
		out.Acknowledged.Content = map[string]string{}
	}
	return out
}

func (r *record) equal(o *record) bool {
	a, b := r.Acknowledged, o.Acknowledged
	if a.Revision != b.Revision || !maps.Equal(a.Content, b.Content) || (a.Wrote == nil) != (b.Wrote == nil) ||
		(a.Wrote != nil && *a.Wrote != *b.Wrote) || len(r.Revisions) != len(o.Revisions) || len(r.Written) != len(o.Written) ||
		!slices.Equal(r.Unpinned, o.Unpinned) {
		return false
	}
	for uid, c := range r.Revisions {
		if oc, ok := o.Revisions[uid]; !ok || !maps.Equal(c, oc) {
			return false
		}
	}
	for v, c := range r.Written {
		if oc, ok := o.Written[v]; !ok || !maps.Equal(c, oc) {
			return false
		}
	}
	return true
}

// tidy readies the record for a write: the revision our last write made, if it appeared, is recorded
// as made with what we wrote it for; revisions that are gone are dropped, and values no revision and
// no template carries any more.
func (r *record) tidy(revs []*caches.User, pinned map[string]bool, template *caches.User) {
	if w := r.Acknowledged.Wrote; w != nil {
		if made := w.made(revs); made != nil {
			r.Revisions[made.UID] = unpinned(r.Acknowledged.Content, pinned)
			r.Acknowledged.Revision, r.Acknowledged.Wrote = made.UID, nil
		}
	}
	for uid := range r.Revisions {
		if !slices.ContainsFunc(revs, func(u *caches.User) bool { return u.UID == uid }) {
			delete(r.Revisions, uid)
		}
	}
	for v := range r.Written {
		inUse := slices.ContainsFunc(revs, func(u *caches.User) bool { return carries(u, v) }) ||
			(template != nil && carries(template, v)) || (r.Acknowledged.Wrote != nil && r.Acknowledged.Wrote.Value == v)
		if !inUse {
			delete(r.Written, v)
		}
	}
}

// unpinned is content less the pinned objects (their snapshots know them).
func unpinned(content map[string]string, pinned map[string]bool) map[string]string {
	out := map[string]string{}
	for k, v := range content {
		if !pinned[k] {
			out[k] = v
		}
	}
	return out
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

// learnWritten adds to a record written before it kept the values we wrote (Written) the values it
// can prove ours: a revision's config-hash that is the hash of what the revision was made with, as
// only our write computes it.
func (r *record) learnWritten(revs []*caches.User) {
	for _, rev := range revs {
		made, ok := r.Revisions[rev.UID]
		v, has := rev.TemplateAnnotations[api.ConfigHashAnnotation]
		if !ok || !has || len(made) == 0 {
			continue
		}
		if _, known := r.Written[v]; known {
			continue
		}
		if h, err := content.HashJSON(made); err == nil && h == v {
			r.Written[v] = maps.Clone(made)
		}
	}
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
