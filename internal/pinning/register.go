package pinning

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionv1ac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
)

// WebhookName is the name of the one webhook in the configuration.
const WebhookName = "pin-pods.configmap-attacher.io"

// MatchOwnedByARevision is the CEL match condition that sends only pods a ReplicaSet, StatefulSet or
// DaemonSet controls to the webhook (the chart carries the same expression).
const MatchOwnedByARevision = `has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, ` +
	`has(r.controller) && r.controller && (r.kind == 'ReplicaSet' || r.kind == 'StatefulSet' || r.kind == 'DaemonSet'))`

// Registration says how the API server reaches the webhook.
type Registration struct {
	// Configuration is the MutatingWebhookConfiguration's name.
	Configuration string
	// URL, when set, is where this process serves the webhook (https://127.0.0.1:PORT for local runs):
	// Register then writes the whole configuration. Otherwise the chart made it (clientConfig.service)
	// and Register only fills its caBundle.
	URL           string
	FailurePolicy admissionregistrationv1.FailurePolicyType
	// Namespaces restricts the webhook to these namespaces (the controller's -namespaces); nil: all
	// namespaces labelled for pinning.
	Namespaces []string
}

// Register writes the webhook configuration (URL mode) or its caBundle (in a cluster), by server-side
// apply with our field manager: re-running it changes nothing.
func (r Registration) Register(ctx context.Context, kube kubernetes.Interface, ca []byte) error {
	client := kube.AdmissionregistrationV1().MutatingWebhookConfigurations()
	cfg := admissionv1ac.MutatingWebhookConfiguration(r.Configuration)
	if r.URL == "" {
		cfg.WithWebhooks(admissionv1ac.MutatingWebhook().WithName(WebhookName).
			WithClientConfig(admissionv1ac.WebhookClientConfig().WithCABundle(ca...)))
	} else {
		cfg.WithWebhooks(r.webhook(ca))
	}
	_, err := client.Apply(ctx, cfg, metav1.ApplyOptions{FieldManager: api.FieldManager, Force: true})
	if err != nil {
		return fmt.Errorf("registering the webhook (MutatingWebhookConfiguration %s): %w", r.Configuration, err)
	}
	return nil
}

// webhook is the full definition: pods created in namespaces labelled for pinning, controlled by a
// revision, sent with their dry-run flag (no snapshot is taken on a dry run), reinvoked if another
// webhook changes the pod after us (a second pass finds nothing left to pin).
func (r Registration) webhook(ca []byte) *admissionv1ac.MutatingWebhookApplyConfiguration {
	selector := metav1ac.LabelSelector().WithMatchLabels(map[string]string{api.PinningNamespaceLabel: api.PinningEnabled})
	if len(r.Namespaces) > 0 {
		selector.WithMatchExpressions(metav1ac.LabelSelectorRequirement().
			WithKey(corev1NamespaceNameLabel).WithOperator(metav1.LabelSelectorOpIn).WithValues(r.Namespaces...))
	}
	return admissionv1ac.MutatingWebhook().
		WithName(WebhookName).
		WithAdmissionReviewVersions("v1").
		WithClientConfig(admissionv1ac.WebhookClientConfig().WithURL(r.URL + Path).WithCABundle(ca...)).
		WithRules(admissionv1ac.RuleWithOperations().
			WithOperations(admissionregistrationv1.Create).
			WithAPIGroups("").WithAPIVersions("v1").WithResources("pods").
			WithScope(admissionregistrationv1.NamespacedScope)).
		WithNamespaceSelector(selector).
		WithMatchConditions(admissionv1ac.MatchCondition().WithName("owned-by-a-revision").WithExpression(MatchOwnedByARevision)).
		WithFailurePolicy(r.FailurePolicy).
		WithSideEffects(admissionregistrationv1.SideEffectClassNoneOnDryRun).
		WithTimeoutSeconds(5).
		WithReinvocationPolicy(admissionregistrationv1.IfNeededReinvocationPolicy).
		WithMatchPolicy(admissionregistrationv1.Equivalent)
}

// corev1NamespaceNameLabel is the label every Namespace carries with its own name.
const corev1NamespaceNameLabel = "kubernetes.io/metadata.name"
