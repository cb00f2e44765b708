// Package history answers "which config did revision 3 run with, and what changed in revision 4?".
//
// Every config revision has its own name and an ownerReference to each ReplicaSet using it, so the
// ReplicaSets a Rollout or Deployment keeps for rollback say exactly which config each revision runs
// with, and that config is still there to compare. The core is pure: Build and Compare work on objects
// already read (Resolve and Read read them from the API), and the writers print tables, JSON, YAML and unified diffs.
package history

import (
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// History is a workload's revisions, newest first, with the config each one runs with. Its JSON field
// names are an interface: scripts read them.
type History struct {
	Workload  Workload   `json:"workload"`
	Revisions []Revision `json:"revisions"`
	// Drift lists the pinned objects changed in place since the current revision's snapshot was taken:
	// content no pod reads until the pod template changes.
	Drift []Drift `json:"drift,omitempty"`
}

// Workload names the workload and, for Rollouts, its state.
type Workload struct {
	Kind      workload.Kind `json:"kind"`
	Namespace string        `json:"namespace"`
	Name      string        `json:"name"`
	// Phase is a Rollout's status.phase (Healthy, Paused, Progressing, Degraded).
	Phase string `json:"phase,omitempty"`
	// Aborted is a Rollout's status.abort: its canary was aborted and the stable revision runs.
	Aborted bool `json:"aborted"`
}

// Revision is one ReplicaSet of the workload.
type Revision struct {
	Revision          int64         `json:"revision"`
	ReplicaSet        string        `json:"replicaSet"`
	PodTemplateHash   string        `json:"podTemplateHash"`
	Role              workload.Role `json:"role"`
	Pods              Pods          `json:"pods"`
	CreationTimestamp metav1.Time   `json:"creationTimestamp"`
	// Config is every ConfigMap and Secret the pod template references, by kind then name.
	Config []Config `json:"config"`
}

// Pods counts a ReplicaSet's pods.
type Pods struct {
	Ready   int32 `json:"ready"`
	Desired int32 `json:"desired"`
}

// Config is one config object a revision's pod template references.
type Config struct {
	Kind refs.Kind `json:"kind"`
	Name string    `json:"name"`
	// OriginalName pairs revisions of the same object: the name before the content hash was added.
	OriginalName string `json:"originalName"`
	// Exists is false when the object is gone: pods of this revision cannot start (unless Optional).
	Exists bool `json:"exists"`
	// Attached is true when the object has an ownerReference to this ReplicaSet, so the garbage
	// collector keeps it exactly as long as the ReplicaSet.
	Attached bool `json:"attached"`
	// Revisioned is true when the object carries the opt-in label (configmap-attacher.io/revisioned).
	Revisioned bool `json:"revisioned"`
	// Optional is true when every reference to it is marked optional: pods start without it.
	Optional bool `json:"optional"`
	// Deleting is true once someone deleted the object (it has a deletionTimestamp); with Held, in-use
	// protection keeps it while anything uses it, the revisions listed as using it among them.
	Deleting bool `json:"deleting,omitempty"`
	Held     bool `json:"held,omitempty"`
	// Pinned is true when the object carries the pin label (configmap-attacher.io/pin): the revision's
	// pods do not read it but Snapshot, the immutable copy the revision owns.
	Pinned bool `json:"pinned,omitempty"`
	// Snapshot names the snapshot of a pinned object this revision owns: what its pods read. Empty
	// when the revision owns none yet (its pods read the object as it is now).
	Snapshot string `json:"snapshot,omitempty"`
}

// Drift is a pinned object whose content is no longer what the current revision's pods read: it was
// changed in place without a change to the pod template, so no new revision (and no snapshot) came of
// it. Pods keep reading their snapshots; the next pod template change rolls the content out.
type Drift struct {
	Kind refs.Kind `json:"kind"`
	Name string    `json:"name"`
	// Revision is the current revision and Snapshot the snapshot its pods read.
	Revision int64  `json:"revision"`
	Snapshot string `json:"snapshot"`
	// Live is the name a snapshot of the object's content as it is now gets: what a new revision
	// would be pinned to.
	Live string `json:"live"`
	// LiveRevisions are the revisions already pinned to that content, newest first (the object was
	// set back to an older revision's content, or an undo went back past it); empty when none is.
	LiveRevisions []int64 `json:"liveRevisions,omitempty"`
}

// Missing reports whether pods of the revision need this object and it does not exist.
func (c Config) Missing() bool { return !c.Exists && !c.Optional }

// Build assembles the history of res from the config objects read.
func Build(res *workload.Resolved, objs Objects) *History {
	h := &History{
		Workload:  Workload{Kind: res.Ref.Kind, Namespace: res.Ref.Namespace, Name: res.Ref.Name},
		Revisions: []Revision{},
	}
	if ro := res.Rollout; ro != nil {
		h.Workload.Phase, h.Workload.Aborted = ro.Status.Phase, ro.Status.Abort
	}
	snapshots := indexSnapshots(objs)
	for _, rs := range res.Owned {
		desired := int32(1)
		if rs.Spec.Replicas != nil {
			desired = *rs.Spec.Replicas
		}
		r := Revision{
			Revision:          revision.Number(rs.Annotations),
			ReplicaSet:        rs.Name,
			PodTemplateHash:   rs.Labels[res.Ref.Kind.HashLabel()],
			Role:              res.RoleOf(rs),
			Pods:              Pods{Ready: rs.Status.ReadyReplicas, Desired: desired},
			CreationTimestamp: rs.CreationTimestamp,
			Config:            []Config{},
		}
		optional := optionalRefs(&rs.Spec.Template.Spec)
		for _, ref := range refs.FromPodSpec(&rs.Spec.Template.Spec).Sorted() {
			o := objs[ref]
			c := Config{Kind: ref.Kind, Name: ref.Name, OriginalName: OriginalName(o, ref.Name), Optional: optional[ref]}
			if o != nil {
				c.Exists, c.Attached, c.Revisioned = true, o.AttachedTo(rs.UID), o.Revisioned()
				c.Deleting = o.Meta.DeletionTimestamp != nil
				c.Held = c.Deleting && api.HasFinalizer(o.Meta.Finalizers, api.InUseFinalizer)
				if c.Pinned = o.Pinned(); c.Pinned {
					c.Snapshot = snapshots[pinKey{rs.UID, ref}]
				}
			}
			r.Config = append(r.Config, c)
		}
		h.Revisions = append(h.Revisions, r)
	}
	h.Drift = drift(h, objs)
	return h
}

// pinKey is a revision's pin for one pinned object: the snapshot that object's name and the
// revision's uid find, as the webhook finds it.
type pinKey struct {
	revision types.UID
	ref      refs.Ref
}

// indexSnapshots maps each pin to its snapshot. A revision normally owns one snapshot per object; should
// a race (or a deletion by hand) have left it two, the one the webhook reads wins (api.BetterPin).
func indexSnapshots(objs Objects) map[pinKey]string {
	pins := map[pinKey]*metav1.ObjectMeta{}
	for _, o := range objs {
		orig := o.Meta.Annotations[api.OriginalNameAnnotation]
		if !o.IsSnapshot() || orig == "" {
			continue
		}
		for _, owner := range o.Meta.OwnerReferences {
			k := pinKey{owner.UID, refs.Ref{Kind: o.Ref.Kind, Name: orig}}
			if prev, ok := pins[k]; !ok || api.BetterPin(&o.Meta, prev) {
				pins[k] = &o.Meta
			}
		}
	}
	out := make(map[pinKey]string, len(pins))
	for k, m := range pins {
		out[k] = m.Name
	}
	return out
}

// drift compares each pinned object the current revision reads through a snapshot with the object's
// content now, as far as load read it (Object.LiveSnapshot).
func drift(h *History, objs Objects) []Drift {
	cur, err := current(h)
	if err != nil {
		return nil
	}
	var out []Drift
	for _, c := range cur.Config {
		o := objs[refs.Ref{Kind: c.Kind, Name: c.Name}]
		if !c.Pinned || c.Snapshot == "" || o == nil || o.LiveSnapshot == "" || o.LiveSnapshot == c.Snapshot {
			continue
		}
		d := Drift{Kind: c.Kind, Name: c.Name, Revision: cur.Revision, Snapshot: c.Snapshot, Live: o.LiveSnapshot}
		for _, r := range h.Revisions {
			for _, rc := range r.Config {
				if rc.Kind == c.Kind && rc.Name == c.Name && rc.Snapshot == o.LiveSnapshot {
					d.LiveRevisions = append(d.LiveRevisions, r.Revision)
					break
				}
			}
		}
		out = append(out, d)
	}
	return out
}

// DriftRefs lists the pinned objects whose content now decides drift: those the current revision
// reads through a snapshot. Only these need reading with content (to hash it), and only for that.
func DriftRefs(h *History) []refs.Ref {
	cur, err := current(h)
	if err != nil {
		return nil
	}
	var out []refs.Ref
	for _, c := range cur.Config {
		if c.Pinned && c.Snapshot != "" {
			out = append(out, refs.Ref{Kind: c.Kind, Name: c.Name})
		}
	}
	return out
}

// PinnedKinds lists the kinds of the pinned objects among objs: where snapshots need looking for.
func PinnedKinds(objs Objects) []refs.Kind {
	seen := map[refs.Kind]bool{}
	var out []refs.Kind
	for _, o := range objs {
		if o.Pinned() && !seen[o.Ref.Kind] {
			seen[o.Ref.Kind] = true
			out = append(out, o.Ref.Kind)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ConfigRefs lists every config object the revisions reference: what Read must read.
func ConfigRefs(revisions ...*Revision) []refs.Ref {
	all := refs.Set{}
	for _, r := range revisions {
		for _, c := range r.Config {
			all[refs.Ref{Kind: c.Kind, Name: c.Name}] = struct{}{}
		}
	}
	return all.Sorted()
}

// SnapshotRefs lists the snapshots the revisions' pods read in place of pinned objects.
func SnapshotRefs(revisions ...*Revision) []refs.Ref {
	all := refs.Set{}
	for _, r := range revisions {
		for _, c := range r.Config {
			if c.Snapshot != "" {
				all[refs.Ref{Kind: c.Kind, Name: c.Snapshot}] = struct{}{}
			}
		}
	}
	return all.Sorted()
}

// AllConfigRefs lists every config object the workload's ReplicaSets reference.
func AllConfigRefs(res *workload.Resolved) []refs.Ref {
	all := refs.Set{}
	for _, rs := range res.Owned {
		for r := range refs.FromPodSpec(&rs.Spec.Template.Spec) {
			all[r] = struct{}{}
		}
	}
	return all.Sorted()
}

// optionalRefs returns the references whose every use is marked optional: true. refs.Uses is the one
// description of where a pod spec names config; each use's parent (a configMap volume, a projected
// source, a configMapRef, a configMapKeyRef, ...) carries the optional field.
func optionalRefs(spec *corev1.PodSpec) map[refs.Ref]bool {
	uses := refs.Uses(spec)
	if len(uses) == 0 {
		return nil
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(spec)
	if err != nil {
		return nil
	}
	out := map[refs.Ref]bool{}
	for _, use := range uses {
		opt := false
		if parent, ok := use.Path[:len(use.Path)-1].In(u).(map[string]any); ok {
			opt, _ = parent["optional"].(bool)
		}
		if prev, seen := out[use.Ref]; seen {
			out[use.Ref] = prev && opt
		} else {
			out[use.Ref] = opt
		}
	}
	return out
}
