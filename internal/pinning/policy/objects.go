package policy

import (
	"slices"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/configmap-attacher/configmap-attacher/internal/api"
	"github.com/configmap-attacher/configmap-attacher/internal/pinning"
	"github.com/configmap-attacher/configmap-attacher/internal/refs"
)

// AdmittedAnnotation is set by the mutating policy on every pod it admits: to the pod's revision key
// when its table had the revision's entry (the policy pinned it), empty when it had none. The
// webhook's configuration skips a pod that carries its own revision's key there
// (pinning.MatchNotPinnedByThePolicy), so while a switch from policy mode to webhook mode is under
// way, the webhook, whose certificate may not be registered yet, is never asked about a pod the
// policy has pinned; a pod the policy could not pin is the webhook's. The key only when an entry was
// found: a mark on an unpinned pod made the webhook skip it while the validating binding was already
// gone and the mutating one not yet (a switch to webhook mode), and the pod read the live object
// (TestPolicyHelmUpgradeSwitchesModesRefusingNoPodAndLeavingNoneUnpinned). A pod template cannot
// carry the key of a revision made from it. Empty rather than absent: the mark says the policy was
// applied (framework.WaitPolicyEffective).
const AdmittedAnnotation = api.PolicyAdmittedAnnotation

// Config names the policy objects and says which namespaces they gate.
type Config struct {
	// Name of the policies and their bindings (the chart's full name; configmap-attacher).
	Name string
	// OwnNamespace is the controller's: never gated, with kube-system.
	OwnNamespace string
	// Namespaces restricts them to these (-namespaces); nil: every namespace labelled for pinning.
	Namespaces []string
}

// Objects are the admission policies of pinning: the mutating policy and its binding, the validating
// policy and its binding.
type Objects struct {
	Mutating          *admissionregistrationv1.MutatingAdmissionPolicy
	MutatingBinding   *admissionregistrationv1.MutatingAdmissionPolicyBinding
	Validating        *admissionregistrationv1.ValidatingAdmissionPolicy
	ValidatingBinding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// Build returns the objects for c. Their CEL is generated from internal/refs' table (Patterns); the
// selectors are the webhook's (pinning.Registration.Webhook): the same namespaces, the same escape
// label, the same match condition.
func Build(c Config) Objects {
	spec := Spec()
	paramRef := func(action admissionregistrationv1.ParameterNotFoundActionType) *admissionregistrationv1.ParamRef {
		return &admissionregistrationv1.ParamRef{
			Selector:                &metav1.LabelSelector{MatchLabels: map[string]string{TableLabel: TableValue}},
			ParameterNotFoundAction: ptr.To(action),
		}
	}
	match := matchResources(c)
	return Objects{
		Mutating: &admissionregistrationv1.MutatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: c.Name},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
				ParamKind:          paramKind(),
				MatchConstraints:   podCreates(),
				Variables:          spec.Mutating.Variables,
				Mutations:          spec.Mutating.Mutations,
				FailurePolicy:      ptr.To(admissionregistrationv1.Fail),
				MatchConditions:    spec.MatchConditions,
				ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
			},
		},
		MutatingBinding: &admissionregistrationv1.MutatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicyBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: c.Name},
			Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
				PolicyName: c.Name,
				// No table in the namespace (yet): nothing to pin; the validating policy refuses.
				ParamRef:       paramRef(admissionregistrationv1.AllowAction),
				MatchResources: match,
			},
		},
		Validating: &admissionregistrationv1.ValidatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: c.Name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				ParamKind:        paramKind(),
				MatchConstraints: podCreates(),
				Variables:        spec.Validating.Variables,
				Validations:      spec.Validating.Validations,
				FailurePolicy:    ptr.To(admissionregistrationv1.Fail),
				MatchConditions:  spec.MatchConditions,
			},
		},
		ValidatingBinding: &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: c.Name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: c.Name,
				// No table in the namespace yet (labelled a moment ago): refuse until the controller
				// has made it.
				ParamRef:          paramRef(admissionregistrationv1.DenyAction),
				MatchResources:    match,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		},
	}
}

func paramKind() *admissionregistrationv1.ParamKind {
	return &admissionregistrationv1.ParamKind{APIVersion: Group + "/" + Version, Kind: Kind}
}

func podCreates() *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
			RuleWithOperations: admissionregistrationv1.RuleWithOperations{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope)},
			},
		}},
		MatchPolicy: ptr.To(admissionregistrationv1.Equivalent),
	}
}

// matchResources are the webhook's selectors (pinning.Registration.Webhook), for the bindings.
func matchResources(c Config) *admissionregistrationv1.MatchResources {
	w := pinning.Registration{OwnNamespace: c.OwnNamespace, Namespaces: c.Namespaces}.Webhook(nil)
	return &admissionregistrationv1.MatchResources{
		NamespaceSelector: w.NamespaceSelector,
		ObjectSelector:    w.ObjectSelector,
		MatchPolicy:       ptr.To(admissionregistrationv1.Equivalent),
	}
}

// PolicySpec is the release-independent part of the policies: what the chart takes from
// files/admission-policy.yaml (generated from it: TestChartPolicyFileIsGenerated).
type PolicySpec struct {
	MatchConditions []admissionregistrationv1.MatchCondition `json:"matchConditions"`
	Mutating        struct {
		Variables []admissionregistrationv1.Variable `json:"variables"`
		Mutations []admissionregistrationv1.Mutation `json:"mutations"`
	} `json:"mutating"`
	Validating struct {
		Variables   []admissionregistrationv1.Variable   `json:"variables"`
		Validations []admissionregistrationv1.Validation `json:"validations"`
	} `json:"validating"`
}

// Spec generates the policies' CEL from the reference table.
func Spec() PolicySpec {
	patterns := Patterns()
	var s PolicySpec
	s.MatchConditions = []admissionregistrationv1.MatchCondition{{Name: "owned-by-a-revision", Expression: pinning.MatchOwnedByARevision}}
	common := []admissionregistrationv1.Variable{
		// The match condition guarantees a controller.
		{Name: "owner", Expression: "object.metadata.ownerReferences.filter(r, has(r.controller) && r.controller)[0]"},
		{Name: "key", Expression: "string(variables.owner.kind == 'ReplicaSet' ? variables.owner.uid : " +
			"variables.owner.uid + '/' + object.metadata.?labels[?'controller-revision-hash'].orValue(''))"},
	}
	// Optional chains stay inline: an optional value kept in a variable does not chain (.?) again.
	s.Mutating.Variables = append(slices.Clone(common),
		admissionregistrationv1.Variable{Name: "hasEntry", Expression: "variables.key in params.?spec.?revisions.orValue({})"},
		admissionregistrationv1.Variable{Name: "configMaps", Expression: "params.?spec.?revisions[?variables.key].?configMaps.orValue({})"},
		admissionregistrationv1.Variable{Name: "secrets", Expression: "params.?spec.?revisions[?variables.key].?secrets.orValue({})"},
	)
	s.Mutating.Mutations = []admissionregistrationv1.Mutation{
		{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: patchExpression(patterns)}},
		{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
			Expression: `Object{metadata: Object.metadata{annotations: {"` + AdmittedAnnotation + `": variables.hasEntry ? variables.key : ""}}}`}},
	}
	s.Validating.Variables = append(slices.Clone(common),
		// The workload, for tables split off: see Revision.Route.
		admissionregistrationv1.Variable{Name: "route", Expression: "variables.owner.kind != 'ReplicaSet' ? variables.owner.kind + '/' + variables.owner.name : " +
			"'ReplicaSet/' + ([object.metadata.?labels[?'pod-template-hash'].orValue(''), object.metadata.?labels[?'rollouts-pod-template-hash'].orValue('')]" +
			".exists(h, h != '' && variables.owner.name.endsWith('-' + h)) ? variables.owner.name.substring(0, variables.owner.name.lastIndexOf('-')) : variables.owner.name)"},
		// Whether this table answers for the pod: the namespace's, unless its workload was split off;
		// or the one split off for its workload.
		admissionregistrationv1.Variable{Name: "answers", Expression: "params.?spec.?route.orValue('') != '' ? params.spec.route == variables.route : " +
			"!(variables.route in params.?spec.?split.orValue({}))"},
		admissionregistrationv1.Variable{Name: "readConfigMaps", Expression: readsExpression(patterns, refs.ConfigMap)},
		admissionregistrationv1.Variable{Name: "readSecrets", Expression: readsExpression(patterns, refs.Secret)},
		admissionregistrationv1.Variable{Name: "reads", Expression: "variables.readConfigMaps.map(n, 'configmap/' + n) + variables.readSecrets.map(n, 'secret/' + n)"},
		admissionregistrationv1.Variable{Name: "hasEntry", Expression: "variables.key in params.?spec.?revisions.orValue({})"},
		// Read by their own names though the entry pins them: the mutating policy, whose copy of the
		// tables is not this policy's, had not seen the entry yet.
		admissionregistrationv1.Variable{Name: "unpinned", Expression: "variables.readConfigMaps.filter(n, n in params.?spec.?revisions[?variables.key].?configMaps.orValue({})).map(n, 'configmap/' + n) + " +
			"variables.readSecrets.filter(n, n in params.?spec.?revisions[?variables.key].?secrets.orValue({})).map(n, 'secret/' + n)"},
	)
	revision := "variables.owner.kind + ' ' + variables.owner.name + " +
		"(variables.owner.kind == 'ReplicaSet' ? '' : ' revision ' + object.metadata.?labels[?'controller-revision-hash'].orValue(''))"
	s.Validating.Validations = []admissionregistrationv1.Validation{{
		Expression: "!variables.answers || variables.hasEntry || size(variables.reads) == 0",
		MessageExpression: "'configmap-attacher pinning: ' + " + revision + " + " +
			"' reads ' + variables.reads.distinct().join(', ') + ', and its pods wait until configmap-attacher has recorded which snapshots this revision reads " +
			"(PinTable ' + params.metadata.name + ' has no entry ' + variables.key + ' yet); its controller retries'",
		Reason: ptr.To(metav1.StatusReasonForbidden),
	}, {
		// kube-apiserver's mutating and validating policies each keep their own copy of the tables: a
		// pod the mutating policy left unpinned because its copy lagged is refused, and retried.
		Expression: "!variables.answers || !variables.hasEntry || size(variables.unpinned) == 0",
		MessageExpression: "'configmap-attacher pinning: ' + " + revision + " + " +
			"' would read ' + variables.unpinned.distinct().join(', ') + ' by its own name, though PinTable ' + params.metadata.name + " +
			"' pins it for this revision (entry ' + variables.key + '): the API server had not loaded the entry into the mutating policy yet; its controller retries'",
		Reason: ptr.To(metav1.StatusReasonForbidden),
	}}
	return s
}
