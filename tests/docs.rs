//! The documentation holds together: every relative link and anchor in `README.md` and
//! `docs/` resolves, every command and flag that `--help` lists is documented in
//! `docs/commands.md` (in the command's own section), and `make help` lists every target.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use regex::Regex;

const BIN: &str = env!("CARGO_BIN_EXE_envoy-injector");

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `README.md` and every Markdown file under `docs/`.
fn documents() -> Vec<PathBuf> {
    let mut files = vec![repo().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The text outside fenced code blocks, line by line (inline code stays: links sit
/// beside it).
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((index + 1, line));
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits, `-`,
/// `_` and spaces kept), spaces turned into `-`; a repeated heading gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose(text) {
        let Some(heading) = line.strip_prefix('#').map(|h| h.trim_start_matches('#')) else {
            continue;
        };
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    out
}

#[test]
fn the_slug_rule_is_githubs() {
    let text = "# Install, upgrade, uninstall\n## `check`\n## failurePolicy: why `Fail`, and why it is safe\n## Pods that run (`tests/pods/`)\n## `check`\n```\n# not a heading\n```\n";
    let found = anchors(text);
    for expected in [
        "install-upgrade-uninstall",
        "check",
        "check-1",
        "failurepolicy-why-fail-and-why-it-is-safe",
        "pods-that-run-testspods",
    ] {
        assert!(found.contains(expected), "{expected} not in {found:?}");
    }
    assert!(!found.contains("not-a-heading"), "{found:?}");
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in documents() {
        let text = std::fs::read_to_string(&file).unwrap();
        let shown = file.strip_prefix(repo()).unwrap().display().to_string();
        for (line_no, line) in prose(&text) {
            for found in link.captures_iter(line) {
                let target = &found[1];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let resolved = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                if !resolved.exists() {
                    broken.push(format!("{shown}:{line_no}: {target}: no such file"));
                    continue;
                }
                if anchor.is_empty() {
                    continue;
                }
                let in_target = if resolved.extension().is_some_and(|e| e == "md") {
                    anchors(&std::fs::read_to_string(&resolved).unwrap())
                } else {
                    BTreeSet::new()
                };
                if !in_target.contains(anchor) {
                    broken.push(format!("{shown}:{line_no}: {target}: no heading gives #{anchor}"));
                }
            }
        }
    }
    assert!(
        checked > 20,
        "expected the documents to link to each other, found {checked} links"
    );
    assert!(broken.is_empty(), "links that do not resolve:\n{}", broken.join("\n"));
}

fn help(args: &[&str]) -> String {
    let out = Command::new(BIN)
        .args(args)
        .arg("--help")
        .output()
        .expect("the binary runs");
    assert!(
        out.status.success(),
        "{args:?} --help: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommands the top-level help lists (without `help`).
fn subcommands(top: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut listing = false;
    for line in top.lines() {
        if line.trim_end() == "Commands:" {
            listing = true;
            continue;
        }
        if listing {
            let Some(name) = line.strip_prefix("  ").and_then(|l| l.split_whitespace().next()) else {
                break;
            };
            if name != "help" {
                out.push(name.to_string());
            }
        }
    }
    out
}

/// The flags (`--long`, `-s`) and positional arguments (`POD`) a help text lists.
fn options(help: &str) -> BTreeSet<String> {
    let flag = Regex::new(r"^\s{2,}(?:(-[a-zA-Z]), )?(--[a-z0-9-]+)|^\s{2,}(-[a-zA-Z])\b").unwrap();
    let positional = Regex::new(r"^\s{2,}[\[<]([A-Z_]+)[\]>]").unwrap();
    let mut out = BTreeSet::new();
    for line in help.lines() {
        if let Some(found) = flag.captures(line) {
            for group in [1, 2, 3] {
                if let Some(m) = found.get(group) {
                    out.insert(m.as_str().to_string());
                }
            }
        } else if let Some(found) = positional.captures(line) {
            out.insert(found[1].to_string());
        }
    }
    out
}

/// The text of `docs/commands.md` under the `## heading` whose title is `title`, up to
/// the next `## ` heading.
fn section<'a>(text: &'a str, title: &str) -> Option<&'a str> {
    let start = text.find(&format!("\n## {title}\n"))? + 1;
    let rest = &text[start..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    Some(&rest[..end])
}

/// Whether `option` is written in `text` as a whole flag (not a prefix of a longer one).
fn mentions(text: &str, option: &str) -> bool {
    let pattern = format!(r"(^|[^a-zA-Z0-9-]){}($|[^a-zA-Z0-9-])", regex::escape(option));
    Regex::new(&pattern).unwrap().is_match(text)
}

#[test]
fn every_command_and_flag_help_lists_is_in_the_commands_page() {
    let page = std::fs::read_to_string(repo().join("docs/commands.md")).unwrap();
    let top = help(&[]);
    let global = section(&page, "Global flags").expect("docs/commands.md has `## Global flags`");
    let mut missing = Vec::new();
    for option in options(&top) {
        if !mentions(global, &option) {
            missing.push(format!("global {option}: not under `## Global flags`"));
        }
    }
    let commands = subcommands(&top);
    assert!(commands.len() >= 6, "expected the command list in:\n{top}");
    for command in commands {
        let Some(text) = section(&page, &format!("`{command}`")) else {
            missing.push(format!("command `{command}`: no `## `{command}`` section"));
            continue;
        };
        for option in options(&help(&[&command])) {
            if !mentions(text, &option) && !mentions(global, &option) {
                missing.push(format!("`{command} {option}`: not in its section"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/commands.md leaves out:\n{}",
        missing.join("\n")
    );
}

/// The option reader finds what clap prints, so the test above cannot pass by reading
/// nothing.
#[test]
fn the_option_reader_finds_flags_and_arguments() {
    let found = options(&help(&["check"]));
    for expected in [
        "POD",
        "-n",
        "--namespace",
        "-f",
        "--filename",
        "--stale",
        "--lease-name",
        "--log-level",
        "-h",
    ] {
        assert!(found.contains(expected), "{expected} not in {found:?}");
    }
    assert!(!mentions("`--tls-secret-name`", "--tls-secret"));
    assert!(mentions("| `--tls-secret NAME` |", "--tls-secret"));
}

#[test]
fn make_help_lists_every_target() {
    let makefile = std::fs::read_to_string(repo().join("Makefile")).unwrap();
    let target = Regex::new(r"^([a-z0-9-]+):([^=]|$)").unwrap();
    let undocumented: Vec<&str> = makefile
        .lines()
        .filter_map(|line| Some((target.captures(line)?.get(1)?.as_str(), line)))
        .filter(|(_, line)| !line.contains("## "))
        .map(|(name, _)| name)
        .collect();
    assert!(
        undocumented.is_empty(),
        "targets `make help` does not list (add `## what it does` after the target): {undocumented:?}"
    );
}
