// Package caches builds and reads the controllers' informer caches: the objects that use ConfigMaps
// and Secrets (pods and the pod templates of workloads and their revisions), each reduced on arrival to
// what the controllers read (User), and the opted-in config objects, metadata only. A pod template can be
// larger than everything else about an object together; keeping only its config references is what lets
// the controller watch every pod and workload of a cluster in tens of MiB.
package caches

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
)

// Kind is a kind of object that can use config.
type Kind string

const (
	ReplicaSet Kind = "ReplicaSet"
	Deployment Kind = "Deployment"
	Rollout    Kind = "Rollout"
)

// User is a cached object that uses config, reduced to what the controllers read.
type User struct {
	// TypeMeta is the original object's apiVersion and kind.
	metav1.TypeMeta
	// ObjectMeta keeps identity, labels, owners and the deletion timestamp; of the annotations only
	// ours and the revision number's.
	metav1.ObjectMeta
	// Refs are the config objects its pod spec references, distinct and sorted.
	Refs []refs.Ref
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
		Number: revision.Number(u.Annotations), Deleting: u.DeletionTimestamp != nil,
	}
}

// DeepCopyObject makes User a runtime.Object, as informer stores require.
func (u *User) DeepCopyObject() runtime.Object {
	out := &User{TypeMeta: u.TypeMeta, Refs: append([]refs.Ref(nil), u.Refs...)}
	u.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	return out
}

// keptAnnotations are the only annotations a User keeps.
func keptAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for _, k := range []string{api.AttachAllAnnotation, revision.RolloutAnnotation, revision.DeploymentAnnotation} {
		if v, ok := in[k]; ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// reduce builds the User of an object from its metadata and pod spec references.
func reduce(apiVersion string, kind Kind, meta *metav1.ObjectMeta, used refs.Set) *User {
	u := &User{
		TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: string(kind)},
		ObjectMeta: metav1.ObjectMeta{
			Name: meta.Name, Namespace: meta.Namespace, UID: meta.UID, ResourceVersion: meta.ResourceVersion,
			Generation: meta.Generation, CreationTimestamp: meta.CreationTimestamp,
			DeletionTimestamp: meta.DeletionTimestamp, Labels: meta.Labels,
			Annotations: keptAnnotations(meta.Annotations), OwnerReferences: meta.OwnerReferences,
		},
		Refs: used.Sorted(),
	}
	return u
}
