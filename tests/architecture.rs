//! Every import of the library points down (ARCHITECTURE.md, "Who may import whom"): its
//! rooms — the top-level modules of `src/`, and `controller`, which sits above the
//! cache the rest of `network` sits below — form no circle. Read from the sources: each
//! `crate::` path outside comments and test code is an edge from the room of the file to
//! the room it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The binary's side: `crate::` there is the binary crate, which may import anything.
const BINARY: &[&str] = &["main", "cli", "commands"];
/// The crates of the workspace the application names as modules (`lib.rs` re-exports
/// them): Cargo keeps them from importing the application, so they are floors below it.
const CRATES: &[&str] = &["inject", "policies", "template", "yaml"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The room a module path (`controller::queue`) belongs to: its top-level module.
fn room(path: &[&str]) -> String {
    path[0].to_string()
}

/// A file's code without comments and without its test module (by convention the last
/// item of a file), and `None` for files that hold only tests.
fn code(path: &Path) -> Option<String> {
    let name = path.file_stem()?.to_str()?;
    if name == "tests" || name == "fixtures" || path.components().any(|c| c.as_os_str() == "tests") {
        return None;
    }
    let text = std::fs::read_to_string(path).unwrap();
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
    Some(
        text.lines()
            .map(|line| line.split("//").next().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

/// Room → the rooms it imports.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let path = Regex::new(r"crate::([a-z_][a-z0-9_]*(?:::[a-z_][a-z0-9_]*)*)").unwrap();
    let group = Regex::new(r"crate::\{([^}]*)\}").unwrap();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap().with_extension("");
        let mut module: Vec<&str> = relative.iter().map(|c| c.to_str().unwrap()).collect();
        if module.last() == Some(&"mod") {
            module.pop();
        }
        if module.first().is_some_and(|top| BINARY.contains(top)) || module == ["lib"] {
            continue;
        }
        let Some(code) = code(&file) else { continue };
        let from = room(&module);
        let mut targets: Vec<String> = path.captures_iter(&code).map(|c| c[1].to_string()).collect();
        for grouped in group.captures_iter(&code) {
            targets.extend(grouped[1].split(',').map(|item| item.trim().to_string()));
        }
        for target in targets {
            let target: Vec<&str> = target.split("::").filter(|s| !s.is_empty()).collect();
            // `crate::NAME` and other items of `lib.rs` belong to no room.
            if target.is_empty() || target[0].chars().next().is_some_and(char::is_uppercase) {
                continue;
            }
            let to = room(&target);
            if to != from && !CRATES.contains(&to.as_str()) {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

/// A circle of rooms, if there is one.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        room: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|r| r == room) {
            let mut found = stack[at..].to_vec();
            found.push(room.to_string());
            return Some(found);
        }
        if done.contains(room) {
            return None;
        }
        stack.push(room.to_string());
        for next in edges.get(room).into_iter().flatten() {
            if let Some(found) = visit(next, edges, stack, done) {
                return Some(found);
            }
        }
        stack.pop();
        done.insert(room.to_string());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|room| visit(room, edges, &mut Vec::new(), &mut done))
}

#[test]
fn no_import_runs_back_up_the_floors() {
    let edges = imports();
    assert!(
        edges.get("controller").is_some_and(|to| to.contains("cache")),
        "the scan found no import of the controller at all: it reads nothing ({edges:?})"
    );
    // The cluster's facts are one room below both commands that read them: `check`
    // (which explains and reports them) and `rollout` (which acts on them) share it
    // rather than one reading the other.
    for above in ["check", "rollout"] {
        assert!(
            edges.get(above).is_some_and(|to| to.contains("cluster")),
            "expected {above} to read the cluster's facts from `cluster`, found its imports: {:?}",
            edges.get(above)
        );
    }
    let cluster = edges.get("cluster").cloned().unwrap_or_default();
    assert!(
        !cluster.contains("check") && !cluster.contains("rollout"),
        "expected `cluster` to import neither `check` nor `rollout`, found: {cluster:?}"
    );
    assert!(
        !edges.get("rollout").is_some_and(|to| to.contains("check")),
        "expected `rollout` to read the cluster through `cluster`, not `check`, found: {:?}",
        edges.get("rollout")
    );
    if let Some(found) = circle(&edges) {
        panic!(
            "expected every import to point down, found a circle of rooms: {}\nevery room's imports: {edges:#?}",
            found.join(" -> ")
        );
    }
}

/// Features unify across a workspace, so the engine's own manifest does not tell what it
/// is built with: `cargo tree` on it alone does.
#[test]
fn the_engine_is_built_from_no_runtime_client_or_server() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let output = std::process::Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "--locked",
            "-p",
            "envoy-injector-engine",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout).unwrap();
    let crates: BTreeSet<&str> = tree.lines().filter_map(|line| line.split_whitespace().next()).collect();
    assert!(
        crates.contains("k8s-openapi"),
        "expected the engine's tree, found: {crates:?}"
    );
    let forbidden = [
        "tokio",
        "hyper",
        "axum",
        "kube",
        "kube-client",
        "kube-runtime",
        "reqwest",
        "rustls",
        "mio",
        "envoy-injector",
        "envoy-injector-yaml",
    ];
    let found: Vec<&&str> = forbidden.iter().filter(|name| crates.contains(**name)).collect();
    assert!(
        found.is_empty(),
        "expected the engine to be pure (no runtime, client, server or crate of ours), found {found:?} in:\n{tree}"
    );
}

#[test]
fn a_circle_is_found_where_there_is_one() {
    let edges = BTreeMap::from([
        ("a".to_string(), BTreeSet::from(["b".to_string()])),
        ("b".to_string(), BTreeSet::from(["c".to_string()])),
        ("c".to_string(), BTreeSet::from(["a".to_string()])),
    ]);
    assert_eq!(circle(&edges).unwrap(), ["a", "b", "c", "a"]);
    let down = BTreeMap::from([("a".to_string(), BTreeSet::from(["b".to_string()]))]);
    assert_eq!(circle(&down), None);
}
