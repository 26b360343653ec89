//! A large `List` handed over while it is read (`handed`) comes out exactly as it does
//! read whole: output, messages and counts, whichever way the document turns out.

use super::{Action, Format, Message, Settings, Summary, stream};
use crate::template::TemplateSet;

/// What a run wrote and said, and how many Lists it wrote from handed work.
#[derive(Debug, PartialEq)]
struct Run {
    out: String,
    messages: Vec<Message>,
    summary: Summary,
    handed_lists: usize,
}

fn run(text: &str, action: Action<'_>, settings: Settings) -> Run {
    let mut out = Vec::new();
    let mut messages = Vec::new();
    let (summary, handed_lists) = stream(
        text.as_bytes(),
        &mut out,
        action,
        Format::Yaml,
        &mut |m| messages.push(m),
        settings,
    )
    .unwrap();
    Run {
        out: String::from_utf8(out).unwrap(),
        messages,
        summary,
        handed_lists,
    }
}

const WHOLE: Settings = Settings {
    hand_over: false,
    hold_at_most: None,
};

fn deployment(i: usize) -> String {
    format!(
        "- apiVersion: apps/v1\n  kind: Deployment\n  metadata:\n    name: web-{i}\n    labels: {{app: web, version: v1}}\n  spec:\n    replicas: 1\n    selector:\n      matchLabels: {{app: web}}\n    template:\n      metadata:\n        labels: {{app: web, version: v1}}\n      spec:\n        containers:\n        - name: web\n          image: nginx:1.27\n          ports:\n          - containerPort: 8080\n          volumeMounts:\n          - name: tmp\n            mountPath: /tmp\n        volumes:\n        - name: tmp\n          emptyDir: {{}}\n"
    )
}

/// Items enough for a piece that is handed over (1 MiB), with some that fail (no
/// containers; a port the `classic` template takes), one that is not an object, and
/// ones with an anchor and an alias inside them (an addition goes into the anchored
/// labels).
fn items(from: usize, count: usize) -> String {
    (from..from + count)
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

const ITEMS: usize = 2300;
const HEAD: &str = "apiVersion: v1\nkind: List\nitems:\n";

/// Injects `text` handed over and read whole, and holds that both come out the same;
/// `all` also with every item waiting for the end and for `uninject` of the output.
/// Returns how many Lists the handed run wrote from handed work.
fn same_either_way(name: &str, text: &str, all: bool) -> usize {
    assert!(
        text.len() >= 1 << 20,
        "{name}: {} bytes are not handed over",
        text.len()
    );
    let templates = TemplateSet::embedded();
    let whole = run(text, Action::Inject(&templates), WHOLE);
    let handed = run(text, Action::Inject(&templates), Settings::default());
    assert_eq!(handed.out, whole.out, "{name}");
    assert_eq!(handed.messages, whole.messages, "{name}");
    assert_eq!(handed.summary, whole.summary, "{name}");
    assert_eq!(whole.handed_lists, 0, "{name}");
    if !all {
        return handed.handed_lists;
    }
    // With nothing held, every item waits for the end: the same again.
    let waiting = run(
        text,
        Action::Inject(&templates),
        Settings {
            hold_at_most: Some(0),
            ..Settings::default()
        },
    );
    assert_eq!(waiting, handed, "{name}");
    let back_whole = run(&whole.out, Action::Uninject, WHOLE);
    let back = run(&whole.out, Action::Uninject, Settings::default());
    assert_eq!(back.out, back_whole.out, "{name}");
    assert_eq!(back.messages, back_whole.messages, "{name}");
    assert_eq!(back.summary, back_whole.summary, "{name}");
    handed.handed_lists
}

#[test]
fn a_list_with_kind_before_items_is_written_from_the_handed_items() {
    let text = format!("# a List\n{HEAD}{}", items(0, ITEMS));
    assert_eq!(same_either_way("kind first", &text, true), 1);
    let run = run(&text, Action::Inject(&TemplateSet::embedded()), Settings::default());
    // The failed items are named with the List's document and their own line.
    assert!(run.summary.failed > 0);
    assert!(
        run.messages.iter().any(|m| matches!(m, Message::Error(e)
            if e.starts_with("document 1 (List) at line 2, item 6 (Pod no-containers-5) at line "))),
        "{:?}",
        &run.messages[..3]
    );
}

#[test]
fn a_list_with_kind_after_items_as_kubectl_writes_it_is_written_from_the_handed_items() {
    let text = format!(
        "items:\n{}apiVersion: v1\nkind: List\nmetadata:\n  resourceVersion: \"\"\n",
        items(0, ITEMS)
    );
    assert_eq!(same_either_way("kind last", &text, true), 1);
    let crlf = text.replace('\n', "\r\n");
    assert_eq!(same_either_way("CRLF", &crlf, false), 1);
    let directive = format!("%YAML 1.1\n---\n{HEAD}{}", items(0, ITEMS));
    assert_eq!(same_either_way("a directive", &directive, false), 1);
}

#[test]
fn a_flow_list_is_written_from_the_handed_items() {
    let items: Vec<String> = (0..12_000)
        .map(|i| format!("{{apiVersion: v1, kind: Pod, metadata: {{name: p{i}}}, spec: {{containers: [{{name: c, image: nginx}}]}}}}"))
        .collect();
    let text = format!("apiVersion: v1\nkind: List\nitems: [\n  {}\n]\n", items.join(",\n  "));
    assert_eq!(same_either_way("flow", &text, false), 1);
}

#[test]
fn what_is_not_such_a_list_after_all_is_read_again_and_written_as_before() {
    let cases = [
        (
            "an object with an items list",
            format!(
                "apiVersion: x.io/v1\nkind: Foo\nmetadata:\n  name: f\nitems:\n{}",
                items(0, ITEMS)
            ),
        ),
        (
            "items twice",
            format!(
                "{HEAD}{}metadata: {{}}\nitems:\n{}",
                items(0, ITEMS / 2),
                items(ITEMS, ITEMS / 2 + 40)
            ),
        ),
        (
            "kind set again after items",
            format!("{HEAD}{}kind: Foo\n", items(0, ITEMS)),
        ),
        (
            "an alias into another item",
            format!("{HEAD}{}", items(0, ITEMS))
                .replacen("name: web-1\n", "name: &first web-1\n", 1)
                .replacen("name: web-900\n", "name: *first\n", 1),
        ),
        (
            "an alias into the List's own fields",
            format!(
                "apiVersion: v1\nkind: List\nmetadata: {{name: &list x}}\nitems:\n{}",
                items(0, ITEMS)
            )
            .replacen("name: web-900\n", "name: *list\n", 1),
        ),
        ("not YAML at its end", format!("{HEAD}{}foo: [\n", items(0, ITEMS))),
    ];
    for (name, text) in cases {
        assert_eq!(same_either_way(name, &text, false), 0, "{name}");
    }
}
