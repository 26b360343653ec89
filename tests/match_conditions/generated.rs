//! The committed copies of the conditions are the engine's.

use std::path::{Path, PathBuf};

use envoy_injector::policies::webhook::{Entry, entries};

const MANIFEST: &str = "manifests/webhook.yaml";
const CHART: &str = "charts/envoy-injector/templates/_match-conditions.tpl";
const GENERATED_BY: &str =
    "Generated from crates/engine/src/policies/webhook.rs by `make generate`: edit there, not here.";

fn repo(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The entry's `matchConditions:` block, as YAML at the left margin.
fn block(entry: &Entry) -> String {
    let mut out = String::from("matchConditions:\n");
    for condition in &entry.conditions {
        let expression = &condition.expression;
        // A literal block keeps the expression as written; these would not survive one.
        assert!(
            !expression.starts_with(char::is_whitespace)
                && !expression
                    .lines()
                    .any(|line| line.trim().is_empty() || line.ends_with(' ')),
            "{}: expected an expression a YAML literal block keeps as it is (no leading space, blank line or trailing space), found:\n{expression}",
            entry.name
        );
        out.push_str(&format!("  - name: {}\n    expression: |-\n", condition.name));
        for line in expression.lines() {
            out.push_str(&format!("      {line}\n"));
        }
    }
    out
}

fn indented(text: &str, by: &str) -> String {
    text.lines().map(|line| format!("{by}{line}\n")).collect()
}

/// `manifests/webhook.yaml` with each entry's `matchConditions` block (and the comment
/// above it that says where it comes from) replaced by the generated one.
fn manifest(committed: &str) -> Result<String, String> {
    const INDENT: &str = "    ";
    let comment = format!("{INDENT}# {GENERATED_BY}");
    let header = format!("{INDENT}matchConditions:");
    let mut lines: Vec<String> = committed.lines().map(String::from).collect();
    for entry in entries() {
        let start = lines
            .iter()
            .position(|line| *line == format!("  - name: {}", entry.name))
            .ok_or_else(|| {
                format!(
                    "{MANIFEST}: expected a webhook entry `  - name: {}`, found none",
                    entry.name
                )
            })?;
        let at = (start + 1..lines.len())
            .take_while(|&i| !lines[i].starts_with("  - "))
            .find(|&i| lines[i] == header)
            .ok_or_else(|| {
                format!(
                    "{MANIFEST}: expected `{}` in webhook entry {}, found none",
                    header.trim(),
                    entry.name
                )
            })?;
        let from = if at > 0 && lines[at - 1] == comment { at - 1 } else { at };
        // The block is every line after the header indented deeper than it.
        let to = (at + 1..lines.len())
            .find(|&i| !lines[i].starts_with(&format!("{INDENT}  ")))
            .unwrap_or(lines.len());
        let generated = format!("{comment}\n{}", indented(&block(&entry), INDENT));
        lines.splice(from..to, generated.lines().map(String::from));
    }
    Ok(lines.iter().map(|line| format!("{line}\n")).collect())
}

/// The name the chart's template includes an entry's conditions by.
fn chart_define(entry: &Entry) -> String {
    let first = entry.name.split('.').next().unwrap_or(entry.name);
    format!("envoy-injector.matchConditions.{first}")
}

/// The chart's `_match-conditions.tpl`: one named template per entry.
fn chart() -> String {
    let mut out = format!(
        "{{{{- /*\n{GENERATED_BY}\nEach webhook entry's matchConditions, which templates/webhook.yaml includes.\n*/ -}}}}\n"
    );
    for entry in entries() {
        let block = block(&entry);
        assert!(
            !block.contains("{{") && !block.contains("}}"),
            "{}: expected conditions without Helm's delimiters, found:\n{block}",
            entry.name
        );
        out.push_str(&format!(
            "\n{{{{- define \"{}\" -}}}}\n{block}{{{{- end }}}}\n",
            chart_define(&entry)
        ));
    }
    out
}

#[test]
fn committed_match_conditions_are_the_generated_ones() {
    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let read = |path: &str| std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let files = [
        (MANIFEST, manifest(&read(MANIFEST)).unwrap_or_else(|e| panic!("{e}"))),
        (CHART, chart()),
    ];
    let mut stale = Vec::new();
    for (path, generated) in files {
        if std::fs::read_to_string(repo(path)).ok().as_deref() == Some(generated.as_str()) {
            continue;
        }
        if update {
            std::fs::write(repo(path), &generated).unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
            eprintln!("wrote {path}");
        } else {
            stale.push(path);
        }
    }
    assert!(
        stale.is_empty(),
        "stale: {}: expected the matchConditions crates/engine/src/policies/webhook.rs writes, found others; regenerate with `make generate`",
        stale.join(" and ")
    );
}

#[test]
fn the_chart_includes_every_entrys_conditions_once() {
    let template = std::fs::read_to_string(repo("charts/envoy-injector/templates/webhook.yaml"))
        .expect("the chart's webhook template");
    for entry in entries() {
        let include = format!("include \"{}\"", chart_define(&entry));
        assert_eq!(
            template.matches(&include).count(),
            1,
            "charts/envoy-injector/templates/webhook.yaml: expected `{include}` once, for entry {}",
            entry.name
        );
    }
}
