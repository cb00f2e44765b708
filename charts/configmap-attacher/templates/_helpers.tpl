{{/* Chart name, truncated to a DNS label. */}}
{{- define "configmap-attacher.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: the release name when it already contains the chart name. */}}
{{- define "configmap-attacher.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "configmap-attacher.selectorLabels" -}}
app.kubernetes.io/name: {{ include "configmap-attacher.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "configmap-attacher.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "configmap-attacher.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "configmap-attacher.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "configmap-attacher.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "configmap-attacher.jobServiceAccountName" -}}
{{- default (printf "%s-job" (include "configmap-attacher.fullname" .) | trunc 63 | trimSuffix "-") .Values.jobRBAC.serviceAccount.name }}
{{- end }}

{{- define "configmap-attacher.leaseName" -}}
{{- default (include "configmap-attacher.fullname" .) .Values.leaderElection.id }}
{{- end }}

{{- define "configmap-attacher.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
", delete" when the OwnerReferencesPermissionEnforcement admission plugin is on: it requires delete on
an object to set its ownerReferences. We never set blockOwnerDeletion, so replicasets/finalizers is not
needed.
*/}}
{{- define "configmap-attacher.ownerRefDelete" -}}
{{- if .Values.rbac.ownerReferencesPermissionEnforcement }}, delete{{ end }}
{{- end }}

{{/* Rules of the controller, cluster-wide or per watched namespace. */}}
{{- define "configmap-attacher.controllerRules" -}}
# Everything whose pods or pod templates can name config, cached reduced to those references: the
# revisions to attach (ReplicaSets, ControllerRevisions, Jobs, CronJobs, bare Pods) and what in-use
# protection checks before letting a deletion complete. list/watch only (the protection's double-check
# is a list too).
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
- apiGroups: [apps]
  resources: [replicasets, controllerrevisions, deployments, statefulsets, daemonsets]
  verbs: [list, watch]
- apiGroups: [batch]
  resources: [jobs, cronjobs]
  verbs: [list, watch]
- apiGroups: [argoproj.io]
  resources: [rollouts]
  verbs: [list, watch]
# Metadata-only watch of opted-in objects (label-filtered server-side); patch adds ownerReferences and
# our finalizer (strategic merge patches, ours only); get re-reads an object before detaching. RBAC
# cannot restrict by label, hence list/watch on all of them.
- apiGroups: [""]
  resources: {{ if .Values.secrets }}[configmaps, secrets]{{ else }}[configmaps]{{ end }}
  verbs: [get, list, watch, patch{{ include "configmap-attacher.ownerRefDelete" . }}]
# "Attached", "DeletionHeld" and "DeletionReleased" events; the recorder aggregates repeats with patch.
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
{{- if or .Values.pinning.enabled (include "configmap-attacher.reloaderAnnotations" .) }}
# Pinning's snapshots and the config trigger's records are created (with their ownerReference, and a
# snapshot's finalizer); RBAC cannot say which objects, the chart's ValidatingAdmissionPolicy does
# (writePolicy: never a service-account-token Secret). A pod racing its revision, and the trigger
# before a write, read a ControllerRevision (or, with pinning, the ReplicaSet) directly: the webhook
# acts only for revisions that exist.
- apiGroups: [""]
  resources: {{ if and .Values.secrets .Values.pinning.enabled }}[configmaps, secrets]{{ else }}[configmaps]{{ end }}
  verbs: [create]
- apiGroups: [apps]
  resources: {{ if .Values.pinning.enabled }}[controllerrevisions, replicasets]{{ else }}[controllerrevisions]{{ end }}
  verbs: [get]
{{- end }}
{{- if include "configmap-attacher.reloaderAnnotations" . }}
# A config change starts a revision (docs/config-starts.md): the one write on workloads, the
# config-hash annotation on the pod template of those carrying Reloader's annotations (server-side
# apply: patch); get reads a workload's revisions and template before that write. Granted only while
# reloaderAnnotations is on.
- apiGroups: [apps]
  resources: [deployments, statefulsets, daemonsets]
  verbs: [get, patch]
- apiGroups: [apps]
  resources: [replicasets]
  verbs: [get]
- apiGroups: [argoproj.io]
  resources: [rollouts]
  verbs: [get, patch]
{{- end }}
{{- end }}

{{/* The config trigger's switch: reloaderAnnotations, or its deprecated old name
pinning.reloaderAnnotations when set (it applied with pinning only). "true" or empty. */}}
{{- define "configmap-attacher.reloaderAnnotations" -}}
{{- if or .Values.reloaderAnnotations (and .Values.pinning.enabled (hasKey .Values.pinning "reloaderAnnotations") .Values.pinning.reloaderAnnotations) -}}
true
{{- end -}}
{{- end }}

{{/* The Secret holding the config trigger's hash key (trigger-rbac.yaml), in the release namespace. */}}
{{- define "configmap-attacher.configHashKey" -}}
{{ include "configmap-attacher.fullname" . }}-config-hash-key
{{- end }}

{{/* Namespaces: in-use protection releases at once in a namespace being deleted. Cluster-wide only; a
namespaced install cannot read namespaces and releases as the namespace's workloads go. */}}
{{- define "configmap-attacher.namespaceRules" -}}
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get]
{{- end }}

{{/* Rules of the Job mode: deploy/job/rbac-clusterrole.yaml (namespaced: without namespaces). */}}
{{- define "configmap-attacher.jobRules" -}}
# Find the workload's current ReplicaSet and wait (watch) until it uses the named config.
- apiGroups: [argoproj.io]
  resources: [rollouts]
  verbs: [get, list, watch]
# deployments: -deployment and Rollouts with workloadRef.
- apiGroups: [apps]
  resources: [replicasets, deployments]
  verbs: [get, list, watch]
# The named objects are read by name and attached; no list/watch needed.
- apiGroups: [""]
  resources: {{ if .Values.jobRBAC.secrets }}[configmaps, secrets]{{ else }}[configmaps]{{ end }}
  verbs: [get, patch{{ include "configmap-attacher.ownerRefDelete" . }}]
# "Attached to ReplicaSet X (revision N)" events.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/* Replicas: with pinning at least 2, since with failurePolicy Fail no pod of a pinning namespace is
created while no replica answers the webhook. */}}
{{- define "configmap-attacher.replicas" -}}
{{- if .Values.pinning.enabled }}{{ max (int .Values.replicas) 2 }}{{ else }}{{ .Values.replicas }}{{ end }}
{{- end }}

{{- define "configmap-attacher.webhookService" -}}
{{- printf "%s-webhook" (include "configmap-attacher.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "configmap-attacher.metricsService" -}}
{{- printf "%s-metrics" (include "configmap-attacher.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The series selector of this release's controller in the alert rules: what a scrape through the
ServiceMonitor labels them with, unless metrics.prometheusRule.selector says otherwise. */}}
{{- define "configmap-attacher.ruleSelector" -}}
{{- default (printf "namespace=%q, job=%q" .Release.Namespace (include "configmap-attacher.metricsService" .)) .Values.metrics.prometheusRule.selector }}
{{- end }}

{{/* "true" when the pods run in the node's network (pinning.hostNetwork, with pinning in webhook mode:
only the webhook is called by the control plane). */}}
{{- define "configmap-attacher.hostNetwork" -}}
{{- if and .Values.pinning.enabled .Values.pinning.hostNetwork (eq (include "configmap-attacher.pinningAdmission" .) "webhook") }}true{{ end }}
{{- end }}

{{/* The host the servers bind: in the node's network its address (bracketed: IPv4 or IPv6), else
every address of the pod's own. */}}
{{- define "configmap-attacher.bindHost" -}}
{{- if include "configmap-attacher.hostNetwork" . }}[$(HOST_IP)]{{ end }}
{{- end }}

{{/* "true" when the controller may create objects (pinning's snapshots, the trigger's records). */}}
{{- define "configmap-attacher.creates" -}}
{{- if or .Values.pinning.enabled (include "configmap-attacher.reloaderAnnotations" .) }}true{{ end }}
{{- end }}
