//! The admission policies `envoy-injector policies` compiles, got as a user gets them (the
//! binary run on a ConfigMap file), and bound to chosen namespaces only: for the e2e tiers
//! and `examples/bench_admission.rs` (which is why the binary's path is a parameter:
//! `CARGO_BIN_EXE_*` exists only for tests).

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use kube::core::ApiResource;
use serde_json::{Value, json};

/// `BIN policies -f CONFIGMAP --namespace NAMESPACE -o json`: the compiled objects, in
/// the order to apply them. `Err` when it fails or says anything on stderr (a template
/// left to the webhook).
pub fn compile(bin: &Path, configmap: &Value, namespace: &str) -> Result<Vec<Value>, String> {
    compile_with(bin, configmap, namespace, &[])
}

/// [`compile`] with further flags of `policies` (`--annotation-opt-in=false`).
pub fn compile_with(bin: &Path, configmap: &Value, namespace: &str, flags: &[&str]) -> Result<Vec<Value>, String> {
    let dir = tempfile::Builder::new()
        .prefix("envoy-injector-policies")
        .tempdir()
        .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    let file = dir.path().join("configmap.yaml");
    let yaml = serde_yaml_ng::to_string(configmap).map_err(|e| format!("the ConfigMap is no YAML: {e}"))?;
    std::fs::write(&file, yaml).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let out = Command::new(bin)
        .args(["policies", "-f"])
        .arg(&file)
        .args(["--namespace", namespace, "-o", "json"])
        .args(flags)
        .output()
        .map_err(|e| format!("cannot run {} policies: {e}", bin.display()))?;
    if !out.status.success() || !out.stderr.is_empty() {
        return Err(format!(
            "expected `policies` to compile every template quietly, found exit {:?}, stderr: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let list: Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("`policies -o json` printed no JSON: {e}"))?;
    Ok(list["items"].as_array().cloned().unwrap_or_default())
}

/// The compiled objects with each binding narrowed to `namespaces` (as compiled they cover
/// every namespace but kube-system and the injector's).
pub fn narrow(objects: &[Value], namespaces: &[String]) -> Vec<Value> {
    objects
        .iter()
        .cloned()
        .map(|mut object| {
            if object["kind"].as_str().is_some_and(|k| k.ends_with("Binding")) {
                let expressions = object["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
                    .as_array_mut()
                    .expect("a compiled binding selects namespaces by expressions");
                expressions.push(json!({"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}));
            }
            object
        })
        .collect()
}

/// The API resource of a compiled object.
pub fn resource_of(object: &Value) -> ApiResource {
    match object["kind"].as_str().unwrap_or_default() {
        "MutatingAdmissionPolicy" => ApiResource::erase::<MutatingAdmissionPolicy>(&()),
        "MutatingAdmissionPolicyBinding" => ApiResource::erase::<MutatingAdmissionPolicyBinding>(&()),
        "ValidatingAdmissionPolicy" => ApiResource::erase::<ValidatingAdmissionPolicy>(&()),
        _ => ApiResource::erase::<ValidatingAdmissionPolicyBinding>(&()),
    }
}
