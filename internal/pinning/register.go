package pinning

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
)

// WebhookName is the name of the one webhook in the configuration.
const WebhookName = "pin-pods.configmap-attacher.io"

// MatchOwnedByARevision is the CEL match condition that sends only pods a ReplicaSet, StatefulSet or
// DaemonSet of apps/v1 controls to the webhook and the admission policies (the chart carries the same
// expression). apps/v1 only: OpenKruise's Advanced StatefulSet and DaemonSet (apps.kruise.io) share the
// kinds, and their revisions are none of ours (policy.RevisionOf): their pods are admitted unchanged in
// both modes, never refused waiting for an entry no controller of ours writes.
const MatchOwnedByARevision = `has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, ` +
	`has(r.controller) && r.controller && r.apiVersion == 'apps/v1' && (r.kind == 'ReplicaSet' || r.kind == 'StatefulSet' || r.kind == 'DaemonSet'))`

// MatchNotPinnedByThePolicy is the CEL match condition that skips a pod pinning's mutating admission
// policy has admitted (api.PolicyAdmittedAnnotation holds the pod's own revision key, which its
// template cannot): while a switch from policy mode to webhook mode is under way, the webhook, whose
// certificate may not be registered yet, is not asked about pods the policy pinned
// (internal/pinning/policy). The chart carries the same expression.
const MatchNotPinnedByThePolicy = `!has(object.metadata.annotations) || !('` + api.PolicyAdmittedAnnotation + `' in object.metadata.annotations) || ` +
	`!has(object.metadata.ownerReferences) || !object.metadata.ownerReferences.exists(r, has(r.controller) && r.controller && object.metadata.annotations['` + api.PolicyAdmittedAnnotation + `'] == ` +
	`(r.kind == 'ReplicaSet' ? r.uid : r.uid + '/' + (has(object.metadata.labels) && 'controller-revision-hash' in object.metadata.labels ? object.metadata.labels['controller-revision-hash'] : '')))`

// SystemNamespace is never gated: what runs the cluster must be able to start whatever the webhook does.
const SystemNamespace = "kube-system"

// DefaultTimeoutSeconds is how long kube-apiserver waits for the webhook (its own default): the
// webhook answers from caches in under a millisecond, so only an overloaded API server or node gets
// near it, and under Fail a timeout refuses the pod.
const DefaultTimeoutSeconds = 10

// Registration says how the API server reaches the webhook.
type Registration struct {
	Kube kubernetes.Interface
	// Configuration is the MutatingWebhookConfiguration's name.
	Configuration string
	// URL, when set, is where this process serves the webhook (https://127.0.0.1:PORT for local runs):
	// the whole configuration is ours, made and kept as Webhook says. Otherwise the chart made it
	// (clientConfig.service) and only its caBundle is ours: it is never created here, so a configuration
	// an uninstall deleted stays deleted.
	URL            string
	FailurePolicy  admissionregistrationv1.FailurePolicyType
	TimeoutSeconds int32
	// Namespaces restricts the webhook to these namespaces (the controller's -namespaces); nil: all
	// namespaces labelled for pinning.
	Namespaces []string
	// OwnNamespace is where the controller runs: never gated, with kube-system, so that the webhook
	// can always start its own replicas.
	OwnNamespace string
}

// Bundle is the caBundle live holds for the webhook (webhookcert.Target).
func (r Registration) Bundle(live *admissionregistrationv1.MutatingWebhookConfiguration) []byte {
	if w := ours(live); w != nil {
		return w.ClientConfig.CABundle
	}
	return nil
}

// Apply makes the live configuration carry ca, by server-side apply with our field manager, forced
// (what we apply is ours: the caBundle, or the whole configuration at a URL). It writes only when
// something differs, so a steady state makes no request (webhookcert.Target).
func (r Registration) Apply(ctx context.Context, live *admissionregistrationv1.MutatingWebhookConfiguration, ca []byte) (bool, error) {
	var webhook any
	switch cur := ours(live); {
	case r.URL == "" && cur == nil:
		return false, nil // the chart's is not there (yet, or any more): nothing to fill
	case r.URL == "" && bytes.Equal(cur.ClientConfig.CABundle, ca):
		return false, nil
	case r.URL == "":
		webhook = map[string]any{"name": WebhookName, "clientConfig": map[string]any{"caBundle": ca}}
	default:
		want := r.Webhook(ca)
		if cur != nil && equality.Semantic.DeepEqual(*cur, want) {
			return false, nil
		}
		webhook = want
	}
	cfg := map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
		"metadata": map[string]any{"name": r.Configuration}, "webhooks": []any{webhook},
	}
	body, err := json.Marshal(cfg)
	if err != nil {
		return false, err
	}
	_, err = r.Kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Patch(ctx, r.Configuration, types.ApplyPatchType, body,
		metav1.PatchOptions{FieldManager: api.FieldManager, Force: ptr.To(true)})
	if err != nil {
		return false, fmt.Errorf("registering the webhook (MutatingWebhookConfiguration %s): %w", r.Configuration, err)
	}
	return true, nil
}

// Webhook is the full definition at a URL, as the API server stores it (defaults included): pods
// created in namespaces labelled for pinning, but the controller's own and kube-system, controlled by
// a revision and not labelled configmap-attacher.io/pinning=disabled, sent with their dry-run flag (no
// snapshot is taken on a dry run), reinvoked if another webhook changes the pod after us (a second pass
// finds nothing left to pin). The chart's webhook.yaml says the same.
func (r Registration) Webhook(ca []byte) admissionregistrationv1.MutatingWebhook {
	selector := &metav1.LabelSelector{
		MatchLabels: map[string]string{api.PinningNamespaceLabel: api.PinningEnabled},
		MatchExpressions: []metav1.LabelSelectorRequirement{{Key: namespaceNameLabel, Operator: metav1.LabelSelectorOpNotIn,
			Values: r.ungated()}},
	}
	if len(r.Namespaces) > 0 {
		selector.MatchExpressions = append(selector.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: namespaceNameLabel, Operator: metav1.LabelSelectorOpIn, Values: r.Namespaces})
	}
	timeout := r.TimeoutSeconds
	if timeout == 0 {
		timeout = DefaultTimeoutSeconds
	}
	return admissionregistrationv1.MutatingWebhook{
		Name:                    WebhookName,
		AdmissionReviewVersions: []string{"v1"},
		ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(r.URL + Path), CABundle: ca},
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
			Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
				Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
		}},
		NamespaceSelector: selector,
		ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
			Key: api.PinningNamespaceLabel, Operator: metav1.LabelSelectorOpNotIn, Values: []string{api.PinningDisabled}}}},
		MatchConditions: []admissionregistrationv1.MatchCondition{{Name: "owned-by-a-revision", Expression: MatchOwnedByARevision},
			{Name: "not-pinned-by-the-admission-policy", Expression: MatchNotPinnedByThePolicy}},
		FailurePolicy:      ptr.To(r.FailurePolicy),
		SideEffects:        ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
		TimeoutSeconds:     ptr.To(timeout),
		ReinvocationPolicy: ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		MatchPolicy:        ptr.To(admissionregistrationv1.Equivalent),
	}
}

// ungated are the namespaces the webhook never gates, sorted.
func (r Registration) ungated() []string {
	ns := []string{SystemNamespace}
	if r.OwnNamespace != "" && r.OwnNamespace != SystemNamespace {
		ns = append(ns, r.OwnNamespace)
	}
	slices.Sort(ns)
	return ns
}

// ours is the webhook of ours in live, or nil.
func ours(live *admissionregistrationv1.MutatingWebhookConfiguration) *admissionregistrationv1.MutatingWebhook {
	if live == nil {
		return nil
	}
	for i := range live.Webhooks {
		if live.Webhooks[i].Name == WebhookName {
			return &live.Webhooks[i]
		}
	}
	return nil
}

// namespaceNameLabel is the label every Namespace carries with its own name.
const namespaceNameLabel = "kubernetes.io/metadata.name"
