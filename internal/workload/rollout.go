package workload

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// RolloutObject is the part of an argoproj.io/v1alpha1 Rollout we read.
type RolloutObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              RolloutSpec   `json:"spec,omitempty"`
	Status            RolloutStatus `json:"status,omitempty"`
}

type RolloutSpec struct {
	Replicas             *int32                  `json:"replicas,omitempty"`
	Template             *corev1.PodTemplateSpec `json:"template,omitempty"`
	WorkloadRef          *ObjectRef              `json:"workloadRef,omitempty"`
	RevisionHistoryLimit *int32                  `json:"revisionHistoryLimit,omitempty"`
}

type ObjectRef struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Name       string `json:"name,omitempty"`
}

type RolloutStatus struct {
	CurrentPodHash string `json:"currentPodHash,omitempty"`
	StableRS       string `json:"stableRS,omitempty"`
	// Argo Rollouts writes generations as strings.
	ObservedGeneration         string `json:"observedGeneration,omitempty"`
	WorkloadObservedGeneration string `json:"workloadObservedGeneration,omitempty"`
	Abort                      bool   `json:"abort,omitempty"`
	Phase                      string `json:"phase,omitempty"`
}

// RolloutFromUnstructured decodes the fields we read; unknown fields are ignored.
func RolloutFromUnstructured(u *unstructured.Unstructured) (*RolloutObject, error) {
	ro := &RolloutObject{}
	// Lenient on purpose: a newer Rollouts CRD may add fields of types we do not model.
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), ro); err != nil {
		return nil, fmt.Errorf("decoding Rollout %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return ro, nil
}
