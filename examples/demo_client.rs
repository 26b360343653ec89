//! Posts one captured AdmissionReview to a running webhook over TLS, the way the API
//! server does, then prints the decoded JSON Patch and the Pod it produces.
//!
//! Usage: demo_client URL CA_FILE REVIEW_FILE

use std::process::ExitCode;

use base64::Engine as _;
use serde_json::Value;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let [_, url, ca, review] = args.as_slice() else {
        eprintln!("usage: demo_client URL CA_FILE REVIEW_FILE");
        return ExitCode::from(2);
    };
    match run(url, ca, review) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("demo_client: {err}");
            ExitCode::FAILURE
        }
    }
}

fn run(url: &str, ca: &str, review_path: &str) -> Result<(), String> {
    let ca_pem = std::fs::read(ca).map_err(|e| format!("cannot read CA {ca}: {e}"))?;
    let ca = reqwest::Certificate::from_pem(&ca_pem).map_err(|e| format!("CA {ca} is not PEM: {e}"))?;
    let body = std::fs::read(review_path).map_err(|e| format!("cannot read {review_path}: {e}"))?;
    let review: Value = serde_json::from_slice(&body).map_err(|e| format!("{review_path} is not JSON: {e}"))?;

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let (status, version, answer) = runtime.block_on(async {
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca)
            .build()
            .map_err(|e| e.to_string())?;
        let response = client
            .post(url)
            .header("Content-Type", "application/json")
            .header("User-Agent", "kube-apiserver-admission")
            .body(body)
            .send()
            .await
            .map_err(|e| format!("POST {url}: {e}"))?;
        let status = response.status();
        let version = response.version();
        let text = response.text().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, version, text))
    })?;
    println!("POST {url} -> {status} ({version:?})");
    let answer: Value = serde_json::from_str(&answer).map_err(|e| format!("answer is not JSON ({e}): {answer}"))?;
    let response = &answer["response"];
    println!("uid {} allowed={}", response["uid"], response["allowed"]);
    // What kubectl shows the user: the warnings, and the reason of a denial.
    let warnings = response["warnings"].as_array().map(Vec::as_slice).unwrap_or_default();
    if warnings.is_empty() {
        println!("warnings: none");
    }
    for warning in warnings {
        println!("warning: {}", warning.as_str().unwrap_or_default());
    }
    if let Some(message) = response["status"]["message"].as_str() {
        println!("denied: {message}");
    }
    let Some(patch_b64) = response["patch"].as_str() else {
        println!("no patch: the Pod is admitted unchanged");
        return Ok(());
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch_b64)
        .map_err(|e| e.to_string())?;
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    println!("\n# JSON Patch ({} operations)", patch.0.len());
    println!("{}", serde_json::to_string_pretty(&patch).map_err(|e| e.to_string())?);

    let mut pod = review["request"]["object"].clone();
    json_patch::patch(&mut pod, &patch).map_err(|e| format!("patch does not apply: {e}"))?;
    // Prove it is a valid Pod, then show it without the noise of managedFields.
    serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(pod.clone()).map_err(|e| e.to_string())?;
    if let Some(metadata) = pod.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    println!("\n# Resulting Pod");
    print!("{}", serde_yaml_ng::to_string(&pod).map_err(|e| e.to_string())?);
    Ok(())
}
