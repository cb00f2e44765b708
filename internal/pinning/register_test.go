package pinning

import (
	"context"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// The webhook never gates kube-system nor the controller's own namespace (else, with every replica
// gone, none could be created again), whatever namespaces it watches; a pod labelled
// configmap-attacher.io/pinning=disabled is never sent.
func TestTheWebhookNeverGatesItsOwnNamespaceNorKubeSystem(t *testing.T) {
	for _, tc := range []struct {
		name       string
		reg        Registration
		wantNotIn  []string
		wantInList []string
	}{
		{name: "all namespaces, run in kube-system", reg: Registration{OwnNamespace: "kube-system"}, wantNotIn: []string{"kube-system"}},
		{name: "all namespaces, run in its own", reg: Registration{OwnNamespace: "cma"}, wantNotIn: []string{"cma", "kube-system"}},
		{name: "some namespaces, its own among them", reg: Registration{OwnNamespace: "cma", Namespaces: []string{"cma", "prod"}},
			wantNotIn: []string{"cma", "kube-system"}, wantInList: []string{"cma", "prod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := tc.reg.Webhook(nil)
			var notIn, in []string
			for _, e := range w.NamespaceSelector.MatchExpressions {
				if e.Key != "kubernetes.io/metadata.name" {
					continue
				}
				switch e.Operator {
				case metav1.LabelSelectorOpNotIn:
					notIn = e.Values
				case metav1.LabelSelectorOpIn:
					in = e.Values
				}
			}
			if !slices.Equal(notIn, tc.wantNotIn) || !slices.Equal(in, tc.wantInList) {
				t.Fatalf("namespaces NotIn %v, In %v; want NotIn %v, In %v", notIn, in, tc.wantNotIn, tc.wantInList)
			}
			o := w.ObjectSelector.MatchExpressions
			if len(o) != 1 || o[0].Key != "configmap-attacher.io/pinning" || o[0].Operator != metav1.LabelSelectorOpNotIn || !slices.Equal(o[0].Values, []string{"disabled"}) {
				t.Fatalf("objectSelector %v; want configmap-attacher.io/pinning NotIn [disabled]", o)
			}
			if *w.TimeoutSeconds != 10 {
				t.Fatalf("timeoutSeconds %d; want kube-apiserver's default 10 when unset", *w.TimeoutSeconds)
			}
		})
	}
}

// Behind the chart's Service the configuration is the chart's: filled in when there, never made (an
// uninstall that deleted it must not see it come back).
func TestTheChartsConfigurationIsFilledInButNeverCreated(t *testing.T) {
	ctx := context.Background()
	kube := kubefake.NewClientset()
	reg := Registration{Kube: kube, Configuration: "cma", OwnNamespace: "cma"}
	if wrote, err := reg.Apply(ctx, nil, []byte("ca")); err != nil || wrote {
		t.Fatalf("no configuration: wrote %v, %v; want nothing", wrote, err)
	}
	if list, _ := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Fatalf("a configuration was created: %v", list.Items)
	}
	chart := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "cma"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: WebhookName, FailurePolicy: ptr.To(admissionregistrationv1.Fail),
			ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: "cma", Name: "cma-webhook"}}}}}
	if _, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, chart, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if wrote, err := reg.Apply(ctx, chart, []byte("ca")); err != nil || !wrote {
		t.Fatalf("the chart's configuration: wrote %v, %v; want the caBundle written", wrote, err)
	}
	got, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "cma", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := got.Webhooks[0]
	if string(w.ClientConfig.CABundle) != "ca" || w.ClientConfig.Service == nil || w.ClientConfig.Service.Name != "cma-webhook" || *w.FailurePolicy != admissionregistrationv1.Fail {
		t.Fatalf("after the apply: %+v; want the caBundle filled in and the chart's service and failurePolicy kept", w)
	}
	if wrote, err := reg.Apply(ctx, got, []byte("ca")); err != nil || wrote {
		t.Fatalf("the caBundle already there: wrote %v, %v; want no request", wrote, err)
	}
}
