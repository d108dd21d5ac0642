{{- define "nodemem.labels" -}}
app.kubernetes.io/part-of: nodemem
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- end }}

{{- define "nodemem.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The agent's service-account user name, which the admission policy matches. */}}
{{- define "nodemem.agentUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:nodemem-agent
{{- end }}

{{/* The controller's service-account user name, which its Node admission policy matches. */}}
{{- define "nodemem.controllerUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:nodemem-controller
{{- end }}
