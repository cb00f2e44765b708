// Package workload resolves Argo Rollouts and Deployments to the ReplicaSets that run their revisions.
//
// The current ReplicaSet is found the way the owning controller finds it: by pod-template hash (Rollouts)
// or by template equality (Deployments), only after the controller has observed the latest spec. Never
// by age: a ReplicaSet reused by a rollback is old but current.
package workload

import (
	"errors"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Kind is a workload kind whose ReplicaSets we follow.
type Kind string

const (
	Rollout    Kind = "Rollout"
	Deployment Kind = "Deployment"
)

// Labels the owning controllers put on ReplicaSets (their revision numbers: package revision).
const (
	RolloutHashLabel    = "rollouts-pod-template-hash"
	DeploymentHashLabel = appsv1.DefaultDeploymentUniqueLabelKey
)

// RolloutGVR is the Argo Rollouts resource; we read it through the dynamic client so the main module
// does not depend on the argo-rollouts module.
var RolloutGVR = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "rollouts"}

// Sentinel errors: ErrNotFound means give up (or wait for the object to appear), ErrNotObserved means
// the owning controller has not caught up yet and waiting will help.
var (
	ErrNotFound    = errors.New("not found")
	ErrNotObserved = errors.New("not yet observed by its controller")
)

// Ref names a workload.
type Ref struct {
	Kind      Kind
	Namespace string
	Name      string
}

func (r Ref) String() string { return fmt.Sprintf("%s %s/%s", r.Kind, r.Namespace, r.Name) }

// ParseKind accepts the spellings kubectl users type: rollout, rollouts, ro, deployment, deploy, ...
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "rollout", "rollouts", "ro", "rollouts.argoproj.io":
		return Rollout, nil
	case "deployment", "deployments", "deploy", "deployments.apps":
		return Deployment, nil
	}
	return "", fmt.Errorf("unsupported workload kind %q: use rollout/<name> or deployment/<name>", s)
}

// ParseRef parses "rollout/demo" or "deployment/web".
func ParseRef(namespace, s string) (Ref, error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok || name == "" {
		return Ref{}, fmt.Errorf("workload %q must be written kind/name, e.g. rollout/demo or deployment/web", s)
	}
	k, err := ParseKind(kind)
	if err != nil {
		return Ref{}, err
	}
	return Ref{Kind: k, Namespace: namespace, Name: name}, nil
}

// HashLabel is the ReplicaSet label carrying the pod-template hash for this kind of owner.
func (k Kind) HashLabel() string {
	if k == Rollout {
		return RolloutHashLabel
	}
	return DeploymentHashLabel
}
