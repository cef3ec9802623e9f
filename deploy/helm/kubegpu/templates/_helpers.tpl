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

{{/* The kubegpu image: repository:tag, the tag defaulting to the chart's appVersion;
@digest appended when image.digest is set. */}}
{{- define "kubegpu.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- with .Values.image.digest -}}
{{- if not (regexMatch "^sha256:[0-9a-f]{64}$" .) -}}
{{- fail (printf "values image.digest=%q: not an image digest (sha256: and 64 hex digits)" .) -}}
{{- end -}}
@{{ . }}
{{- end -}}
{{- end -}}

{{/*
The operator's image: operator.repository/image:version (version: the appVersion; a sha256:
digest joins with @) when operator.image names a kubegpu image, else the kubegpu image.
*/}}
{{- define "kubegpu.operatorImage" -}}
{{- $o := .Values.operator -}}
{{- if and $o.image (contains "kubegpu" $o.image) -}}
{{- $ref := $o.image -}}
{{- if $o.repository -}}{{- $ref = printf "%s/%s" $o.repository $o.image -}}{{- end -}}
{{- $version := $o.version | default .Chart.AppVersion -}}
{{- printf "%s%s%s" $ref (ternary "@" ":" (hasPrefix "sha256:" $version)) $version -}}
{{- else -}}
{{- include "kubegpu.image" . -}}
{{- end -}}
{{- end -}}

{{/* True when the values name an operator image that is not a kubegpu image. */}}
{{- define "kubegpu.operatorImageReplaced" -}}
{{- if and .Values.operator.image (not (contains "kubegpu" .Values.operator.image)) -}}true{{- end -}}
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

{{/*
Values of NVIDIA's chart that kubegpu cannot honour. Each rule names a value path, the values
that are fine (upstream's default, which asks for nothing kubegpu lacks) and why anything else
is refused. values.schema.json knows every key; docs/operator.md has the whole table.
*/}}
{{- define "kubegpu.unsupportedValues" -}}
- path: platform.openshift
  allowed: [false]
  why: OpenShift specifics (SecurityContextConstraints, the driver toolkit) are not rendered by kubegpu
- path: nfd.nodefeaturerules
  allowed: [false]
  why: kubegpu ships no NodeFeatureRules (it does not deploy Node Feature Discovery)
- path: operator.cleanupCRD
  allowed: [false]
  why: kubegpu has no pre-delete hook that removes its CRDs (delete them with kubectl)
- path: operator.logging.develMode
  allowed: [false]
  why: the kubegpu operator has no development logging mode (operator.logging.level sets the level)
- path: operator.logging.timeEncoding
  allowed: [epoch, ""]
  why: the kubegpu operator logs in one format; only the default time encoding is accepted
- path: kataManager.enabled
  allowed: [false]
  why: the Kata manager is deprecated upstream and never deployed (upstream ignores it too)
{{- end -}}

{{/* Fail the install, listing every value set that kubegpu does not support. */}}
{{- define "kubegpu.refuseUnsupported" -}}
{{- $problems := list -}}
{{- range $rule := include "kubegpu.unsupportedValues" . | fromYamlArray -}}
{{- $v := $.Values -}}
{{- $set := true -}}
{{- range $seg := splitList "." $rule.path -}}
{{- if and $set (kindIs "map" $v) (hasKey $v $seg) -}}
{{- $v = index $v $seg -}}
{{- else -}}
{{- $set = false -}}
{{- end -}}
{{- end -}}
{{- if and $set (not (kindIs "invalid" $v)) (not (has $v $rule.allowed)) -}}
{{- $problems = append $problems (printf "%s=%v is not supported by kubegpu: %s" $rule.path $v $rule.why) -}}
{{- end -}}
{{- end -}}
{{- if $problems -}}
{{- fail (printf "\n  - %s\n(docs/operator.md lists every value and what kubegpu does with it)" (join "\n  - " $problems)) -}}
{{- end -}}
{{- end -}}
