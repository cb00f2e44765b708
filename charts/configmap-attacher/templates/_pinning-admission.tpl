{{/*
Pinning's admission (docs/pinning.md, "Admission policy mode"): "policy" or "webhook", from
pinning.admission (auto, policy, webhook). auto: policy where the cluster serves MutatingAdmissionPolicy
in admissionregistration.k8s.io/v1 (Kubernetes 1.36 and later), webhook elsewhere. The controller gets
the result (-pinning-admission), so the chart and the controller agree.
*/}}
{{- define "configmap-attacher.pinningAdmission" -}}
{{- $mode := .Values.pinning.admission | default "auto" -}}
{{- if eq $mode "auto" -}}
{{- ternary "policy" "webhook" (and (include "configmap-attacher.policyServed" . | eq "true") (include "configmap-attacher.tableCRD" . | eq "true")) -}}
{{- else if eq $mode "policy" -}}
{{- if not (include "configmap-attacher.tableCRD" . | eq "true") -}}
{{- fail "pinning.admission=policy needs the PinTable CRD, which Helm installs from the chart's crds/ only at install, not on upgrade: kubectl apply -f crds/pintables.yaml (from the chart), then upgrade again" -}}
{{- end -}}
policy
{{- else if eq $mode "webhook" -}}
webhook
{{- else -}}
{{- fail (printf "pinning.admission %q: use auto, policy or webhook" $mode) -}}
{{- end -}}
{{- end }}

{{/*
"true" when the PinTable CRD is there for the policies: Helm installs crds/pintables.yaml at install; an
upgrade from a chart without it must apply it first. Where Helm does not read the cluster (helm
template: Argo CD applies crds/ itself) it is taken as there.
*/}}
{{- define "configmap-attacher.tableCRD" -}}
{{- if or .Release.IsInstall (not (lookup "v1" "Namespace" "" .Release.Namespace)) (lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" "pintables.configmap-attacher.io") -}}
true
{{- end -}}
{{- end }}

{{/* "true" where the cluster serves the admission policies of pinning's policy mode. */}}
{{- define "configmap-attacher.policyServed" -}}
{{- .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
{{- end }}

{{/*
"true" when the PinTable CRD and the table RBAC are rendered: policy mode, and webhook mode where the
cluster serves the policies (the controller keeps the tables there too, so a switch to policy mode
finds every revision's entry).
*/}}
{{- define "configmap-attacher.pinTables" -}}
{{- if and .Values.controller.enabled .Values.pinning.enabled (or (eq (include "configmap-attacher.pinningAdmission" .) "policy") (eq (include "configmap-attacher.policyServed" .) "true")) -}}
true
{{- end -}}
{{- end }}

{{/*
"true" when the admission policies are rendered: policy mode; and in webhook mode while a switch from
policy mode is under way (the release's policy binding exists, and the webhook's configuration does not
or has no caBundle yet): they keep pinning pods until the controller's webhook answers, and the
webhook-mode controller then deletes them itself. Seen only where Helm reads the cluster (install,
upgrade; not `helm template`, which Argo CD runs: docs/pinning.md).
*/}}
{{- define "configmap-attacher.renderPolicies" -}}
{{- if and .Values.controller.enabled .Values.pinning.enabled -}}
{{- if eq (include "configmap-attacher.pinningAdmission" .) "policy" -}}
true
{{- else if eq (include "configmap-attacher.policyServed" .) "true" -}}
{{- $fullname := include "configmap-attacher.fullname" . -}}
{{- $binding := lookup "admissionregistration.k8s.io/v1" "MutatingAdmissionPolicyBinding" "" $fullname -}}
{{- $hook := lookup "admissionregistration.k8s.io/v1" "MutatingWebhookConfiguration" "" $fullname -}}
{{- $bundle := "" -}}
{{- if $hook -}}{{- range $hook.webhooks -}}{{- if eq .name "pin-pods.configmap-attacher.io" -}}{{- $bundle = .clientConfig.caBundle | default "" -}}{{- end -}}{{- end -}}{{- end -}}
{{- if and $binding (not $bundle) -}}
true
{{- end -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/*
"true" while a switch from webhook mode to policy mode is under way: policy mode, the release's webhook
configuration still there (holding our webhook) and its policy binding not yet. The chart then keeps
rendering the webhook's configuration (as it is live, caBundle included) and its Service, so that the
webhook keeps answering while kube-apiserver loads the new policies (it reloads policies about once a
second; a deleted webhook configuration is gone at once); the policy-mode leader deletes both once its
policies have been in place for 10 s. Seen only where Helm reads the cluster.
*/}}
{{- define "configmap-attacher.webhookTransition" -}}
{{- if and .Values.controller.enabled .Values.pinning.enabled (eq (include "configmap-attacher.pinningAdmission" .) "policy") -}}
{{- $fullname := include "configmap-attacher.fullname" . -}}
{{- $hook := lookup "admissionregistration.k8s.io/v1" "MutatingWebhookConfiguration" "" $fullname -}}
{{- $binding := lookup "admissionregistration.k8s.io/v1" "MutatingAdmissionPolicyBinding" "" $fullname -}}
{{- $ours := false -}}
{{- if $hook -}}{{- range $hook.webhooks -}}{{- if eq .name "pin-pods.configmap-attacher.io" -}}{{- $ours = true -}}{{- end -}}{{- end -}}{{- end -}}
{{- if and $ours (not $binding) -}}
true
{{- end -}}
{{- end -}}
{{- end }}
