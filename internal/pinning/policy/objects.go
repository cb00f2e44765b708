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

// Objects are the admission policies of pinning, each with its binding:
//
//   - Mutating (Name): rewrites a pod's references from its revision's entry in the namespace's
//     PinTables (its params) and marks the pod it pinned (AdmittedAnnotation).
//   - Validating (Name): the gate. No params: it refuses a pod of a revision that reads a ConfigMap or
//     Secret and that the mutating policy did not mark as pinned from an entry. Whatever is missing
//     (the namespace's tables, the entry, the PinTable CRD, the mutating policy's copy of the tables),
//     the pod is refused naming what it waits for, never admitted unpinned; and since it reads no
//     params, nothing missing can make it refuse a pod that reads nothing.
//   - Tables (Name-tables): refuses a pod the mutating policy pinned from an older copy of the entry
//     than this policy's (kube-apiserver keeps one copy of the tables per policy).
//
// The policies that read PinTables fail open (failurePolicy Ignore): a parameter error of theirs (the
// CRD gone, its informer not synced yet) must not refuse pods that read nothing, and the gate (Fail)
// refuses every pod they did not pin. Each policy's own matchConstraints carry the namespaces and
// the escape label, not only its binding: kube-apiserver raises a policy's configuration error (a
// paramKind it cannot resolve) after the policy's own constraints and before any binding is looked
// at, so constraints on the bindings alone let such an error reach every namespace.
type Objects struct {
	Mutating          *admissionregistrationv1.MutatingAdmissionPolicy
	MutatingBinding   *admissionregistrationv1.MutatingAdmissionPolicyBinding
	Validating        *admissionregistrationv1.ValidatingAdmissionPolicy
	ValidatingBinding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	Tables            *admissionregistrationv1.ValidatingAdmissionPolicy
	TablesBinding     *admissionregistrationv1.ValidatingAdmissionPolicyBinding
}

// TablesPolicyName is the name of the validating policy that reads the tables (Objects.Tables).
func TablesPolicyName(name string) string { return name + "-tables" }

// Build returns the objects for c. Their CEL is generated from internal/refs' table (Patterns); the
// selectors are the webhook's (pinning.Registration.Webhook): the same namespaces, the same escape
// label, the same match condition.
func Build(c Config) Objects {
	spec := Spec()
	// No table in the namespace (yet): nothing to pin, nothing to compare; the gate refuses what needs an entry.
	paramRef := &admissionregistrationv1.ParamRef{
		Selector:                &metav1.LabelSelector{MatchLabels: map[string]string{TableLabel: TableValue}},
		ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction),
	}
	match := matchResources(c)
	constraints := podCreates(match)
	tables := TablesPolicyName(c.Name)
	vap := func(name string, params bool, fp admissionregistrationv1.FailurePolicyType, vs []admissionregistrationv1.Variable,
		checks []admissionregistrationv1.Validation) *admissionregistrationv1.ValidatingAdmissionPolicy {
		p := &admissionregistrationv1.ValidatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
				MatchConstraints: constraints, Variables: vs, Validations: checks,
				FailurePolicy: ptr.To(fp), MatchConditions: spec.MatchConditions,
			},
		}
		if params {
			p.Spec.ParamKind = paramKind()
		}
		return p
	}
	vapb := func(name string, ref *admissionregistrationv1.ParamRef) *admissionregistrationv1.ValidatingAdmissionPolicyBinding {
		return &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
				PolicyName: name, ParamRef: ref, MatchResources: match,
				ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			},
		}
	}
	return Objects{
		Mutating: &admissionregistrationv1.MutatingAdmissionPolicy{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy"},
			ObjectMeta: metav1.ObjectMeta{Name: c.Name},
			Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
				ParamKind:          paramKind(),
				MatchConstraints:   constraints,
				Variables:          spec.Mutating.Variables,
				Mutations:          spec.Mutating.Mutations,
				FailurePolicy:      ptr.To(admissionregistrationv1.Ignore),
				MatchConditions:    spec.MatchConditions,
				ReinvocationPolicy: admissionregistrationv1.IfNeededReinvocationPolicy,
			},
		},
		MutatingBinding: &admissionregistrationv1.MutatingAdmissionPolicyBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicyBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: c.Name},
			Spec:       admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{PolicyName: c.Name, ParamRef: paramRef, MatchResources: match},
		},
		Validating:        vap(c.Name, false, admissionregistrationv1.Fail, spec.Validating.Variables, spec.Validating.Validations),
		ValidatingBinding: vapb(c.Name, nil),
		Tables:            vap(tables, true, admissionregistrationv1.Ignore, spec.Tables.Variables, spec.Tables.Validations),
		TablesBinding:     vapb(tables, paramRef),
	}
}

func paramKind() *admissionregistrationv1.ParamKind {
	return &admissionregistrationv1.ParamKind{APIVersion: Group + "/" + Version, Kind: Kind}
}

// podCreates are the policies' own constraints: pod creations that the bindings' selectors (m) match.
func podCreates(m *admissionregistrationv1.MatchResources) *admissionregistrationv1.MatchResources {
	return &admissionregistrationv1.MatchResources{
		NamespaceSelector: m.NamespaceSelector,
		ObjectSelector:    m.ObjectSelector,
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

// matchResources are the webhook's selectors (pinning.Registration.Webhook), for the bindings and the
// policies' own constraints.
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
	// Validating is the gate (Objects.Validating), Tables the policy that reads the tables.
	Validating checks `json:"validating"`
	Tables     checks `json:"tables"`
}

type checks struct {
	Variables   []admissionregistrationv1.Variable   `json:"variables"`
	Validations []admissionregistrationv1.Validation `json:"validations"`
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
	cms, secrets := readsExpression(patterns, refs.ConfigMap), readsExpression(patterns, refs.Secret)
	mark := "object.metadata.?annotations[?'" + AdmittedAnnotation + "'].orValue('')"
	// Optional chains stay inline: an optional value kept in a variable does not chain (.?) again.
	s.Mutating.Variables = append(slices.Clone(common),
		admissionregistrationv1.Variable{Name: "hasEntry", Expression: "variables.key in params.?spec.?revisions.orValue({})"},
		admissionregistrationv1.Variable{Name: "configMaps", Expression: "params.?spec.?revisions[?variables.key].?configMaps.orValue({})"},
		admissionregistrationv1.Variable{Name: "secrets", Expression: "params.?spec.?revisions[?variables.key].?secrets.orValue({})"},
	)
	// The mark says the pod was pinned from an entry, and the gate admits a pod that reads config only
	// with it: so it is set only once nothing the entry pins is still read by its own name in the pod
	// as patched (inline, not a variable: a variable could keep its value from before the patch; the
	// patch may also have failed, and this policy fails open). The policy runs once per table of the
	// namespace, in no set order: a table without the entry keeps the mark another table's run set.
	stillRead := "(" + cms + ").exists(n, n in variables.configMaps) || (" + secrets + ").exists(n, n in variables.secrets)"
	s.Mutating.Mutations = []admissionregistrationv1.Mutation{
		{PatchType: admissionregistrationv1.PatchTypeJSONPatch, JSONPatch: &admissionregistrationv1.JSONPatch{Expression: patchExpression(patterns)}},
		{PatchType: admissionregistrationv1.PatchTypeApplyConfiguration, ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{
			Expression: `Object{metadata: Object.metadata{annotations: {"` + AdmittedAnnotation + `": ` +
				`(variables.hasEntry && !(` + stillRead + `)) || ` + mark + ` == variables.key ? variables.key : ""}}}`}},
	}
	reads := []admissionregistrationv1.Variable{
		{Name: "readConfigMaps", Expression: cms},
		{Name: "readSecrets", Expression: secrets},
	}
	revision := "variables.owner.kind + ' ' + variables.owner.name + " +
		"(variables.owner.kind == 'ReplicaSet' ? '' : ' revision ' + object.metadata.?labels[?'controller-revision-hash'].orValue(''))"
	s.Validating.Variables = append(append(slices.Clone(common), reads...),
		admissionregistrationv1.Variable{Name: "reads", Expression: "variables.readConfigMaps.map(n, 'configmap/' + n) + variables.readSecrets.map(n, 'secret/' + n)"},
		admissionregistrationv1.Variable{Name: "pinned", Expression: mark + " == variables.key"},
	)
	s.Validating.Validations = []admissionregistrationv1.Validation{{
		Expression: "variables.pinned || size(variables.reads) == 0",
		MessageExpression: "'configmap-attacher pinning: ' + " + revision + " + " +
			"' reads ' + variables.reads.distinct().join(', ') + ', and its pods wait until configmap-attacher has recorded which snapshots this revision reads " +
			"(the PinTables of namespace ' + request.namespace + ': the API server has no entry ' + variables.key + ' yet); its controller retries'",
		Reason: ptr.To(metav1.StatusReasonForbidden),
	}}
	s.Tables.Variables = append(append(slices.Clone(common), reads...),
		admissionregistrationv1.Variable{Name: "hasEntry", Expression: "variables.key in params.?spec.?revisions.orValue({})"},
		// Read by their own names though the entry pins them: the mutating policy, whose copy of the
		// tables is not this policy's, had an older entry.
		admissionregistrationv1.Variable{Name: "unpinned", Expression: "variables.readConfigMaps.filter(n, n in params.?spec.?revisions[?variables.key].?configMaps.orValue({})).map(n, 'configmap/' + n) + " +
			"variables.readSecrets.filter(n, n in params.?spec.?revisions[?variables.key].?secrets.orValue({})).map(n, 'secret/' + n)"},
	)
	s.Tables.Validations = []admissionregistrationv1.Validation{{
		Expression: "!variables.hasEntry || size(variables.unpinned) == 0",
		MessageExpression: "'configmap-attacher pinning: ' + " + revision + " + " +
			"' would read ' + variables.unpinned.distinct().join(', ') + ' by its own name, though PinTable ' + params.metadata.name + " +
			"' pins it for this revision (entry ' + variables.key + '): the API server had not loaded the entry into the mutating policy yet; its controller retries'",
		Reason: ptr.To(metav1.StatusReasonForbidden),
	}}
	return s
}
