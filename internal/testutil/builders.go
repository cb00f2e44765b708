// Package testutil holds small object builders for table-driven tests.
package testutil

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	metafake "k8s.io/client-go/metadata/fake"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
	"github.com/configmap-attacher/configmap-attacher/internal/revision"
	"github.com/configmap-attacher/configmap-attacher/internal/workload"
)

// Namespace is the namespace builders use unless told otherwise.
const Namespace = "devops-apps-01"

// PodSpec mounts the ConfigMaps through one projected volume, as the original chart does, and the
// Secrets through envFrom.
func PodSpec(configMaps []string, secrets ...string) corev1.PodSpec {
	var sources []corev1.VolumeProjection
	for _, n := range configMaps {
		sources = append(sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	c := corev1.Container{Name: "app", Image: "nginx"}
	for _, n := range secrets {
		c.EnvFrom = append(c.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: n}}})
	}
	spec := corev1.PodSpec{Containers: []corev1.Container{c}}
	if len(sources) > 0 {
		spec.Volumes = []corev1.Volume{{Name: "configmaps-volume", VolumeSource: corev1.VolumeSource{
			Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}}
		spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "configmaps-volume", MountPath: "/etc/config"}}
	}
	return spec
}

// Rollout builds a Rollout whose controller has observed generation 1 and runs hash.
func Rollout(name, uid, hash string) *workload.RolloutObject {
	return &workload.RolloutObject{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, UID: types.UID(uid), Generation: 1},
		Status:     workload.RolloutStatus{CurrentPodHash: hash, StableRS: hash, ObservedGeneration: "1"},
	}
}

// Deployment builds a Deployment observed at generation 1 running spec.
func Deployment(name, uid string, spec corev1.PodSpec) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace, UID: types.UID(uid), Generation: 1},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
			Spec:       spec,
		}},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1},
	}
}

// ReplicaSet builds a ReplicaSet controlled by owner, with the hash label of owner's kind.
func ReplicaSet(owner metav1.Object, kind workload.Kind, hash string, number int, spec corev1.PodSpec) *appsv1.ReplicaSet {
	yes := true
	apiVersion := "apps/v1"
	if kind == workload.Rollout {
		apiVersion = "argoproj.io/v1alpha1"
	}
	revKey := revision.DeploymentAnnotation
	if kind == workload.Rollout {
		revKey = revision.RolloutAnnotation
	}
	labels := map[string]string{"app": owner.GetName(), kind.HashLabel(): hash}
	return &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{
			Name: owner.GetName() + "-" + hash, Namespace: owner.GetNamespace(),
			UID:         types.UID("rs-" + hash),
			Labels:      labels,
			Annotations: map[string]string{revKey: strconv.Itoa(number)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: apiVersion, Kind: string(kind), Name: owner.GetName(), UID: owner.GetUID(), Controller: &yes,
			}},
		},
		Spec: appsv1.ReplicaSetSpec{Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec:       spec,
		}},
	}
}

// ConfigMeta builds a config object's metadata, optionally opted in, with existing owners.
func ConfigMeta(kind refs.Kind, name string, optedIn bool, owners ...metav1.OwnerReference) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(kind)},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: Namespace, UID: types.UID("uid-" + name), ResourceVersion: "1",
			OwnerReferences: owners,
		},
	}
	if optedIn {
		m.Labels = map[string]string{api.RevisionedLabel: api.RevisionedValue}
	}
	return m
}

// FakeMetadata is a fake metadata client holding objs (PartialObjectMetadata), as the API server would.
func FakeMetadata(objs ...runtime.Object) *metafake.FakeMetadataClient {
	scheme := metafake.NewTestScheme()
	_ = metav1.AddMetaToScheme(scheme)
	return metafake.NewSimpleMetadataClient(scheme, objs...)
}
