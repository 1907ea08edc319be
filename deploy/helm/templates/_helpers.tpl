{{/* The labels every object of this chart carries, and the ones its pods are selected by. */}}
{{- define "crm-bot-actions.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: action-server
{{- end }}

{{- define "crm-bot-actions.labels" -}}
{{ include "crm-bot-actions.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
