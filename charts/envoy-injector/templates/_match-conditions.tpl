{{- /*
Generated from crates/engine/src/policies/webhook.rs by `make generate`: edit there, not here.
Each webhook entry's matchConditions, which templates/webhook.yaml includes.
*/ -}}

{{- define "envoy-injector.matchConditions.namespace" -}}
matchConditions:
  - name: not-opted-out-and-work-to-do
    expression: |-
      (!has(object.metadata.annotations) || (
        (!("sidecar.samplecrd.k8s.io/status" in object.metadata.annotations) ||
        ("sidecar.samplecrd.k8s.io/network" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/network"].trim() != "" && !(has(object.metadata.labels) && "sidecar.samplecrd.k8s.io/network" in object.metadata.labels && object.metadata.labels["sidecar.samplecrd.k8s.io/network"] == object.metadata.annotations["sidecar.samplecrd.k8s.io/network"].trim()))) &&
        !("sidecar.samplecrd.k8s.io/inject" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/inject"].trim().lowerAscii() == "false") && !("initializer.kubernetes.io/envoy" in object.metadata.annotations && object.metadata.annotations["initializer.kubernetes.io/envoy"].trim().lowerAscii() == "false"))) &&
      !(has(object.metadata.labels) && "sidecar.samplecrd.k8s.io/inject" in object.metadata.labels && object.metadata.labels["sidecar.samplecrd.k8s.io/inject"] == "false") &&
      (!has(object.spec.hostNetwork) || !object.spec.hostNetwork || (has(object.metadata.annotations) && "sidecar.samplecrd.k8s.io/template" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/template"].trim() != ""))
{{- end }}

{{- define "envoy-injector.matchConditions.label" -}}
matchConditions:
  - name: not-opted-out-and-work-to-do
    expression: |-
      (!has(object.metadata.annotations) || (
        (!("sidecar.samplecrd.k8s.io/status" in object.metadata.annotations) ||
        ("sidecar.samplecrd.k8s.io/network" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/network"].trim() != "" && !(has(object.metadata.labels) && "sidecar.samplecrd.k8s.io/network" in object.metadata.labels && object.metadata.labels["sidecar.samplecrd.k8s.io/network"] == object.metadata.annotations["sidecar.samplecrd.k8s.io/network"].trim()))) &&
        !("sidecar.samplecrd.k8s.io/inject" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/inject"].trim().lowerAscii() == "false") && !("initializer.kubernetes.io/envoy" in object.metadata.annotations && object.metadata.annotations["initializer.kubernetes.io/envoy"].trim().lowerAscii() == "false"))) &&
      !(has(object.metadata.labels) && "sidecar.samplecrd.k8s.io/inject" in object.metadata.labels && object.metadata.labels["sidecar.samplecrd.k8s.io/inject"] == "false") &&
      (!has(object.spec.hostNetwork) || !object.spec.hostNetwork || (has(object.metadata.annotations) && "sidecar.samplecrd.k8s.io/template" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/template"].trim() != ""))
{{- end }}

{{- define "envoy-injector.matchConditions.pod" -}}
matchConditions:
  - name: opted-in-by-annotation-and-work-to-do
    expression: |-
      has(object.metadata.annotations) &&
      (("sidecar.samplecrd.k8s.io/inject" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/inject"].trim().lowerAscii() == "true") || ("initializer.kubernetes.io/envoy" in object.metadata.annotations && object.metadata.annotations["initializer.kubernetes.io/envoy"].trim().lowerAscii() == "true")) &&
      (!("sidecar.samplecrd.k8s.io/status" in object.metadata.annotations) ||
        ("sidecar.samplecrd.k8s.io/network" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/network"].trim() != "" && !(has(object.metadata.labels) && "sidecar.samplecrd.k8s.io/network" in object.metadata.labels && object.metadata.labels["sidecar.samplecrd.k8s.io/network"] == object.metadata.annotations["sidecar.samplecrd.k8s.io/network"].trim()))) &&
      !("sidecar.samplecrd.k8s.io/inject" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/inject"].trim().lowerAscii() == "false") && !("initializer.kubernetes.io/envoy" in object.metadata.annotations && object.metadata.annotations["initializer.kubernetes.io/envoy"].trim().lowerAscii() == "false") &&
      !(has(object.metadata.labels) && "sidecar.samplecrd.k8s.io/inject" in object.metadata.labels && object.metadata.labels["sidecar.samplecrd.k8s.io/inject"] == "false") &&
      (!has(object.spec.hostNetwork) || !object.spec.hostNetwork || (has(object.metadata.annotations) && "sidecar.samplecrd.k8s.io/template" in object.metadata.annotations && object.metadata.annotations["sidecar.samplecrd.k8s.io/template"].trim() != ""))
{{- end }}
