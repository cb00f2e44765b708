{{- define "plain-chart.configName" -}}
{{- if .Values.prehashedName }}app-config-{{ .Values.config | toJson | sha256sum | trunc 10 }}{{ else }}app-config{{ end }}
{{- end }}
