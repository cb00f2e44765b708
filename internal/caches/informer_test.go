package caches

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

func TestCountConfigsCountsEveryKind(t *testing.T) {
	obj := func(kind refs.Kind, name string, finalizers ...string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{Kind: string(kind)}, ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "app", Finalizers: finalizers, Labels: map[string]string{api.RevisionedLabel: api.RevisionedValue}}}
	}
	cs := NewForTest(nil, []*metav1.PartialObjectMetadata{
		obj(refs.ConfigMap, "a", api.InUseFinalizer),
		obj(refs.ConfigMap, "b"),
		obj(refs.Secret, "c", "example.com/other", api.InUseFinalizer),
		obj(refs.Secret, "d", "example.com/other"),
	})
	protected := func(o *metav1.PartialObjectMetadata) bool { return api.HasFinalizer(o.Finalizers, api.InUseFinalizer) }
	if n := cs.CountConfigs(protected); n != 2 {
		t.Fatalf("protected objects: %d; want 2 (a ConfigMap and a Secret)", n)
	}
}
