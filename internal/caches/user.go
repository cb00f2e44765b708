// Package caches builds and reads the controllers' informer caches: the objects that use ConfigMaps
// and Secrets (pods and the pod templates of workloads and their revisions), each reduced on arrival to
// what the controllers read, and the opted-in config objects, metadata only. A pod template can be
// larger than everything else about an object together; keeping only its config references, each
// object in the smallest record that still says what decisions read (records.go), and what objects
// have in common once (identity.go), is what lets the controller watch every pod and workload of a
// cluster of 150,000 Pods in about a hundred MiB. Readers get a User or a PartialObjectMetadata made
// from the record.
package caches

import (
	"fmt"
	"maps"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

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

// User is an object that uses config as the caches hand it out, reduced to what the controllers read:
// made from what the caches hold of it (a podStub or an entry, records.go) at each read. What it has
// in common with other objects (the controller's reference, config references, maps) is shared with
// them and with the cache: nothing may modify what a User points to.
type User struct {
	// TypeMeta is the original object's apiVersion and kind.
	metav1.TypeMeta
	Namespace, Name string
	UID             types.UID
	// ResourceVersion is kept only for revisions in the config trigger's caches (which orders what a
	// revision reads against its creation by it); writers read the object they write. Generation
	// and CreationTimestamp are kept for workloads, revisions and bare pods; a Pod with a controller
	// keeps neither, and of its deletion only whether it is being deleted (DeletionTimestamp then holds
	// the zero time).
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
	// whole, no image pull Secrets), for the config trigger: kept with Options.AllConfigs (the
	// trigger's caches) and by Reduce; nil for other kinds.
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

// DeepCopyObject makes User a runtime.Object, as Informer requires. What the User shares with others
// (owner, references) is shared by the copy too: it is never modified.
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
