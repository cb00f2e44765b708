package caches

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Reduce turns an object of a kind that uses config (typed, or an unstructured Rollout) into the User
// the caches hand out of it, labels included. The live double-check of the protection controller reduces
// what it lists the same way, so cache and API server are judged alike: an object it cannot read is
// an error that is ErrUnreadable, which both skip.
func Reduce(obj any) (*User, error) {
	r := &reducer{keepLabels: true, keepReads: true}
	rec, err := r.user(obj)
	if err != nil {
		return nil, err
	}
	u, _ := userView(rec)
	return u, nil
}

// reducer turns decoded objects into what the caches store (records.go), sharing identities through
// ids and the maps and lists config objects repeat through the tables. The zero reducer shares nothing
// (Reduce, tests).
type reducer struct {
	ids *identities
	// stored returns the cached object of a kind by key ("namespace/name"); nil: none is looked up.
	stored func(kind Kind, key string) (any, bool)
	// keepLabels: ReplicaSets keep their labels (read when -replicaset-selector is set); nothing reads
	// the labels of other kinds.
	keepLabels bool
	// keepReads: workloads keep what their containers read of each config object (User.Reads): the
	// config trigger's, and only its.
	keepReads  bool
	labels     *table[map[string]string]
	finalizers *table[*[]string]
}

// transform is the User informers' transform.
func (r *reducer) transform(obj any) (any, error) { return r.user(obj) }

// user reduces an object that uses config to a podStub (a pod with a controller) or an entry.
func (r *reducer) user(obj any) (any, error) {
	switch o := obj.(type) {
	case *User, *entry, *podStub:
		return o, nil // transforms may see an object twice
	case *corev1.Pod:
		used := makeRefList(refs.FromPodSpec(&o.Spec).Sorted())
		f := podFlags(o)
		if ctl := metav1.GetControllerOfNoCopy(&o.ObjectMeta); ctl != nil {
			return r.pod(o, ctl, used, f), nil
		}
		e := r.entry("v1", Pod, &o.ObjectMeta, used, false)
		e.flags = f
		return e, nil
	case *appsv1.ReplicaSet:
		e := r.entry("apps/v1", ReplicaSet, &o.ObjectMeta, makeRefList(refs.FromPodSpec(&o.Spec.Template.Spec).Sorted()), r.keepLabels)
		e.number = revision.Number(o.Annotations)
		if h := configHash(o.Spec.Template.Annotations); h != nil {
			e.with().templateAnnotations = h
		}
		r.revisionVersion(e, &o.ObjectMeta)
		return e, nil
	case *appsv1.ControllerRevision:
		t, err := ControllerRevisionTemplate(o)
		if err != nil {
			return nil, unreadable(ControllerRevision, o.Namespace, o.Name, err)
		}
		e := r.entry("apps/v1", ControllerRevision, &o.ObjectMeta, makeRefList(refs.FromPodSpec(&t.Spec).Sorted()), false)
		e.number = o.Revision
		if h := configHash(t.Annotations); h != nil {
			e.with().templateAnnotations = h
		}
		r.revisionVersion(e, &o.ObjectMeta)
		return e, nil
	case *batchv1.Job:
		return r.entry("batch/v1", Job, &o.ObjectMeta, makeRefList(refs.FromPodSpec(&o.Spec.Template.Spec).Sorted()), false), nil
	case *batchv1.CronJob:
		return r.entry("batch/v1", CronJob, &o.ObjectMeta, makeRefList(refs.FromPodSpec(&o.Spec.JobTemplate.Spec.Template.Spec).Sorted()), false), nil
	case *appsv1.Deployment:
		e := r.workload("apps/v1", Deployment, &o.ObjectMeta, &o.Spec.Template, o.Status.ObservedGeneration)
		e.more.status.Paused = o.Spec.Paused
		return e, nil
	case *appsv1.StatefulSet:
		return r.workload("apps/v1", StatefulSet, &o.ObjectMeta, &o.Spec.Template, o.Status.ObservedGeneration), nil
	case *appsv1.DaemonSet:
		return r.workload("apps/v1", DaemonSet, &o.ObjectMeta, &o.Spec.Template, o.Status.ObservedGeneration), nil
	case *unstructured.Unstructured:
		ro, err := workload.RolloutFromUnstructured(o)
		if err != nil {
			return nil, unreadable(Rollout, o.GetNamespace(), o.GetName(), err)
		}
		// Argo Rollouts writes generations as strings; one it does not write as a number is taken as
		// observed rather than waited for for ever.
		observed, err := strconv.ParseInt(ro.Status.ObservedGeneration, 10, 64)
		if err != nil {
			observed = ro.Generation
		}
		if ro.Spec.Template == nil { // a Rollout with workloadRef has none: its Deployment is watched
			e := r.workload(o.GetAPIVersion(), Rollout, &ro.ObjectMeta, &corev1.PodTemplateSpec{}, observed)
			if ref := ro.Spec.WorkloadRef; ref != nil && ref.Kind == "Deployment" {
				e.more.status.TemplateRef = ref.Name
				e.more.status.TemplateRefObserved, _ = strconv.ParseInt(ro.Status.WorkloadObservedGeneration, 10, 64)
			}
			return e, nil
		}
		return r.workload(o.GetAPIVersion(), Rollout, &ro.ObjectMeta, ro.Spec.Template, observed), nil
	}
	return nil, fmt.Errorf("%T is not a kind that uses config", obj)
}

func podFlags(p *corev1.Pod) flags {
	var f flags
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		f |= finished
	}
	if p.DeletionTimestamp != nil {
		f |= deleting
		if g := p.DeletionGracePeriodSeconds; g != nil && *g == 0 {
			f |= shutDown
		}
	}
	return f
}

// pod stubs a pod with a controller: its uid, the controller's identity, and its config references
// only when they are not what the controller's identity holds (a pinned pod reads snapshots, a
// webhook may have added a volume).
func (r *reducer) pod(p *corev1.Pod, ctl *metav1.OwnerReference, used refList, f flags) *podStub {
	s := &podStub{key: p.Namespace + "/" + p.Name, uid: makeUID(p.UID), flags: f}
	// A pod's controller never changes: its earlier version knows the identity already.
	if prev, ok := r.cachedPod(s.key); ok && prev.uid == s.uid && prev.owner.names(p.Namespace, ctl) {
		s.owner = prev.owner
	} else {
		s.owner = r.ids.of(p.Namespace, ctl)
	}
	if shared, ok := r.ids.share(s.owner, used, true); !ok {
		s.own = &shared
	}
	return s
}

// cachedPod returns the stored stub of a pod, if any.
func (r *reducer) cachedPod(key string) (*podStub, bool) {
	if r.stored == nil {
		return nil, false
	}
	obj, ok := r.stored(Pod, key)
	if !ok {
		return nil, false
	}
	p, ok := obj.(*podStub)
	return p, ok
}

// entry builds the entry of an object with config references used. Pods keep no labels, and nothing
// reads the labels of kinds other than ReplicaSet (keepLabels). Of the annotations only attach-all,
// and Reloader's where the config trigger reads them: on workloads, Jobs, CronJobs and bare pods (a
// controller's revisions inherit them from its template or metadata, and nothing reads them there).
func (r *reducer) entry(apiVersion string, kind Kind, meta *metav1.ObjectMeta, used refList, keepLabels bool) *entry {
	e := &entry{id: r.ids.self(apiVersion, kind, meta), created: unixSeconds(meta.CreationTimestamp),
		deleted: meta.DeletionTimestamp, generation: meta.Generation}
	if ctl := metav1.GetControllerOfNoCopy(meta); ctl != nil {
		e.owner = r.ids.of(meta.Namespace, ctl)
	}
	// A revision usually names what its workload's template names (the current one), else its own
	// pods or it came first; a workload claims its own identity's list.
	var ok bool
	if e.refs, ok = r.ids.share(e.owner, used, false); !ok {
		e.refs, _ = r.ids.share(e.id, used, true)
	}
	if kind == ReplicaSet && keepLabels && len(meta.Labels) > 0 {
		e.with().labels = meta.Labels
	}
	var annotations map[string]string
	if v, ok := meta.Annotations[api.AttachAllAnnotation]; ok {
		annotations = map[string]string{api.AttachAllAnnotation: v}
	}
	if kind != ReplicaSet && kind != ControllerRevision {
		if ra := reloaderAnnotations(meta.Annotations); ra != nil {
			if annotations == nil {
				annotations = ra
			} else {
				maps.Copy(annotations, ra)
			}
		}
	}
	if annotations != nil {
		e.with().annotations = annotations
	}
	return e
}

// workload reduces a Deployment, StatefulSet, DaemonSet or Rollout: its pod template's references
// and what its containers read of them, its Reloader annotations and our config-hash, and whether its
// controller observed generation observed.
func (r *reducer) workload(apiVersion string, kind Kind, meta *metav1.ObjectMeta, t *corev1.PodTemplateSpec, observed int64) *entry {
	e := r.entry(apiVersion, kind, meta, makeRefList(refs.FromPodSpec(&t.Spec).Sorted()), false)
	m := e.with()
	if r.keepReads {
		m.reads = refs.Reads(&t.Spec)
	}
	m.templateAnnotations = reloaderAnnotations(t.Annotations)
	if v, ok := t.Annotations[api.ConfigHashAnnotation]; ok {
		if m.templateAnnotations == nil {
			m.templateAnnotations = map[string]string{}
		}
		m.templateAnnotations[api.ConfigHashAnnotation] = v
	}
	m.status = &WorkloadStatus{Observed: observed >= meta.Generation}
	return e
}

// revisionVersion keeps a revision's resourceVersion in the config trigger's caches: the trigger
// orders the versions of the objects a revision reads against the revision's creation by it (a
// ConfigMap written before the ReplicaSet was made, delivered after it). Other caches keep none.
func (r *reducer) revisionVersion(e *entry, meta *metav1.ObjectMeta) {
	if r.keepReads {
		e.with().resourceVersion = meta.ResourceVersion
	}
}

// configHash keeps our config-hash of a revision's template annotations, nil without it: the config
// trigger reads which value each revision was made with.
func configHash(annotations map[string]string) map[string]string {
	if v, ok := annotations[api.ConfigHashAnnotation]; ok {
		return map[string]string{api.ConfigHashAnnotation: v}
	}
	return nil
}

// reloaderAnnotations returns Reloader's workload annotations among annotations, nil if none.
func reloaderAnnotations(annotations map[string]string) map[string]string {
	if len(annotations) == 0 {
		return nil
	}
	var out map[string]string
	for _, k := range api.ReloaderWorkloadAnnotations() {
		if v, ok := annotations[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// configTransform is the transform of a config informer: what it keeps of an object's annotations is
// keep's choice (given the labels of ours it carries).
func (r *reducer) configTransform(keep func(labels map[string]string) []string) cache.TransformFunc {
	return func(obj any) (any, error) {
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return obj, nil // a record already (transforms may see an object twice)
		}
		return r.config(m, keep), nil
	}
}

// config reduces a config object's metadata: of the labels only ours (the only ones anything reads
// of a config object), of the annotations those keep names (managedFields and the last-applied
// annotation can be larger than everything else together: client-side apply copies a ConfigMap's whole
// data into it), each owner to its identity; labels and finalizers, which nearly every opted-in
// object repeats, shared.
func (r *reducer) config(m *metav1.PartialObjectMetadata, keep func(map[string]string) []string) *configRecord {
	labels := ourLabels(m.Labels)
	c := &configRecord{key: m.Namespace + "/" + m.Name, uid: makeUID(m.UID), rv: m.ResourceVersion, created: unixSeconds(m.CreationTimestamp),
		deleted: m.DeletionTimestamp, labels: r.internLabels(labels), finalizers: r.internFinalizers(m.Finalizers)}
	for _, k := range keep(labels) {
		if v, ok := m.Annotations[k]; ok {
			if c.annotations == nil {
				c.annotations = map[string]string{}
			}
			c.annotations[k] = v
		}
	}
	if len(m.OwnerReferences) > 0 {
		c.owners = make([]ownerLink, len(m.OwnerReferences))
		for i := range m.OwnerReferences {
			o := &m.OwnerReferences[i]
			c.owners[i] = ownerLink{id: r.ids.of(m.Namespace, o), controller: tri(o.Controller), blockOwner: tri(o.BlockOwnerDeletion)}
		}
	}
	return c
}

// The annotations each config informer keeps (configTransform's keep).
func keepNone(map[string]string) []string { return nil }

// keepForTrigger: the widened informers hold every ConfigMap and Secret of the cluster; their readers
// need Reloader's match and ignore, a snapshot's original name, a record's content. Everything else a
// tool or a user put there (Helm's and Argo CD's tracking, the last-applied copy of the data) goes.
func keepForTrigger(labels map[string]string) []string {
	keep := []string{api.ReloaderMatch, api.ReloaderIgnore}
	switch {
	case labels[api.SnapshotLabel] == api.SnapshotValue:
		keep = append(keep, api.OriginalNameAnnotation)
	case labels[api.RecordLabel] == api.RecordValue:
		keep = append(keep, api.RecordAnnotation)
	}
	return keep
}

// keepOriginalName: a snapshot's original name, which the pinning readers index.
func keepOriginalName(map[string]string) []string { return []string{api.OriginalNameAnnotation} }

func (r *reducer) internLabels(m map[string]string) map[string]string {
	if r.labels == nil || len(m) == 0 {
		return m
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(m[k])
		b.WriteByte(0)
	}
	return r.labels.get(b.String(), m)
}

func (r *reducer) internFinalizers(f []string) *[]string {
	if len(f) == 0 {
		return nil
	}
	if r.finalizers == nil {
		return &f
	}
	return r.finalizers.get(strings.Join(f, "\x00"), &f)
}

// ourLabels are the labels of ours among labels (nil if none).
func ourLabels(labels map[string]string) map[string]string {
	var out map[string]string
	for k, v := range labels {
		if strings.HasPrefix(k, api.Prefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// ControllerRevisionTemplate decodes the pod template a StatefulSet's or DaemonSet's
// ControllerRevision keeps: its data is a patch of the workload holding spec.template (with
// "$patch": "replace").
func ControllerRevisionTemplate(cr *appsv1.ControllerRevision) (*corev1.PodTemplateSpec, error) {
	var data struct {
		Spec struct {
			Template corev1.PodTemplateSpec `json:"template"`
		} `json:"spec"`
	}
	raw := cr.Data.Raw
	if len(raw) == 0 && cr.Data.Object != nil {
		var err error
		if raw, err = json.Marshal(cr.Data.Object); err != nil {
			return nil, err
		}
	}
	if len(raw) == 0 {
		return &corev1.PodTemplateSpec{}, nil
	}
	if err := json.Unmarshal(raw, &data); err != nil {
		return nil, fmt.Errorf("decoding ControllerRevision %s/%s: %w", cr.Namespace, cr.Name, err)
	}
	return &data.Spec.Template, nil
}
