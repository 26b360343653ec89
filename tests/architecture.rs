//! What Cargo cannot see (ARCHITECTURE.md, "Who may import whom"). The walls between the
//! crates of the workspace are Cargo's, and the engine's purity is read from `cargo tree`;
//! inside each crate these tests read the sources:
//! - the application's rooms, the top-level modules of `src/`, form no circle: each
//!   `crate::` path outside comments and test code is an edge from the room of the file to
//!   the room it names;
//! - in every module of every crate, the files form no circle: a file's `super::` and
//!   `crate::` paths into its module, resolved through what `mod.rs` re-exports, are edges
//!   from it to the sibling file (or directory) that defines the name.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

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

/// The crates' source roots, each read as modules of files.
const CRATE_ROOTS: &[&str] = &["src", "crates/engine/src", "crates/yaml/src"];

/// One module's files as nodes: `mod.rs` (or `lib.rs`) is `<mod>`; each child file is
/// its name; a child directory (with its file beside it, if any) is one node.
struct Module {
    dir: PathBuf,
    /// Node → its files.
    nodes: BTreeMap<String, Vec<PathBuf>>,
    /// Its path from the crate root (`template::validate`), empty for the root.
    path: String,
    /// The file that declares it (`mod.rs`, or `lib.rs`/`main.rs` at the root).
    head: Option<PathBuf>,
}

fn modules_of(root: &Path) -> Vec<Module> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut nodes: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_str().unwrap().to_string();
            if path.is_dir() {
                let mut files = Vec::new();
                sources(&path, &mut files);
                nodes.entry(name).or_default().extend(files);
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") && !["mod", "lib", "main"].contains(&name.as_str()) {
                nodes.entry(name).or_default().push(path);
            }
        }
        let head = ["mod.rs", "lib.rs"].iter().map(|f| dir.join(f)).find(|f| f.exists());
        let relative = dir.strip_prefix(root).unwrap();
        let path = relative
            .iter()
            .map(|c| c.to_str().unwrap())
            .collect::<Vec<_>>()
            .join("::");
        if head.is_some() || dir == root {
            found.push(Module { dir, nodes, path, head });
        }
    }
    found
}

/// The names an item path list names first: `{a, b::c, self}` → a, b; `x` → x.
fn first_names(list: &str) -> Vec<String> {
    let list = list.trim().trim_start_matches('{').trim_end_matches('}');
    list.split(',')
        .filter_map(|item| {
            item.trim()
                .split(|c: char| c == ':' || c.is_whitespace() || c == '{')
                .next()
        })
        .map(str::to_string)
        .filter(|name| !name.is_empty() && name != "self")
        .collect()
}

/// The module's file graph: node → the nodes it imports.
fn file_edges(module: &Module) -> BTreeMap<String, BTreeSet<String>> {
    static DEFINITION: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?m)^(?:pub(?:\([^)]*\))? )?(?:async )?(?:unsafe )?(?:fn|struct|enum|trait|const|static|type|union) (\w+)")
            .unwrap()
    });
    static REEXPORT: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"(?m)^\s*pub(?:\([^)]*\))? use (?:self::)?(\w+)::(\{[^;]*\}|[\w:]+)(?: as (\w+))?;").unwrap()
    });
    // `super::super::x` (the supers, then what they name) and `crate::a::b::{c, d}`.
    static SUPER_PATH: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"((?:super::)+)(\{[^;]*?\}|\w+)").unwrap());
    static CRATE_PATH: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"crate::((?:\w+::)*(?:\{[^;]*?\}|\w+))").unwrap());
    let (definition, reexport) = (&*DEFINITION, &*REEXPORT);
    // Which node defines a name the module's files may reach for.
    let mut defines: BTreeMap<String, String> = BTreeMap::new();
    let head_code = module.head.as_deref().and_then(code);
    if let Some(head) = &head_code {
        for found in definition.captures_iter(head) {
            defines.insert(found[1].to_string(), "<mod>".to_string());
        }
    }
    for (node, files) in &module.nodes {
        let own = [
            module.dir.join(format!("{node}.rs")),
            module.dir.join(node).join("mod.rs"),
        ];
        for file in files.iter().filter(|f| own.contains(f)) {
            for found in definition.captures_iter(&code(file).unwrap_or_default()) {
                defines.entry(found[1].to_string()).or_insert_with(|| node.clone());
            }
        }
    }
    if let Some(head) = &head_code {
        for found in reexport.captures_iter(head) {
            if !module.nodes.contains_key(&found[1]) {
                continue;
            }
            let names = match found.get(3) {
                Some(alias) => vec![alias.as_str().to_string()],
                None => first_names(found[2].rsplit("::").next().unwrap_or_default()),
            };
            let names = if found[2].starts_with('{') {
                first_names(&found[2])
            } else {
                names
            };
            for name in names {
                defines.insert(name, found[1].to_string());
            }
        }
    }
    for node in module.nodes.keys() {
        defines.insert(node.clone(), node.clone());
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let link = |from: &str, names: Vec<String>, edges: &mut BTreeMap<String, BTreeSet<String>>| {
        for name in names {
            if let Some(to) = defines.get(&name).filter(|to| to.as_str() != from) {
                edges.entry(from.to_string()).or_default().insert(to.clone());
            }
        }
    };
    let into_module = (!module.path.is_empty()).then(|| format!("{}::", module.path));
    for (node, files) in &module.nodes {
        for file in files {
            let Some(code) = code(file) else { continue };
            let relative = file.strip_prefix(&module.dir).unwrap().with_extension("");
            let mut depth = relative.iter().count();
            if relative.ends_with("mod") {
                depth -= 1;
            }
            for found in SUPER_PATH.captures_iter(&code) {
                if found[1].len() == "super::".len() * depth {
                    link(node, first_names(&found[2]), &mut edges);
                }
            }
            if let Some(into_module) = &into_module {
                for found in CRATE_PATH.captures_iter(&code) {
                    if let Some(rest) = found[1].strip_prefix(into_module.as_str()) {
                        link(node, first_names(rest), &mut edges);
                    }
                }
            }
        }
    }
    // The head's own code: a child's path (`parse::x`), or a name it re-exports, used
    // outside `mod`/`use` lines.
    if let Some(head) = &head_code {
        let mut used = Vec::new();
        static NAMES: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\b(\w+)\b(::)?").unwrap());
        let names = &*NAMES;
        for line in head.lines().map(str::trim) {
            if line.is_empty()
                || line.contains("mod ") && line.ends_with(';')
                || line.starts_with("use ")
                || line.contains(" use ")
            {
                continue;
            }
            // A child by its path (`parse::x`), an item by the name it is re-exported as.
            for found in names.captures_iter(line) {
                let name = found[1].to_string();
                if !module.nodes.contains_key(&name) || found.get(2).is_some() {
                    used.push(name);
                }
            }
        }
        // Bare names reach a child only through the head's own `use child::...` lines.
        static IMPORTS: LazyLock<Regex> = LazyLock::new(|| {
            Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))? )?use (?:self::)?(\w+)::(\{[^;]*\}|[\w:]+)").unwrap()
        });
        let imports = &*IMPORTS;
        let imported: BTreeSet<String> = imports
            .captures_iter(head)
            .filter(|found| module.nodes.contains_key(&found[1]))
            .flat_map(|found| match found[2].starts_with('{') {
                true => first_names(&found[2]),
                false => vec![found[2].rsplit("::").next().unwrap_or_default().to_string()],
            })
            .collect();
        let used: Vec<String> = used
            .into_iter()
            .filter(|name| module.nodes.contains_key(name) || imported.contains(name))
            .filter(|name| defines.get(name).is_some_and(|to| to != "<mod>"))
            .collect();
        link("<mod>", used, &mut edges);
    }
    edges
}

#[test]
fn no_module_s_files_form_a_circle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut read = 0;
    let mut circles = Vec::new();
    for root in CRATE_ROOTS {
        for module in modules_of(&workspace.join(root)) {
            read += 1;
            let edges = file_edges(&module);
            if let Some(found) = circle(&edges) {
                circles.push(format!(
                    "{}: {}",
                    module.dir.strip_prefix(workspace).unwrap().display(),
                    found.join(" -> ")
                ));
            }
        }
    }
    assert!(read >= 20, "only {read} modules read");
    assert!(
        circles.is_empty(),
        "expected no circle of files in any module (`<mod>` is the module's mod.rs; move what several files share into a file of its own), found:\n{}",
        circles.join("\n")
    );
}

#[test]
fn a_circle_of_files_is_found_where_there_is_one() {
    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("m");
    std::fs::create_dir(&module).unwrap();
    std::fs::write(
        module.join("mod.rs"),
        "mod a;\nmod b;\npub use a::Thing;\npub struct Shared;\n",
    )
    .unwrap();
    std::fs::write(module.join("a.rs"), "use super::b::helper;\npub struct Thing;\n").unwrap();
    std::fs::write(module.join("b.rs"), "use super::Thing;\npub fn helper() {}\n").unwrap();
    let module = modules_of(dir.path()).into_iter().find(|m| m.path == "m").unwrap();
    assert_eq!(circle(&file_edges(&module)).unwrap(), ["a", "b", "a"]);
    std::fs::write(dir.path().join("m/b.rs"), "pub fn helper() {}\n").unwrap();
    assert_eq!(circle(&file_edges(&module)), None);
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
