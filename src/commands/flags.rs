//! What a flag's value means, alike in every subcommand.

use std::io::{BufRead, BufReader};
use std::path::Path;

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
