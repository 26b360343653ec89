//! A large document (from 1 MiB, `yaml::read`'s `PACK_FROM`), whose root `items` wait
//! packed while it is read, comes out as the same document in small pieces does: a
//! `List` item by item, as its text or from its tree, anything else whole.

use super::{Action, Format, Message, Summary, stream};
use crate::offline::objects;
use crate::template::TemplateSet;

/// What a run wrote and said.
#[derive(Debug, PartialEq)]
struct Run {
    out: String,
    messages: Vec<Message>,
    summary: Summary,
}

fn run(text: &str, action: Action<'_>, format: Format) -> Run {
    let mut out = Vec::new();
    let mut messages = Vec::new();
    let summary = stream(text.as_bytes(), &mut out, action, format, &mut |m| messages.push(m)).unwrap();
    Run {
        out: String::from_utf8(out).unwrap(),
        messages,
        summary,
    }
}

fn inject(text: &str, format: Format) -> Run {
    run(text, Action::Inject(&TemplateSet::embedded()), format)
}

fn deployment(i: usize) -> String {
    format!(
        "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web-{i}\n    labels: {{app: web, version: v1}}\n  spec:\n    replicas: 1\n    selector:\n      matchLabels: {{app: web}}\n    template:\n      metadata:\n        labels: {{app: web, version: v1}}\n      spec:\n        containers:\n        - name: web\n          image: nginx:1.27\n          ports:\n          - containerPort: 8080\n          volumeMounts:\n          - name: tmp\n            mountPath: /tmp\n        volumes:\n        - name: tmp\n          emptyDir: {{}}\n"
    )
}

/// A block `List`'s items: Deployments, some that fail (no containers; a port the
/// `classic` template takes), one that is not an object, and ones with an anchor and an
/// alias inside them (an addition goes into the anchored labels).
fn items(count: usize) -> Vec<String> {
    (0..count)
        .map(|i| match i % 50 {
            5 => format!("- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: no-containers-{i}\n  spec: {{}}\n"),
            7 => format!(
                "- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: clash-{i}\n    annotations:\n      sidecar.samplecrd.k8s.io/template: classic\n  spec:\n    containers:\n    - name: web\n      image: nginx\n      ports:\n      - containerPort: 80\n"
            ),
            9 => String::from("# not an object\n- just a string\n"),
            11 => format!(
                "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: anchored-{i}\n  spec:\n    selector:\n      matchLabels: &labels{i}\n        app: a{i}\n    template:\n      metadata:\n        labels: *labels{i}\n      spec:\n        containers:\n        - name: app\n          image: nginx\n"
            ),
            _ => deployment(i),
        })
        .collect()
}

/// Items enough for a large `List`.
const ITEMS: usize = 2300;
/// Items of a small one: well under 1 MiB.
const SMALL: usize = 400;
const HEAD: &str = "apiVersion: v1\nkind: List\nitems:\n";

/// A message with its numbers left out: an item's number and line differ between a
/// `List` and a piece of it.
fn unnumbered(message: &Message) -> String {
    let text = match message {
        Message::Note(m) => format!("note: {m}"),
        Message::Warning(m) => format!("warning: {m}"),
        Message::Error(m) => format!("error: {m}"),
    };
    text.chars().filter(|c| !c.is_ascii_digit()).collect()
}

/// `head`, `items` joined by `separator`, `tail`: a `List` injected whole and in pieces
/// of `SMALL` items comes out the same, its items' edits and messages alike, in `format`
/// (and, with `round_trip`, `uninject` gives the text back).
fn same_in_pieces(name: &str, head: &str, items: &[String], separator: &str, tail: &str, format: Format) {
    let text = format!("{head}{}{tail}", items.join(separator));
    assert!(text.len() >= 1 << 20, "{name}: {} bytes are not packed", text.len());
    let whole = inject(&text, format);
    let mut out = String::new();
    let mut messages = Vec::new();
    let mut failed = 0;
    for (k, piece) in items.chunks(SMALL).enumerate() {
        let small = inject(&format!("{head}{}{tail}", piece.join(separator)), format);
        let edited = match format {
            Format::Yaml => {
                let inner = small.out.strip_prefix(head).and_then(|o| o.strip_suffix(tail));
                let inner = inner.unwrap_or_else(|| panic!("{name}: the List's own text is kept"));
                match k {
                    0 => inner.to_string(),
                    _ => format!("{separator}{inner}"),
                }
            }
            _ => small.out,
        };
        out.push_str(&edited);
        messages.extend(small.messages.iter().map(unnumbered));
        failed += small.summary.failed;
    }
    let out = match format {
        Format::Yaml => format!("{head}{out}{tail}"),
        _ => out,
    };
    assert!(
        whole.out == out,
        "{name}: the List written whole differs from its pieces"
    );
    assert_eq!(
        whole.messages.iter().map(unnumbered).collect::<Vec<_>>(),
        messages,
        "{name}"
    );
    assert_eq!(whole.summary.failed, failed, "{name}");
}

#[test]
fn a_large_list_is_written_as_its_pieces_are() {
    let items = items(ITEMS);
    same_in_pieces("kind first", HEAD, &items, "", "", Format::Yaml);
    same_in_pieces("kind first, patches", HEAD, &items, "", "", Format::JsonPatch);
    let kind_last = "apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\n";
    same_in_pieces("kind last", "items:\n", &items, "", kind_last, Format::Yaml);
    let crlf: Vec<String> = items.iter().map(|i| i.replace('\n', "\r\n")).collect();
    same_in_pieces("CRLF", &HEAD.replace('\n', "\r\n"), &crlf, "", "", Format::Yaml);
    same_in_pieces(
        "a directive",
        &format!("%YAML 1.1\n---\n{HEAD}"),
        &items,
        "",
        "",
        Format::Yaml,
    );
    let flow: Vec<String> = (0..12_000)
        .map(|i| format!("{{apiVersion: v1, kind: Pod, metadata: {{name: p{i}}}, spec: {{containers: [{{name: c, image: nginx}}]}}}}"))
        .collect();
    same_in_pieces(
        "flow",
        "apiVersion: v1\nkind: List\nitems: [\n  ",
        &flow,
        ",\n  ",
        "\n]\n",
        Format::Yaml,
    );
}

#[test]
fn a_large_list_s_failed_items_are_named_and_the_rest_comes_back() {
    let text = format!("# a List\n{HEAD}{}", items(ITEMS).concat());
    let injected = inject(&text, Format::Yaml);
    // The failed items are named with the List's document and their own line.
    assert!(injected.summary.failed > 0);
    assert!(
        injected.messages.iter().any(|m| matches!(m, Message::Error(e)
            if e.starts_with("document 1 (List) at line 2, item 6 (Pod no-containers-5) at line "))),
        "{:?}",
        &injected.messages[..3]
    );
    // What was injected comes back out, the failed items left out.
    let kept: String = items(ITEMS)
        .into_iter()
        .enumerate()
        .filter(|(i, _)| ![5, 7].contains(&(i % 50)))
        .map(|(i, item)| match i % 50 {
            9 => String::from("# not an object\n"),
            _ => item,
        })
        .collect();
    let back = run(&injected.out, Action::Uninject, Format::Yaml);
    assert!(
        back.out == format!("# a List\n{HEAD}{kept}"),
        "uninject gives back what was kept"
    );
}

#[test]
fn a_large_document_that_is_not_such_a_list_is_written_whole() {
    let items = items(ITEMS).concat();
    let object = format!("apiVersion: x.io/v1\nkind: Foo\nmetadata:\n  name: f\nitems:\n{items}");
    let foo = inject(&object, Format::Yaml);
    assert!(foo.out == object, "an object with an items list is left as it is");
    assert!(
        matches!(&foo.messages[..], [Message::Note(n)] if n.contains("kind Foo (x.io/v1)")),
        "{:?}",
        foo.messages
    );

    let kind_again = format!("{HEAD}{items}kind: Foo\n");
    let foo = inject(&kind_again, Format::Yaml);
    assert!(foo.out == kind_again, "kind set again after items: not a List");
    assert_eq!(foo.summary.failed, 0);

    let not_yaml = format!("{HEAD}{items}foo: [\n");
    let broken = inject(&not_yaml, Format::Yaml);
    assert_eq!((broken.out.as_str(), broken.summary.failed), ("", 1));

    for (name, text) in [
        (
            "an alias into another item",
            format!("{HEAD}{items}")
                .replacen("name: web-1\n", "name: &first web-1\n", 1)
                .replacen("name: web-900\n", "name: *first\n", 1),
        ),
        (
            "an alias into the List's own fields",
            format!("apiVersion: v1\nkind: List\nmetadata: {{name: &list x}}\nitems:\n{items}").replacen(
                "name: web-900\n",
                "name: *list\n",
                1,
            ),
        ),
    ] {
        let anew = inject(&text, Format::Yaml);
        let warned = anew
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Warning(w) if w.contains("written anew") && w.contains("another item")))
            .count();
        assert_eq!(warned, 1, "{name}");
        let patches = inject(&text, Format::JsonPatch);
        assert_eq!(anew.summary, patches.summary, "{name}");
        // Written from its tree: every object the patches were made for, injected.
        let written = objects(&anew.out).unwrap();
        assert_eq!(written.len(), patches.out.lines().count(), "{name}");
        let injected = written
            .iter()
            .filter(|o| {
                o.object
                    .pointer("/spec/template/metadata/annotations/sidecar.samplecrd.k8s.io~1status")
                    .is_some()
            })
            .count();
        assert!(injected > ITEMS * 9 / 10, "{name}: {injected} injected");
    }
}
