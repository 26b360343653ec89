//! What the benches share: the captured reviews and the generated "huge Pod" review.
#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::{Value, json};

/// The ~5 KB review used for the end-to-end handler bench (and by bench/load.sh).
pub const REVIEW_5K: &str = "replicaset-generatename-init-volumes";

pub const ENV_PER_CONTAINER: usize = 30;

pub fn fixture_bytes(name: &str) -> Vec<u8> {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "tests",
        "fixtures",
        "admission",
        &format!("{name}.json"),
    ]
    .iter()
    .collect();
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The ~250 KB "huge Pod" review: the captured 5 KB review grown to 50 containers of 30
/// env vars each (values as long as real configuration tends to be).
pub fn huge_review() -> Vec<u8> {
    let mut review: Value = serde_json::from_slice(&fixture_bytes(REVIEW_5K)).expect("fixture is JSON");
    let pod = &mut review["request"]["object"];
    let app = pod["spec"]["containers"][0].clone();
    let containers: Vec<Value> = (0..50)
        .map(|c| {
            let mut container = app.clone();
            container["name"] = json!(format!("app-{c}"));
            container["env"] = (0..ENV_PER_CONTAINER)
                .map(|e| json!({"name": format!("SETTING_{c}_{e}"), "value": format!("{c}-{e}-{}", "x".repeat(110))}))
                .collect();
            container
        })
        .collect();
    pod["spec"]["containers"] = Value::Array(containers);
    serde_json::to_vec(&review).expect("review encodes")
}
