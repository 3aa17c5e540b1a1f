{{/* The name of every object: the release's. */}}
{{- define "edge.name" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* What selects the pods (Service, PDB, NetworkPolicy, monitors, Istio policies): fixed per release. */}}
{{- define "edge.selector" -}}
app.kubernetes.io/name: orrery-a2a-edge
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "edge.labels" -}}
{{ include "edge.selector" . }}
app.kubernetes.io/part-of: orrery-a2a-edge
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "edge.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Bytes in a size: 512Mi, 1Gi (Kubernetes) or 384MiB, 1GiB (Envoy's budget). */}}
{{- define "edge.bytes" -}}
{{- $number := regexFind "^[0-9]+" . | int64 -}}
{{- if hasPrefix "G" (trimPrefix (toString $number) .) -}}
{{- mul $number 1073741824 -}}
{{- else -}}
{{- mul $number 1048576 -}}
{{- end -}}
{{- end -}}

{{/* Combinations that cannot work fail the render, with the reason. */}}
{{- define "edge.checks" -}}
{{- $v := .Values -}}
{{- if and $v.autoscaling.enabled (not $v.replicated.enabled) -}}
{{- fail "autoscaling.enabled needs replicated.enabled: replicas must share tasks, approvals and limits (PostgreSQL and Redis)" -}}
{{- end -}}
{{- if and (gt (int $v.replicas) 1) (not $v.replicated.enabled) -}}
{{- fail "replicas > 1 needs replicated.enabled: replicas must share tasks, approvals and limits (PostgreSQL and Redis)" -}}
{{- end -}}
{{- if and (gt (int $v.envoy.xffTrustedHops) 0) $v.envoy.proxyProtocol -}}
{{- fail "envoy.xffTrustedHops and envoy.proxyProtocol: give one (a hop count means nothing when the peer comes from the PROXY header)" -}}
{{- end -}}
{{- if $v.istio.enabled -}}
{{- if eq $v.authz.transport "http" -}}
{{- fail "istio.enabled with authz.transport=http: the mesh proxy cannot restore the 503/508 denials the HTTP transport carries as 463/468; use grpc (docs/kubernetes.md)" -}}
{{- end -}}
{{- if $v.tls.clientCA.enabled -}}
{{- fail "istio.enabled with tls.clientCA: in Istio mode TLS is the ingress gateway's and mTLS the mesh's" -}}
{{- end -}}
{{- else -}}
{{- $heap := include "edge.bytes" $v.envoy.maxHeap | int64 -}}
{{- $limit := include "edge.bytes" $v.envoy.resources.limits.memory | int64 -}}
{{- if gt (mul $heap 4) (mul $limit 3) -}}
{{- fail (printf "envoy.maxHeap %s is more than 75%% of Envoy's memory limit %s: the OOM killer would act before the overload manager" $v.envoy.maxHeap $v.envoy.resources.limits.memory) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The hardened security context of every container. */}}
{{- define "edge.hardened" -}}
runAsNonRoot: true
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{/* The identity provider's host and port, from config.jwksUrl. */}}
{{- define "edge.idpHost" -}}
{{- (urlParse .Values.config.jwksUrl).host | splitList ":" | first -}}
{{- end -}}
{{- define "edge.idpPort" -}}
{{- $host := (urlParse .Values.config.jwksUrl).host -}}
{{- if contains ":" $host -}}{{ splitList ":" $host | last }}{{- else -}}443{{- end -}}
{{- end -}}

{{- define "edge.envoySettings" -}}
ORRERY_A2A_CORS_ORIGINS: {{ join "," .Values.envoy.corsOrigins | quote }}
ORRERY_A2A_CLIENT_RATE_LIMIT: {{ .Values.envoy.clientRateLimit | quote }}
ORRERY_A2A_CLIENT_RATE_BURST: {{ .Values.envoy.clientRateBurst | default "" | toString | quote }}
ORRERY_A2A_ENVOY_MAX_HEAP: {{ .Values.envoy.maxHeap | quote }}
ORRERY_A2A_XFF_TRUSTED_HOPS: {{ .Values.envoy.xffTrustedHops | toString | quote }}
ORRERY_A2A_PROXY_PROTOCOL: {{ .Values.envoy.proxyProtocol | toString | quote }}
ORRERY_A2A_AUTHZ_TRANSPORT: {{ .Values.authz.transport | quote }}
ORRERY_A2A_TLS_RELOAD: {{ .Values.tls.reload | toString | quote }}
ORRERY_A2A_TLS_CLIENT_CA: {{ ternary "/etc/envoy/client-ca/ca.crt" "" .Values.tls.clientCA.enabled | quote }}
{{- end -}}
