// Package caches builds and reads the controllers' informer caches: the objects that use ConfigMaps
// and Secrets (pods and the pod templates of workloads and their revisions), each reduced on arrival to
// what the controllers read (User), and the opted-in config objects, metadata only. A pod template can be
// larger than everything else about an object together; keeping only its config references is what lets
// the controller watch every pod and workload of a cluster in tens of MiB.
package caches

import (
	"fmt"
	"maps"
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

// User is a cached object that uses config, reduced to what the controllers read. The caches hold
// one per Pod, workload and revision of the cluster, so it keeps no metav1.ObjectMeta (most of whose
// fields nothing reads), and what it has in common with its controller (namespace, the controller's
// reference, config references) points into the controller's User (share.go). Nothing may modify a
// cached User or what it points to.
type User struct {
	// TypeMeta is the original object's apiVersion and kind.
	metav1.TypeMeta
	Namespace, Name string
	UID             types.UID
	// ResourceVersion, Generation and CreationTimestamp are kept for workloads and revisions; a
	// Pod's are not read, and not kept.
	ResourceVersion   string
	Generation        int64
	CreationTimestamp metav1.Time
	DeletionTimestamp *metav1.Time
	// Owner is the controller's reference (nil when none): the only owner anything reads. Of it
	// apiVersion, kind, name, uid and controller are kept, not blockOwnerDeletion.
	Owner *metav1.OwnerReference
	// Labels are a ReplicaSet's, when they are read (reduce); nil for every other kind. Of the
	// annotations only attach-all and, on workloads, Jobs, CronJobs and bare pods, Reloader's
	// (api.ReloaderWorkloadAnnotations).
	Labels, Annotations map[string]string
	// Refs are the config objects its pod spec references, distinct and sorted.
	Refs []refs.Ref
	// Reads are what the containers of a workload's pod template read of them (refs.Reads: keys or
	// whole, no image pull Secrets), for the config trigger; nil for other kinds.
	Reads []refs.Read
	// Number is the revision number of a ReplicaSet or ControllerRevision, 0 for other kinds.
	Number int64
	// Finished is true for a pod the kubelet is done with: it reads no config any more.
	Finished bool
	// ShutDown is true for a pod deleted with no grace period left: the kubelet has stopped it.
	ShutDown bool
	// TemplateAnnotations are, on a workload's pod template, Reloader's annotations (where Reloader
	// looks when the workload's own metadata has none) and our config-hash; on a revision's, our
	// config-hash only (api.ConfigHashAnnotation). Nil when none.
	TemplateAnnotations map[string]string
	// Status is set for Deployments, StatefulSets, DaemonSets and Rollouts: whether their controller
	// has caught up with their spec.
	Status *WorkloadStatus

	// self is the reference its dependents' Users share as their Owner; nil for a Pod.
	self *metav1.OwnerReference
}

// GetObjectMeta gives client-go's key and index functions (meta.Accessor) the identity of a User,
// which keeps no ObjectMeta: a fresh one holding namespace, name, uid and resourceVersion only.
func (u *User) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: u.Namespace, Name: u.Name, UID: u.UID, ResourceVersion: u.ResourceVersion}
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
	// Paused is a Deployment's spec.paused: its controller makes no new revision until it is resumed.
	Paused bool
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

// DeepCopyObject makes User a runtime.Object, as informer stores require. What the User shares with
// others (owner, references) is shared by the copy too: it is never modified.
func (u *User) DeepCopyObject() runtime.Object {
	out := *u
	if u.DeletionTimestamp != nil {
		t := *u.DeletionTimestamp
		out.DeletionTimestamp = &t
	}
	out.Labels, out.Annotations, out.TemplateAnnotations = maps.Clone(u.Labels), maps.Clone(u.Annotations), maps.Clone(u.TemplateAnnotations)
	if u.Status != nil {
		st := *u.Status
		out.Status = &st
	}
	return &out
}

// Live reports whether the object can still make a pod read config: a pod the kubelet has not finished
// with, or a pod template whose owner is not being deleted (a controller creates no pods from an object
// being deleted). Like pvcprotection, a pod being deleted still counts until the kubelet is done.
func (u *User) Live() bool {
	if u.Kind() == Pod {
		return !u.Finished && !u.ShutDown
	}
	return u.DeletionTimestamp == nil
}

// reduce builds the User of an object from its metadata and pod spec references. Pods keep no labels
// (the largest cache, and nothing reads them), no resourceVersion, generation nor creation time. A
// ReplicaSet keeps its labels with keepLabels (they are read when -replicaset-selector is set);
// nothing reads the labels of other kinds. Of the annotations only attach-all, and Reloader's where
// the config trigger reads them: on workloads, Jobs, CronJobs and bare pods (a controller's pods and
// revisions inherit them from its template or metadata, and nothing reads them there). s shares what
// an object has in common with its controller; nil shares nothing.
func reduce(s *sharing, apiVersion string, kind Kind, meta *metav1.ObjectMeta, used refs.Set, keepLabels bool) *User {
	controller := metav1.GetControllerOfNoCopy(meta)
	u := &User{
		TypeMeta:  metav1.TypeMeta{APIVersion: unique.Make(apiVersion).Value(), Kind: string(kind)},
		Namespace: unique.Make(meta.Namespace).Value(), Name: meta.Name, UID: meta.UID,
		DeletionTimestamp: meta.DeletionTimestamp,
	}
	s.controller(u, controller, used.Sorted())
	if kind == Pod {
		u.ShutDown = meta.DeletionTimestamp != nil && meta.DeletionGracePeriodSeconds != nil && *meta.DeletionGracePeriodSeconds == 0
	} else {
		u.ResourceVersion, u.Generation, u.CreationTimestamp = meta.ResourceVersion, meta.Generation, meta.CreationTimestamp
		u.self = &metav1.OwnerReference{APIVersion: u.APIVersion, Kind: string(kind), Name: u.Name, UID: u.UID, Controller: s.trueFlag()}
	}
	if kind == ReplicaSet && keepLabels {
		u.Labels = meta.Labels
	}
	if v, ok := meta.Annotations[api.AttachAllAnnotation]; ok {
		u.Annotations = map[string]string{api.AttachAllAnnotation: v}
	}
	if kind != ReplicaSet && kind != ControllerRevision && (kind != Pod || controller == nil) {
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
