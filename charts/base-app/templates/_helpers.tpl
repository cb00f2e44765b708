{{- define "base-app.name" -}}
{{- default .Release.Name .Values.appName }}
{{- end }}

{{- define "base-app.labels" -}}
app: {{ include "base-app.name" . }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "base-app.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Per-release name of the attacher Job and its RBAC: two releases in a namespace never collide. */}}
{{- define "base-app.attacherName" -}}
{{- printf "%s-configmap-attacher" .Release.Name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The ConfigMap revisions, as JSON {"items": [{"key", "base", "name", "data"}]} sorted by key.

data is the RENDERED content: kv_data stringified, raw_data through tpl. name is
<appName>-<key>-<hash>, hash = the first 10 hex digits of the SHA-256 of {"data": data} in JSON
(sorted keys), which is exactly what `configmap-attacher render` computes: running the chart through
the post-renderer changes nothing, and the same content has the same name either way.
*/}}
{{- define "base-app.configmaps" -}}
{{- $root := . }}
{{- $app := include "base-app.name" . }}
{{- $items := list }}
{{- $files := dict }}
{{- range $key, $cm := .Values.configmaps }}
{{- $cm = $cm | default dict }}
{{- $data := dict }}
{{- range $k, $v := $cm.kv_data | default dict }}
{{- $data = set $data $k (toString $v) }}
{{- end }}
{{- range $file, $content := $cm.raw_data | default dict }}
{{- if hasKey $data $file }}
{{- fail (printf "configmaps.%s: %q is in both kv_data and raw_data" $key $file) }}
{{- end }}
{{- $data = set $data $file (tpl (toString $content) $root) }}
{{- end }}
{{- range $file, $_ := $data }}
{{- if hasKey $files $file }}
{{- fail (printf "configmaps.%s and configmaps.%s both have %q: they are mounted in one directory (configmapsMountPath), so file names must not repeat" (get $files $file) $key $file) }}
{{- end }}
{{- $files = set $files $file $key }}
{{- end }}
{{- $content := dict }}
{{- if $data }}{{ $content = dict "data" $data }}{{ end }}
{{- $hash := $content | toJson | sha256sum | trunc 10 }}
{{- /* Cut a long base as the renderer does: the hash, which makes the name unique, always stays. */}}
{{- $base := regexReplaceAll "[-.]+$" (printf "%s-%s" $app $key | trunc 242) "" }}
{{- $items = append $items (dict "key" $key "base" (printf "%s-%s" $app $key) "name" (printf "%s-%s" $base $hash) "data" $data) }}
{{- end }}
{{- dict "items" $items | toJson }}
{{- end }}
