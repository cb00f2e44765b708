// Package policy is pinning by the API server itself (Kubernetes ≥ 1.36): a MutatingAdmissionPolicy
// rewrites each new pod's references to pinned objects into its revision's snapshots, from a table
// this controller keeps (a PinTable per pinning namespace, the policy's params), and a
// ValidatingAdmissionPolicy refuses a pod whose revision the table does not know yet. Nothing of ours
// is on the pod path: while every replica of ours is down, pods of existing revisions are still
// pinned; only a revision that appears meanwhile waits.
//
// The snapshots themselves are those of zero-touch pinning (internal/pinning): the same names, the
// same ownership, the same in-use protection. The table only says which snapshot each revision reads.
package policy

import (
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// The table's API: these names are interfaces (the chart's CRD, RBAC and the policies name them).
const (
	Group    = "configmap-attacher.io"
	Version  = "v1alpha1"
	Kind     = "PinTable"
	Resource = "pintables"
	// TableName is a namespace's table; workloads are split off into shards TableName-1, -2, ... when
	// the namespace's would outgrow MaxTableBytes (plan).
	TableName = "pins"
	// TableLabel=TableValue marks our tables: the bindings' paramRef selects them by it.
	TableLabel = "configmap-attacher.io/pin-table"
	TableValue = "true"
)

// GVR is the tables' API resource.
var GVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}

// Table is one PinTable: for each revision (Key), the snapshot each pinned object maps to.
type Table struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TableSpec `json:"spec"`
}

// TableSpec is what the policies read.
type TableSpec struct {
	// Split, in the namespace's table, names the shard each workload split off lives in (route ->
	// table name), for the controller and for people: the policies read whichever table holds an entry.
	Split map[string]string `json:"split,omitempty"`
	// Revisions: revision key -> entry. Atomic in the CRD (one managedFields entry, not one per key).
	Revisions map[string]Entry `json:"revisions,omitempty"`
}

// Entry is one revision's pins.
type Entry struct {
	// Revision names it for people: ReplicaSet/web-7d9f8c6b5 or ControllerRevision/db-5f7c9d8b4.
	Revision string `json:"revision"`
	// ConfigMaps and Secrets map a pinned object's name to the snapshot the revision's pods read.
	ConfigMaps map[string]string `json:"configMaps,omitempty"`
	Secrets    map[string]string `json:"secrets,omitempty"`
}

// Pin sets the snapshot of r.
func (e *Entry) Pin(r refs.Ref, snapshot string) {
	m := &e.ConfigMaps
	if r.Kind == refs.Secret {
		m = &e.Secrets
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[r.Name] = snapshot
}

// Snapshot is the snapshot of r in the entry, if any.
func (e Entry) Snapshot(r refs.Ref) (string, bool) {
	m := e.ConfigMaps
	if r.Kind == refs.Secret {
		m = e.Secrets
	}
	s, ok := m[r.Name]
	return s, ok
}

// Revision is a revision as the table sees it: what its pods carry (the policies read the pod) and
// what names it for people.
type Revision struct {
	// Key is what a pod of it carries: its controlling ReplicaSet's uid, or its StatefulSet's or
	// DaemonSet's uid and controller-revision-hash label, "<uid>/<hash>".
	Key string
	// Route is the workload, whose revisions share a table: "ReplicaSet/<Deployment or Rollout name>"
	// (the ReplicaSet's name without its pod-template hash), "StatefulSet/<name>", "DaemonSet/<name>".
	Route string
	// Kind and Name of the revision object (ReplicaSet or ControllerRevision), UID its uid.
	Kind, Name string
	UID        types.UID
}

// RevisionOf describes a revision object: a ReplicaSet (owner: its Deployment or Rollout, if any) or
// a ControllerRevision of a StatefulSet or DaemonSet (owner required). ok is false for anything else.
func RevisionOf(kind, name string, uid types.UID, owner *metav1.OwnerReference) (Revision, bool) {
	r := Revision{Kind: kind, Name: name, UID: uid}
	switch kind {
	case "ReplicaSet":
		r.Key = string(uid)
		r.Route = "ReplicaSet/" + name
		if owner != nil && strings.HasPrefix(name, owner.Name+"-") && !strings.Contains(strings.TrimPrefix(name, owner.Name+"-"), "-") {
			r.Route = "ReplicaSet/" + owner.Name
		}
		return r, true
	case "ControllerRevision":
		if owner == nil {
			return r, false
		}
		gv, err := schema.ParseGroupVersion(owner.APIVersion)
		if err != nil || gv.Group != appsv1.GroupName {
			return r, false
		}
		hash := name // a StatefulSet labels its pods with the revision's name
		switch owner.Kind {
		case "StatefulSet":
		case "DaemonSet":
			hash = strings.TrimPrefix(name, owner.Name+"-") // a DaemonSet, with the hash alone
		default:
			return r, false
		}
		r.Key = string(owner.UID) + "/" + hash
		r.Route = owner.Kind + "/" + owner.Name
		return r, true
	}
	return r, false
}

// size is the bytes the spec takes in the stored object (JSON; etcd holds protobuf for built-in
// kinds, JSON for custom resources).
func (s TableSpec) size() int {
	b, _ := json.Marshal(s)
	return len(b)
}

// entrySize is what one entry adds to a table: "key":{...},
func entrySize(key string, e Entry) int {
	b, _ := json.Marshal(map[string]Entry{key: e})
	return len(b) - 1 // the braces of the map, less the comma between entries
}

// newTable is a table object of ns.
func newTable(ns, name string, spec TableSpec) *Table {
	return &Table{
		TypeMeta:   metav1.TypeMeta{APIVersion: Group + "/" + Version, Kind: Kind},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{TableLabel: TableValue}},
		Spec:       spec,
	}
}

// toUnstructured and fromUnstructured convert for the dynamic client.
func (t *Table) toUnstructured() (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(t)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// FromUnstructured reads a PinTable.
func FromUnstructured(u *unstructured.Unstructured) (*Table, error) {
	var t Table
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &t); err != nil {
		return nil, fmt.Errorf("PinTable %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return &t, nil
}

// DefaultMaxTableBytes bounds a table's spec: etcd refuses requests over 1.5 MiB by default, and a
// table is written whole; what is left is for metadata and headroom.
const DefaultMaxTableBytes = 1 << 20

// isOurs reports whether labels mark a table of ours.
func isOurs(labels map[string]string) bool { return labels[TableLabel] == TableValue }

// pinnable reports whether an object with these labels is pinned: labelled for it, and not one of our
// snapshots (a snapshot's name must never be a key of the table: the mutation, reinvoked, would
// rewrite it again).
func pinnable(labels map[string]string) bool {
	return api.Pinned(labels) && labels[api.SnapshotLabel] != api.SnapshotValue
}
