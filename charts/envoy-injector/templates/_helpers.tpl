{{/*
The labels of every object: those manifests/ gives (`name`, `part-of`) and Helm's own.
*/}}
{{- define "envoy-injector.labels" -}}
app.kubernetes.io/name: envoy-injector
app.kubernetes.io/part-of: envoy-injector
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
The Deployment's selector: as manifests/ spells it (immutable), so that an installation
made from manifests/ can be taken over by a release.
*/}}
{{- define "envoy-injector.selector" -}}
app.kubernetes.io/name: envoy-injector
app.kubernetes.io/component: webhook
{{- end -}}

{{/*
The image reference: `repository@digest` when a digest is given, else `repository:tag`.
*/}}
{{- define "envoy-injector.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}
{{- end -}}

{{/*
Whether the injector manages its own certificate (and so writes the Secret and caBundle).
*/}}
{{- define "envoy-injector.selfTls" -}}
{{- if eq .Values.tls.mode "self" }}true{{ end -}}
{{- end -}}

{{/*
The caBundle of every webhook: none with self-managed TLS (the injector writes it) or
cert-manager (its cainjector does), the given CA with an existing Secret.
*/}}
{{- define "envoy-injector.caBundle" -}}
{{- if eq .Values.tls.mode "secret" }}
caBundle: {{ .Values.tls.secret.caBundle }}
{{- end -}}
{{- end -}}

{{/*
The annotations of both webhook configurations: cert-manager's CA injection.
*/}}
{{- define "envoy-injector.webhookAnnotations" -}}
{{- if eq .Values.tls.mode "certManager" }}
annotations:
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/envoy-injector
{{- end -}}
{{- end -}}

{{/*
The namespaces no webhook entry ever targets: kube-system and the injector's own.
*/}}
{{- define "envoy-injector.excludedNamespaces" -}}
- key: kubernetes.io/metadata.name
  operator: NotIn
  values: [kube-system, {{ .Release.Namespace }}]
{{- end -}}
