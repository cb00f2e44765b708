// Package caches builds and reads the controllers' informer caches: the objects that use ConfigMaps
// and Secrets (pods and the pod templates of workloads and their revisions), each reduced on arrival to
// what the controllers read (User), and the opted-in config objects, metadata only. A pod template can be
// larger than everything else about an object together; keeping only its config references is what lets
// the controller watch every pod and workload of a cluster in tens of MiB.
package caches

import (
	"fmt"
	"maps"
	"strings"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Kind is a kind of object that can use config.
type Kind string

const (
	Pod                Kind = "Pod"
	ReplicaSet         Kind = "ReplicaSet"
	ControllerRevision Kind = "ControllerRevision"
	Job                Kind = "Job"
	CronJob            Kind = "CronJob"
	Deployment         Kind = "Deployment"
	StatefulSet        Kind = "StatefulSet"
	DaemonSet          Kind = "DaemonSet"
	Rollout            Kind = "Rollout"
)

// UserKinds are every kind whose pods or pod templates can name config, in the order users are listed.
func UserKinds() []Kind {
	return []Kind{Pod, ReplicaSet, ControllerRevision, Job, CronJob, Deployment, StatefulSet, DaemonSet, Rollout}
}

// User is a cached object that uses config, reduced to what the controllers read.
type User struct {
	// TypeMeta is the original object's apiVersion and kind.
	metav1.TypeMeta
	// ObjectMeta keeps identity, owners and the deletion timestamp, a ReplicaSet's labels when they
	// are read (reduce); of the annotations only attach-all and, on workloads, Jobs, CronJobs and bare
	// pods, Reloader's (api.ReloaderWorkloadAnnotations).
	metav1.ObjectMeta
	// Refs are the config objects its pod spec references, distinct and sorted.
	Refs []refs.Ref
	// Number is the revision number of a ReplicaSet or ControllerRevision, 0 for other kinds.
	Number int64
	// Finished is true for a pod the kubelet is done with: it reads no config any more.
	Finished bool
	// TemplateAnnotations are Reloader's annotations on a workload's pod template, where Reloader
	// looks when the workload's own metadata has none.
	TemplateAnnotations map[string]string
	// Status is set for Deployments, StatefulSets, DaemonSets and Rollouts: whether their controller
	// has caught up with their spec.
	Status *WorkloadStatus

	// shape keeps alive the one copy of the strings a Pod shares with the other pods of its revision
	// (internPodShape); the zero Handle for other kinds.
	shape unique.Handle[podShape]
}

// WorkloadStatus is what the config trigger reads of a workload's status.
type WorkloadStatus struct {
	// Observed is true once the workload's controller has observed its latest generation: its
	// newest revision is then the one its template makes.
	Observed bool
	// TemplateRef names the Deployment holding a Rollout's pod template (spec.workloadRef), "" when
	// the Rollout has its own; TemplateRefObserved is the generation of that Deployment the Rollout
	// controller last resolved (status.workloadObservedGeneration).
	TemplateRef         string
	TemplateRefObserved int64
}

// Kind is the original object's kind.
func (u *User) Kind() Kind { return Kind(u.TypeMeta.Kind) }

// Key is "Kind/namespace/name": a queue key naming the object across kinds.
func (u *User) Key() string { return Key(u.Kind(), u.Namespace, u.Name) }

// Key builds a key like User.Key.
func Key(kind Kind, namespace, name string) string {
	return fmt.Sprintf("%s/%s/%s", kind, namespace, name)
}

// Uses reports whether the object references r.
func (u *User) Uses(r refs.Ref) bool {
	for _, x := range u.Refs {
		if x == r {
			return true
		}
	}
	return false
}

// Revision is the revision object the user is, for the kinds that hold one.
func (u *User) Revision() *revision.Revision {
	return &revision.Revision{
		APIVersion: u.APIVersion, Kind: u.TypeMeta.Kind, Namespace: u.Namespace, Name: u.Name, UID: u.UID,
		Number: u.Number, Deleting: u.DeletionTimestamp != nil,
	}
}

// DeepCopyObject makes User a runtime.Object, as informer stores require.
func (u *User) DeepCopyObject() runtime.Object {
	out := &User{TypeMeta: u.TypeMeta, Refs: append([]refs.Ref(nil), u.Refs...), Number: u.Number, Finished: u.Finished, shape: u.shape}
	u.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if u.TemplateAnnotations != nil {
		out.TemplateAnnotations = maps.Clone(u.TemplateAnnotations)
	}
	if u.Status != nil {
		st := *u.Status
		out.Status = &st
	}
	return out
}

// Live reports whether the object can still make a pod read config: a pod the kubelet has not finished
// with, or a pod template whose owner is not being deleted (a controller creates no pods from an object
// being deleted). Like pvcprotection, a pod being deleted still counts until the kubelet is done.
func (u *User) Live() bool {
	if u.Kind() == Pod {
		shutDown := u.DeletionTimestamp != nil && u.DeletionGracePeriodSeconds != nil && *u.DeletionGracePeriodSeconds == 0
		return !u.Finished && !shutDown
	}
	return u.DeletionTimestamp == nil
}

// reduce builds the User of an object from its metadata and pod spec references. Pods keep no labels
// (the largest cache, and nothing reads them), and share their namespace, owners and references with
// the other pods of their revision (internPodShape). A ReplicaSet keeps its labels with keepLabels (they
// are read when -replicaset-selector is set); nothing reads the labels of other kinds. Of the
// annotations only attach-all, and Reloader's where the config trigger reads them: on workloads, Jobs,
// CronJobs and bare pods (a controller's pods and revisions inherit them from its template or
// metadata, and nothing reads them there).
func reduce(apiVersion string, kind Kind, meta *metav1.ObjectMeta, used refs.Set, keepLabels bool) *User {
	u := &User{
		TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: string(kind)},
		ObjectMeta: metav1.ObjectMeta{
			Name: meta.Name, Namespace: meta.Namespace, UID: meta.UID, ResourceVersion: meta.ResourceVersion,
			Generation: meta.Generation, CreationTimestamp: meta.CreationTimestamp,
			DeletionTimestamp: meta.DeletionTimestamp, DeletionGracePeriodSeconds: meta.DeletionGracePeriodSeconds,
			OwnerReferences: meta.OwnerReferences,
		},
		Refs: used.Sorted(),
	}
	if kind == Pod {
		internPodShape(u)
	} else if kind == ReplicaSet && keepLabels {
		u.Labels = meta.Labels
	}
	if v, ok := meta.Annotations[api.AttachAllAnnotation]; ok {
		u.Annotations = map[string]string{api.AttachAllAnnotation: v}
	}
	if kind != ReplicaSet && kind != ControllerRevision && (kind != Pod || metav1.GetControllerOfNoCopy(meta) == nil) {
		if r := reloaderAnnotations(meta.Annotations); r != nil {
			if u.Annotations == nil {
				u.Annotations = r
			} else {
				maps.Copy(u.Annotations, r)
			}
		}
	}
	return u
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

// podShape is what the pods of one revision have in common: namespace, owners and the config they
// read, each list flattened into one string (fields separated by NUL) so that the shape is comparable.
type podShape struct {
	namespace, owners, refs string
}

// internPodShape points the pod's namespace, owner reference strings and reference names into one
// shared copy of its shape (unique.Make), instead of the copies its decoding made: a revision's pods
// keep one copy between them, for as long as one of them is cached.
func internPodShape(u *User) {
	var owners, used strings.Builder
	for _, o := range u.OwnerReferences {
		fmt.Fprintf(&owners, "%s\x00%s\x00%s\x00%s\x00", o.APIVersion, o.Kind, o.Name, o.UID)
	}
	for _, r := range u.Refs {
		fmt.Fprintf(&used, "%s\x00%s\x00", r.Kind, r.Name)
	}
	u.shape = unique.Make(podShape{namespace: u.Namespace, owners: owners.String(), refs: used.String()})
	shared := u.shape.Value()
	u.Namespace = shared.namespace
	// The list is the decoded object's, which nothing else holds: its strings are replaced in place.
	f := strings.Split(shared.owners, "\x00") // substrings share the canonical bytes
	for i := range u.OwnerReferences {
		o := &u.OwnerReferences[i]
		o.APIVersion, o.Kind, o.Name, o.UID = f[4*i], f[4*i+1], f[4*i+2], types.UID(f[4*i+3])
	}
	f = strings.Split(shared.refs, "\x00")
	for i := range u.Refs {
		u.Refs[i].Name = f[2*i+1]
	}
}
