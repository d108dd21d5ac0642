{{- define "nodemem.labels" -}}
app.kubernetes.io/part-of: nodemem
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* The image: a mirror registry before the repository (global.imageRegistry), then
the digest when pinned, else the tag (the appVersion by default). */}}
{{- define "nodemem.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with (.Values.global).imageRegistry }}{{ $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}{{ end -}}
{{- if .Values.image.digest -}}
{{ $repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ $repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end }}
