//! What a flag's value means, alike in every subcommand.

use std::io::{BufRead, BufReader};
use std::path::Path;

use envoy_injector::template::KubeVersion;

/// An empty value turns the feature off (`--webhook-config ""`).
pub fn non_empty(value: &str) -> Option<String> {
    (!value.is_empty()).then(|| value.to_string())
}

/// Opens a manifest file flag for reading; `-` is stdin.
pub fn open(path: &Path) -> std::io::Result<Box<dyn BufRead + Send>> {
    // Large manifests are read in big pieces: fewer system calls per document.
    const CAPACITY: usize = 64 * 1024;
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufReader::with_capacity(CAPACITY, std::io::stdin())));
    }
    Ok(Box::new(BufReader::with_capacity(CAPACITY, std::fs::File::open(path)?)))
}

/// `--kube-version`: a release newer than the rules this injector knows is taken, with
/// the newest rules, and said once.
pub fn kube_version(version: KubeVersion) -> KubeVersion {
    if let Some(note) = version.newer_than_rules() {
        tracing::warn!("{note}");
    }
    version
}
