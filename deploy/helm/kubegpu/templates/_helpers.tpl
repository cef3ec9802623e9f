{{/* The operator's name and labels. */}}
{{- define "kubegpu.operatorName" -}}
{{- printf "%s-operator" .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kubegpu.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/part-of: kubegpu
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "kubegpu.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kubegpu.operatorName" . }}
app.kubernetes.io/component: operator
{{- end -}}

{{/* The kubegpu image: repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "kubegpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
A ClusterPolicy section from a values section: keys listed in "omit" (chart-only settings)
and empty values (unset strings, empty lists and maps) are left out; false and 0 stay.
*/}}
{{- define "kubegpu.section" -}}
{{- $out := dict -}}
{{- range $k, $v := .values -}}
{{- if not (has $k $.omit) -}}
{{- if or (kindIs "bool" $v) (kindIs "float64" $v) (kindIs "int64" $v) (kindIs "int" $v) $v -}}
{{- $_ := set $out $k $v -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}
