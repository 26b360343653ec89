//! `inject` keeps the user's text: every byte of the input is in the output, in order,
//! and only what the injection adds is new; `uninject` gives the input back byte for
//! byte. Checked over manifests generated in every style a hand-written one uses (block
//! and flow, block lists of flow maps, JSON, two- and four-space indentation, indented
//! list dashes, quoting, folded and literal scalars, comments, anchors, CRLF, a missing
//! last line break), and over the offline corpus and the sample manifests the other tests use. Each check also
//! reads the output back: it holds exactly the input's objects with the injection's
//! patch applied.
//!
//! The templates are fixtures of this file, not the default template: what is checked
//! is where and how additions are written, whatever they are.

use std::cell::RefCell;
use std::path::Path;

use envoy_injector::offline::run::{Format, Message, inject_stream, uninject_stream};
use envoy_injector::template::TemplateSet;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;

/// A template that adds every kind of thing: an init container, a sidecar, a volume, a
/// mount into every app container, a pull secret (and the status and revision label).
const EVERYTHING: &str = "initContainers:\n- {name: setup, image: busybox}\ncontainers:\n- name: proxy\n  image: envoy:v1\n  args: [--config, /etc/proxy/proxy.yaml, --log-level, 'on']\n  ports: [{containerPort: 15001}]\n  resources: {limits: {cpu: 500m, memory: 128Mi}}\nvolumes:\n- {name: proxy-certs, emptyDir: {}}\nvolumeMounts:\n- {name: proxy-certs, mountPath: /etc/certs}\nimagePullSecrets:\n- name: registry\n";

/// The same as native sidecars: added at the front of `initContainers`.
const NATIVE: &str = "nativeSidecar: true\ncontainers:\n- name: proxy\n  image: envoy:v1\n  command: [/bin/proxy, \"--multi\\nline\"]\nvolumes:\n- {name: proxy-certs, emptyDir: {}}\nvolumeMounts:\n- {name: proxy-certs, mountPath: /etc/certs}\n";

fn templates() -> Vec<TemplateSet> {
    [EVERYTHING, NATIVE]
        .iter()
        .map(|text| TemplateSet::from_text("fixture", text, envoy_injector::template::KubeVersion::NEWEST).unwrap())
        .collect()
}

/// What a run wrote and said.
struct Run {
    out: String,
    messages: Vec<Message>,
}

fn inject(text: &str, templates: &TemplateSet, format: Format) -> Run {
    let mut out = Vec::new();
    let mut messages = Vec::new();
    let summary = inject_stream(text.as_bytes(), &mut out, templates, format, &mut |m| messages.push(m)).unwrap();
    assert_eq!(summary.failed, 0, "{messages:?}\n{text}");
    Run {
        out: String::from_utf8(out).unwrap(),
        messages,
    }
}

fn uninject(text: &str) -> Run {
    let mut out = Vec::new();
    let mut messages = Vec::new();
    let summary = uninject_stream(text.as_bytes(), &mut out, Format::Yaml, &mut |m| messages.push(m)).unwrap();
    assert_eq!(summary.failed, 0, "{messages:?}\n{text}");
    Run {
        out: String::from_utf8(out).unwrap(),
        messages,
    }
}

/// How many bytes of `input` are in `output`, in order: all of them when the output is
/// the input with text inserted (greedy matching finds a subsequence when there is one).
fn kept_in_order(input: &str, output: &str) -> usize {
    let mut rest = output.as_bytes().iter();
    input.as_bytes().iter().take_while(|&&b| rest.any(|&o| o == b)).count()
}

/// The objects of a manifest as kubectl reads them (a List gives its items).
fn objects(text: &str) -> Vec<Value> {
    let mut objects = Vec::new();
    for chunk in envoy_injector::yaml::split::YamlChunks::new(text.as_bytes()) {
        let chunk = chunk.unwrap();
        for mut document in envoy_injector::yaml::read::read_documents(&chunk.text, chunk.first_line).unwrap() {
            document.unpack();
            let Some(root) = document.root else { continue };
            let json = root.to_json();
            match json["items"].as_array() {
                Some(items) if json["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                    objects.extend(items.iter().cloned())
                }
                _ => objects.push(json),
            }
        }
    }
    objects
}

/// The figures of one input: bytes of it not kept in the output, whether the output
/// reads as the input plus the patches, whether `uninject` gives it back.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Figures {
    inputs: usize,
    injected: usize,
    bytes_changed: usize,
    round_trips: usize,
}

/// Injects `text` with `templates`, checks the output, and counts.
fn check(text: &str, templates: &TemplateSet, figures: &mut Figures) -> Result<(), String> {
    let run = inject(text, templates, Format::Yaml);
    let anew: Vec<&Message> = run
        .messages
        .iter()
        .filter(|m| matches!(m, Message::Warning(w) if w.contains("written anew")))
        .collect();
    if !anew.is_empty() {
        return Err(format!("written anew: {anew:?}\n{text}"));
    }
    figures.inputs += 1;
    figures.injected += run.out.matches("sidecar.samplecrd.k8s.io/status").count();
    figures.bytes_changed += text.len() - kept_in_order(text, &run.out);
    // The output reads as the input with each object's patch applied.
    let patches = inject(text, templates, Format::JsonPatch);
    let patches: Vec<json_patch::Patch> = patches.out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let before = objects(text);
    let after = objects(&run.out);
    if before.len() != patches.len() || after.len() != before.len() {
        return Err(format!("{} objects in, {} out\n{}", before.len(), after.len(), run.out));
    }
    for ((mut object, patch), got) in before.into_iter().zip(patches).zip(after) {
        json_patch::patch(&mut object, &patch).unwrap();
        if object != got {
            return Err(format!(
                "an object reads back different:\n{object:#}\n{got:#}\n{}",
                run.out
            ));
        }
    }
    let back = uninject(&run.out);
    match back.out == text {
        true => figures.round_trips += 1,
        false => {
            return Err(format!(
                "uninject gave\n{}\nfor the input\n{text}\ninjected as\n{}",
                back.out, run.out
            ));
        }
    }
    Ok(())
}

mod generated {
    //! Manifests drawn at random, written by hand here (not by the injector's writer).

    use super::*;

    /// A YAML node and how it is written.
    #[derive(Debug, Clone)]
    pub enum Y {
        /// A scalar as written (quoted or plain).
        S(String),
        /// A folded (`>-`) or literal (`|`) block scalar: its indicator and lines.
        Block(&'static str, Vec<String>),
        Map(Vec<(String, Y)>, bool),
        Seq(Vec<Y>, bool),
        /// An anchor on a node.
        Anchored(&'static str, Box<Y>),
        Alias(&'static str),
        /// A comment after the value (on its key's line for a block collection).
        Noted(Box<Y>, &'static str),
    }

    fn s(text: &str) -> Y {
        Y::S(text.to_string())
    }

    /// How a document is laid out.
    #[derive(Debug, Clone, Copy)]
    pub struct Layout {
        pub step: usize,
        pub dashes_indented: bool,
        /// Flow throughout, keys and strings double-quoted.
        pub json: bool,
    }

    impl Y {
        /// The node in flow style; `json`: as JSON (keys and strings double-quoted, no
        /// anchors).
        fn flow(&self, out: &mut String, json: bool) {
            match self {
                Y::S(text) if json => out.push_str(&json_scalar(text)),
                Y::S(text) => out.push_str(text),
                Y::Block(indicator, lines) => {
                    let joint = if indicator.starts_with('|') { "\n" } else { " " };
                    out.push_str(&serde_json::to_string(&lines.join(joint)).unwrap());
                }
                Y::Map(entries, _) => {
                    out.push('{');
                    for (i, (key, value)) in entries.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        match json {
                            true => out.push_str(&serde_json::to_string(key).unwrap()),
                            false => out.push_str(key),
                        }
                        out.push_str(": ");
                        value.flow(out, json);
                    }
                    out.push('}');
                }
                Y::Seq(items, _) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push_str(", ");
                        }
                        item.flow(out, json);
                    }
                    out.push(']');
                }
                Y::Anchored(name, inner) => {
                    if !json {
                        out.push_str(&format!("&{name} "));
                    }
                    inner.flow(out, json);
                }
                Y::Alias(_) if json => out.push_str("null"),
                Y::Alias(name) => out.push_str(&format!("*{name}")),
                Y::Noted(inner, _) => inner.flow(out, json),
            }
        }

        fn is_block_collection(&self) -> bool {
            match self {
                Y::Map(entries, flow) => !flow && !entries.is_empty(),
                Y::Seq(items, flow) => !flow && !items.is_empty(),
                Y::Anchored(_, inner) | Y::Noted(inner, _) => inner.is_block_collection(),
                _ => false,
            }
        }

        /// The value after `key:` (or `- `), then its lines at `indent` (a block map's
        /// keys; a block list's dashes go where the layout puts them).
        fn after_key(&self, out: &mut String, indent: usize, layout: Layout) {
            match self {
                Y::Noted(inner, note) if inner.is_block_collection() => {
                    out.push_str(&format!(" # {note}"));
                    inner.after_key(out, indent, layout);
                }
                Y::Noted(inner, note) => {
                    inner.after_key(out, indent, layout);
                    // The line break is the inner value's last character.
                    out.pop();
                    out.push_str(&format!(" # {note}\n"));
                }
                Y::Anchored(name, inner) => {
                    out.push_str(&format!(" &{name}"));
                    match inner.is_block_collection() {
                        true => inner.after_key(out, indent, layout),
                        false => {
                            out.push(' ');
                            inner.flow(out, false);
                            out.push('\n');
                        }
                    }
                }
                Y::Block(indicator, lines) => {
                    out.push_str(&format!(" {indicator}\n"));
                    for line in lines {
                        out.push_str(&format!("{}{line}\n", " ".repeat(indent + layout.step)));
                    }
                }
                Y::Map(entries, false) if !entries.is_empty() => {
                    out.push('\n');
                    map_lines(out, entries, indent + layout.step, layout);
                }
                Y::Seq(items, false) if !items.is_empty() => {
                    out.push('\n');
                    let dashes = indent + if layout.dashes_indented { layout.step } else { 0 };
                    seq_lines(out, items, dashes, layout);
                }
                _ => {
                    out.push(' ');
                    self.flow(out, false);
                    out.push('\n');
                }
            }
        }
    }

    pub fn map_lines(out: &mut String, entries: &[(String, Y)], indent: usize, layout: Layout) {
        for (key, value) in entries {
            out.push_str(&" ".repeat(indent));
            out.push_str(key);
            out.push(':');
            value.after_key(out, indent, layout);
        }
    }

    fn seq_lines(out: &mut String, items: &[Y], dashes: usize, layout: Layout) {
        for item in items {
            out.push_str(&" ".repeat(dashes));
            out.push('-');
            match item {
                Y::Map(entries, false) if !entries.is_empty() => {
                    // The first key on the dash's line, the others under it.
                    let mut first = String::new();
                    map_lines(&mut first, &entries[..1], dashes + 2, layout);
                    out.push(' ');
                    out.push_str(first.trim_start_matches(' '));
                    map_lines(out, &entries[1..], dashes + 2, layout);
                }
                Y::Block(indicator, lines) => {
                    out.push_str(&format!(" {indicator}\n"));
                    for line in lines {
                        out.push_str(&format!("{}{line}\n", " ".repeat(dashes + 2)));
                    }
                }
                other => {
                    out.push(' ');
                    other.flow(out, false);
                    out.push('\n');
                }
            }
        }
    }

    /// What a document's Pod is made of, drawn at random.
    #[derive(Debug, Clone)]
    pub struct Pod {
        pub kind: usize,
        pub layout: Layout,
        pub metadata: usize,
        pub labels: usize,
        pub annotations: usize,
        pub containers: Vec<(usize, usize)>,
        pub containers_flow: bool,
        pub volumes: usize,
        pub secrets: usize,
        pub init: usize,
        pub runs_to_completion: bool,
    }

    fn map(entries: Vec<(&str, Y)>, flow: bool) -> Y {
        Y::Map(entries.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), flow)
    }

    /// A container; `in_flow`: it is written in a flow collection (where an empty list
    /// the injection fills comes back absent: see `docs/commands.md`).
    fn container(i: usize, (style, mounts): (usize, usize), in_flow: bool) -> Y {
        let in_flow = in_flow || style % 4 == 3;
        let name = format!("app{i}");
        let mut entries = vec![
            ("name", Y::S(name.clone())),
            ("image", s("\"registry.example/app:1.0\"")),
        ];
        entries.push(match style % 3 {
            0 => (
                "command",
                Y::Seq(vec![s("\"sh\""), s("\"-c\""), s("'exec app --port=8080'")], true),
            ),
            1 => (
                "args",
                Y::Seq(
                    vec![
                        Y::Block(">-", vec!["--long-option".into(), "folded".into()]),
                        s("'yes'"),
                    ],
                    false,
                ),
            ),
            _ => (
                "args",
                Y::Noted(Box::new(Y::Seq(vec![s("--x"), s("\"0644\"")], false)), "kept"),
            ),
        });
        entries.push((
            "ports",
            Y::Seq(vec![map(vec![("containerPort", s("8080"))], true)], true),
        ));
        entries.push((
            "env",
            Y::Seq(
                vec![
                    map(vec![("name", s("A")), ("value", s("\"yes\""))], style % 2 == 0),
                    map(
                        vec![
                            ("name", s("B")),
                            ("value", Y::Block("|", vec!["two".into(), "lines".into()])),
                        ],
                        false,
                    ),
                ],
                false,
            ),
        ));
        let mount = |flow| map(vec![("name", s("data")), ("mountPath", s("/data"))], flow);
        match mounts % 5 {
            0 => {}
            1 => entries.push(("volumeMounts", Y::Seq(vec![mount(false)], false))),
            2 => entries.push(("volumeMounts", Y::Seq(vec![mount(true)], false))),
            3 => entries.push(("volumeMounts", Y::Seq(vec![mount(true)], true))),
            _ if in_flow => entries.push(("volumeMounts", Y::Seq(vec![mount(true)], true))),
            _ => entries.push(("volumeMounts", Y::Seq(Vec::new(), true))),
        }
        if style % 4 == 3 {
            // A container written as one flow map.
            let Y::Map(entries, _) = map(entries, true) else {
                unreachable!()
            };
            return Y::Map(entries, true);
        }
        map(entries, false)
    }

    impl Pod {
        fn kind(&self) -> &'static str {
            ["Pod", "Deployment", "Job", "CronJob"][self.kind]
        }

        /// The Pod (or Pod template) map.
        fn pod(&self, alias_labels: bool) -> Vec<(&'static str, Y)> {
            // An empty map or list in a flow collection, filled by the injection, comes
            // back absent (see `docs/commands.md`): not drawn there.
            let flow_metadata = self.metadata % 3 == 2 || self.layout.json;
            let mut metadata: Vec<(&str, Y)> = Vec::new();
            if self.kind == 0 {
                metadata.push(("name", s("web")));
            }
            match self.labels % 4 {
                0 => {}
                1 => metadata.push(("labels", map(vec![("app", s("web")), ("tier", s("\"1.0\""))], false))),
                2 => metadata.push(("labels", map(vec![("app", s("web"))], true))),
                _ if alias_labels => metadata.push(("labels", Y::Noted(Box::new(Y::Alias("labels")), "shared"))),
                _ => metadata.push(("labels", map(Vec::new(), true))),
            }
            match self.annotations % 4 {
                0 => {}
                1 => metadata.push((
                    "annotations",
                    Y::Noted(
                        Box::new(map(
                            vec![
                                ("prometheus.io/scrape", s("\"true\"")),
                                ("example.com/note", Y::Block(">-", vec!["folded".into(), "note".into()])),
                            ],
                            false,
                        )),
                        "mine",
                    ),
                )),
                2 => metadata.push(("annotations", map(vec![("a", s("'on'"))], true))),
                _ if flow_metadata => metadata.push(("annotations", map(vec![("b", s("\"\""))], true))),
                _ => metadata.push(("annotations", map(Vec::new(), true))),
            }
            let mut pod: Vec<(&str, Y)> = Vec::new();
            match self.metadata % 3 {
                0 if metadata.is_empty() => {}
                2 => pod.push(("metadata", map(metadata, true))),
                _ => pod.push(("metadata", map(metadata, false))),
            }
            let mut spec: Vec<(&str, Y)> = Vec::new();
            if self.runs_to_completion || self.kind >= 2 {
                spec.push(("restartPolicy", s("Never")));
            }
            let init = |flow| map(vec![("name", s("migrate")), ("image", s("busybox"))], flow);
            match self.init % 4 {
                0 => {}
                1 => spec.push(("initContainers", Y::Seq(vec![init(false)], false))),
                // A block list of flow maps.
                2 => spec.push(("initContainers", Y::Seq(vec![init(true)], false))),
                _ => spec.push(("initContainers", Y::Seq(vec![init(false)], true))),
            }
            let containers: Vec<Y> = self
                .containers
                .iter()
                .enumerate()
                .map(|(i, c)| container(i, *c, self.containers_flow || self.layout.json))
                .collect();
            spec.push(("containers", Y::Seq(containers, self.containers_flow)));
            let volume = |flow| map(vec![("name", s("data")), ("emptyDir", map(Vec::new(), true))], flow);
            match self.volumes % 5 {
                0 => {}
                1 => spec.push(("volumes", Y::Seq(vec![volume(false)], false))),
                2 => spec.push(("volumes", Y::Seq(vec![volume(false)], true))),
                // A block list of flow maps.
                4 => spec.push(("volumes", Y::Seq(vec![volume(true)], false))),
                _ if self.layout.json => spec.push(("volumes", Y::Seq(vec![volume(false)], true))),
                _ => spec.push(("volumes", Y::Seq(Vec::new(), true))),
            }
            match self.secrets % 3 {
                0 => {}
                1 => spec.push((
                    "imagePullSecrets",
                    Y::Seq(vec![map(vec![("name", s("mine"))], false)], false),
                )),
                _ => spec.push((
                    "imagePullSecrets",
                    Y::Seq(vec![map(vec![("name", s("mine"))], true)], true),
                )),
            }
            pod.push(("spec", map(spec, false)));
            pod
        }

        /// The document's root map.
        pub fn document(&self) -> Vec<(&'static str, Y)> {
            let mut root = vec![
                ("apiVersion", s(if self.kind == 0 { "v1" } else { "apps/v1" })),
                ("kind", s(self.kind())),
            ];
            if self.kind != 0 {
                root.push(("metadata", map(vec![("name", s("web"))], false)));
            }
            let alias = self.kind == 1 && !self.layout.json;
            match self.kind {
                0 => root.extend(self.pod(false)),
                1 => root.push((
                    "spec",
                    map(
                        vec![
                            (
                                "selector",
                                map(
                                    vec![(
                                        "matchLabels",
                                        match alias {
                                            true => {
                                                Y::Anchored("labels", Box::new(map(vec![("app", s("web"))], false)))
                                            }
                                            false => map(vec![("app", s("web"))], false),
                                        },
                                    )],
                                    false,
                                ),
                            ),
                            ("template", map(self.pod(alias), false)),
                        ],
                        false,
                    ),
                )),
                2 => root.push(("spec", map(vec![("template", map(self.pod(false), false))], false))),
                _ => root.push((
                    "spec",
                    map(
                        vec![
                            ("schedule", s("\"0 3 * * *\"")),
                            (
                                "jobTemplate",
                                map(
                                    vec![("spec", map(vec![("template", map(self.pod(false), false))], false))],
                                    false,
                                ),
                            ),
                        ],
                        false,
                    ),
                )),
            }
            root
        }

        pub fn text(&self) -> String {
            let root = self.document();
            let mut out = String::new();
            if self.layout.json {
                // JSON: keys and strings double-quoted; the generator's scalars are
                // written as JSON strings.
                Y::Map(root.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), true).flow(&mut out, true);
                out.push('\n');
            } else {
                map_lines(
                    &mut out,
                    &root.into_iter().map(|(k, v)| (k.to_string(), v)).collect::<Vec<_>>(),
                    0,
                    self.layout,
                );
            }
            out
        }
    }

    /// A scalar as JSON: a number stays one, quotes become JSON's.
    fn json_scalar(text: &str) -> String {
        let plain = text.trim_matches(|c| c == '"' || c == '\'');
        match plain.parse::<i64>() {
            Ok(n) if plain == text => n.to_string(),
            _ => serde_json::to_string(plain).unwrap(),
        }
    }

    /// A manifest: documents, maybe a List of them, maybe CRLF or no last line break.
    #[derive(Debug, Clone)]
    pub struct Manifest {
        pub pods: Vec<Pod>,
        pub list: bool,
        pub service: bool,
        pub crlf: bool,
        pub final_break: bool,
        pub header: bool,
    }

    impl Manifest {
        pub fn text(&self) -> String {
            let mut out = String::new();
            if self.header {
                out.push_str("# Generated for the test.\n# Second line.\n");
            }
            if self.list {
                out.push_str("apiVersion: v1\nkind: List # objects follow\nitems:\n");
                for pod in &self.pods {
                    let layout = Layout {
                        json: false,
                        ..pod.layout
                    };
                    let root: Vec<(String, Y)> = pod.document().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
                    let mut item = String::new();
                    // A List's item: its first key after the dash, the rest under it.
                    map_lines(&mut item, &root, 2, layout);
                    out.push_str("- ");
                    out.push_str(&item[2..]);
                }
                out.push_str("metadata: {}\n");
            } else {
                for (i, pod) in self.pods.iter().enumerate() {
                    // A first document in JSON would make the input a JSON stream: a
                    // `---` before it keeps the input YAML.
                    if i > 0 || self.header || pod.layout.json {
                        out.push_str(if i % 2 == 0 { "---\n" } else { "--- # next\n" });
                    }
                    out.push_str(&pod.text());
                }
            }
            if self.service {
                out.push_str(
                    "---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec:\n  ports: [{port: 80}]\n",
                );
            }
            if self.crlf {
                out = out.replace('\n', "\r\n");
            }
            if !self.final_break {
                out.pop();
                if self.crlf {
                    out.pop();
                }
            }
            out
        }
    }

    fn pod() -> impl Strategy<Value = Pod> {
        (
            (
                0usize..4,
                prop_oneof![Just(2usize), Just(4usize)],
                any::<bool>(),
                prop::bool::weighted(0.15),
            ),
            (0usize..3, 0usize..4, 0usize..4),
            prop::collection::vec((0usize..8, 0usize..5), 1..3),
            any::<bool>(),
            (0usize..5, 0usize..3, 0usize..4, any::<bool>()),
        )
            .prop_map(
                |(
                    (kind, step, dashes_indented, json),
                    (metadata, labels, annotations),
                    containers,
                    containers_flow,
                    (volumes, secrets, init, runs_to_completion),
                )| Pod {
                    kind,
                    layout: Layout {
                        step,
                        dashes_indented,
                        json,
                    },
                    metadata,
                    labels,
                    annotations,
                    containers,
                    containers_flow,
                    volumes,
                    secrets,
                    init,
                    runs_to_completion,
                },
            )
    }

    pub fn manifest() -> impl Strategy<Value = Manifest> {
        (
            prop::collection::vec(pod(), 1..4),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.3),
            prop::bool::weighted(0.2),
            prop::bool::weighted(0.8),
            any::<bool>(),
        )
            .prop_map(|(pods, list, service, crlf, final_break, header)| Manifest {
                pods,
                list,
                service,
                crlf,
                final_break,
                header,
            })
    }
}

/// Generated manifests of every style: no byte of the input changes, the output reads
/// as the input plus the injection, and `uninject` gives the input back.
#[test]
fn generated_manifests_keep_their_text_and_come_back() {
    let templates = templates();
    let figures = RefCell::new(Figures::default());
    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&(generated::manifest(), 0usize..2), |(manifest, which)| {
        let text = manifest.text();
        let mut mine = Figures::default();
        check(&text, &templates[which], &mut mine).map_err(TestCaseError::fail)?;
        prop_assert_eq!(mine.bytes_changed, 0, "{}", text);
        prop_assert!(mine.injected >= manifest.pods.len(), "{}", text);
        let mut all = figures.borrow_mut();
        all.inputs += mine.inputs;
        all.injected += mine.injected;
        all.round_trips += mine.round_trips;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let figures = figures.into_inner();
    println!(
        "generated manifests: {} (objects injected: {}); bytes changed outside what was injected: {}; `inject | uninject` == input: {} of {}",
        figures.inputs, figures.injected, figures.bytes_changed, figures.round_trips, figures.inputs
    );
    assert_eq!(figures.round_trips, figures.inputs);
}

/// The offline corpus and the sample manifests of the other tests (Istio's httpbin,
/// bookinfo and jwt-server shapes, workloads, Jobs): the same three checks, with each
/// fixture template.
#[test]
fn the_corpus_and_the_samples_keep_their_text_and_come_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let files = [
        "offline/scalars.yaml",
        "offline/anchors-and-blocks.yaml",
        "offline/list-and-json.yaml",
        "offline/comments.yaml",
        "offline/custom-resources.yaml",
        "manifests/workloads.yaml",
        "manifests/jobs.yaml",
    ];
    let mut figures = Figures::default();
    for set in templates() {
        for file in files {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            check(&text, &set, &mut figures).unwrap_or_else(|e| panic!("{file}: {e}"));
        }
    }
    println!(
        "corpus and samples: {} runs of {} files (objects injected: {}); bytes changed outside what was injected: {}; `inject | uninject` == input: {} of {}",
        figures.inputs,
        files.len(),
        figures.injected,
        figures.bytes_changed,
        figures.round_trips,
        figures.inputs
    );
    assert_eq!(figures.bytes_changed, 0);
    assert_eq!(figures.round_trips, figures.inputs);
}

/// Pod-level resources in every style a manifest writes them: each value the injection
/// raises is set in place (a quoted one keeps its quotes), a `requests` map the API server
/// would default is added beside `limits`, the output reads as the input plus the patch,
/// and `uninject` gives the input back byte for byte.
#[test]
fn pod_level_resources_are_raised_in_place_and_come_back() {
    let pod = |spec: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  annotations: {{sidecar.samplecrd.k8s.io/inject: \"true\"}}\nspec:\n{spec}"
        )
    };
    let manifests = [
        pod("  resources:\n    limits:\n      cpu: 500m\n  containers:\n  - name: app\n    image: nginx\n"),
        pod(
            "  resources: {requests: {cpu: \"200m\"}, limits: {cpu: '1', memory: 1Gi}}  # mine\n  containers: [{name: app, resources: {requests: {cpu: 150m}}}]\n",
        ),
        pod(
            "    resources:\n        requests:\n            cpu: 0.2\n            memory: 1073741824\n    containers:\n    -   name: app\n",
        ),
        pod("  resources:\n    requests: {}\n    limits: {cpu: 1, memory: 1Gi}\n  containers: [{name: app}]\n"),
        String::from(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n    metadata: {annotations: {sidecar.samplecrd.k8s.io/inject: \"true\"}}\n    spec:\n      resources:\n        requests:\n          cpu: 200m # mine\n        limits:\n          memory: 2Gi\n      containers:\n      - name: app\n        resources: {requests: {cpu: 150m}}\n",
        ),
        String::from(
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: p, annotations: {sidecar.samplecrd.k8s.io/inject: \"true\"}}, spec: {resources: {limits: {cpu: 500m}}, containers: [{name: app}]}}\n",
        ),
    ];
    let mut figures = Figures::default();
    for set in templates() {
        for text in &manifests {
            check(text, &set, &mut figures).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    assert_eq!(figures.round_trips, figures.inputs);
    // The values set anew, and only those: `"200m"` keeps the quotes it chose, `'1'` had
    // to have them.
    let run = inject(&manifests[1], &templates()[0], Format::Yaml);
    assert!(
        run.out.contains(
            "resources: {requests: {cpu: \"700m\", memory: 1152Mi}, limits: {cpu: 1500m, memory: 1152Mi}}  # mine"
        ),
        "{}",
        run.out
    );
}

/// A file injected elsewhere (by the webhook, written back by `kubectl get -o yaml`):
/// `uninject` takes out what the status records and nothing else, line for line.
#[test]
fn uninject_of_a_file_injected_elsewhere_removes_only_what_the_status_records() {
    let status = r#"{"template":"config","revision":"abc","containers":["envoy"],"initContainers":[],"volumes":["envoy-conf"],"imagePullSecrets":[],"nativeSidecar":false}"#;
    let injected = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    keep: \"me\"\n    sidecar.samplecrd.k8s.io/status: '{status}'\n  labels:\n    app: web\n    sidecar.samplecrd.k8s.io/revision: abc\n  name: web\nspec:\n  containers:\n  - image: nginx\n    name: web\n    volumeMounts:\n    - mountPath: /etc/envoy\n      name: envoy-conf\n    - mountPath: /data\n      name: data\n  - image: envoy\n    name: envoy\n  volumes:\n  - name: data\n    emptyDir: {{}}\n  - configMap:\n      name: envoy\n    name: envoy-conf\n"
    );
    let back = uninject(&injected);
    assert_eq!(
        back.out,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  annotations:\n    keep: \"me\"\n  labels:\n    app: web\n  name: web\nspec:\n  containers:\n  - image: nginx\n    name: web\n    volumeMounts:\n    - mountPath: /data\n      name: data\n  volumes:\n  - name: data\n    emptyDir: {}\n"
    );
    assert!(back.messages.is_empty(), "{:?}", back.messages);
}

/// An addition inside an anchored node that an alias repeats elsewhere would show there
/// too: the edited text is read back, and the document written anew from its values, with
/// a warning, rather than changed where nothing was injected.
#[test]
fn an_addition_an_alias_would_repeat_is_caught_and_written_anew() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: app}]\n  volumes: &shared [{name: data, emptyDir: {}}]\nx-copy: *shared\n";
    let templates = &templates()[0];
    let run = inject(text, templates, Format::Yaml);
    assert!(
        run.messages
            .iter()
            .any(|m| matches!(m, Message::Warning(w) if w.contains("written anew, not as the input's text"))),
        "{:?}",
        run.messages
    );
    let copy = &objects(&run.out)[0]["x-copy"];
    assert_eq!(
        copy,
        &serde_json::json!([{"name": "data", "emptyDir": {}}]),
        "{}",
        run.out
    );
    // Without the alias, the same addition is made in the text.
    let plain = text.replace(" &shared", "").replace("x-copy: *shared\n", "");
    let run = inject(&plain, templates, Format::Yaml);
    assert!(run.messages.is_empty(), "{:?}", run.messages);
    assert_eq!(kept_in_order(&plain, &run.out), plain.len());
}

/// A template whose additions do not fit a line in flow style (a sidecar with its
/// configuration, an init container's script, a projected volume) beside short ones.
/// A regular sidecar (`nativeSidecar: false`): the layouts below are of `containers`.
const LONG: &str = "nativeSidecar: false\ninitContainers:\n- name: prepare\n  image: busybox\n  command: [sh, -c, 'mkdir -p /etc/proxy/run && echo ready > /etc/proxy/run/state']\ncontainers:\n- name: proxy\n  image: envoy:v1\n  args:\n  - --config-yaml\n  - |\n    admin:\n      address: {socket_address: {port_value: 15000}}\n    stats_flush_interval: 5s\nvolumes:\n- {name: proxy-certs, emptyDir: {}}\n- name: proxy-token\n  projected:\n    sources:\n    - serviceAccountToken: {path: token, expirationSeconds: 3600, audience: proxy}\n";

/// A Pod's lists written as block lists of flow maps.
const FLOW_ITEMS: &str = "spec:\n  initContainers:\n  - {name: fetch-config, image: curl}\n  containers:\n  - {name: app, image: nginx, ports: [{containerPort: 80}]}\n  volumes:\n  - {name: data, emptyDir: {}}\n";

/// A Pod's lists written as flow lists.
const FLOW_LISTS: &str = "spec:\n  initContainers: [{name: fetch-config, image: curl}]\n  containers: [{name: app, image: nginx, ports: [{containerPort: 80}]}]\n  volumes: [\n    {name: data, emptyDir: {}}\n  ]\n";

/// A Pod opting in with `spec` as its spec, as a Pod, as a Deployment's Pod template and
/// as a `List`'s item: each text with the indentation of the Pod's keys.
fn opted_in(spec: &str) -> [(String, &'static str); 3] {
    let meta = "metadata:\n  name: web\n  annotations: {sidecar.samplecrd.k8s.io/inject: \"true\"}\n";
    let pod = format!("{meta}{spec}");
    let indented = |indent: &str| -> String { pod.lines().map(|l| format!("{indent}{l}\n")).collect() };
    [
        (format!("apiVersion: v1\nkind: Pod\n{pod}"), ""),
        (
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n{}",
                indented("    ")
            ),
            "    ",
        ),
        (
            format!(
                "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n{}",
                indented("  ")
            ),
            "  ",
        ),
    ]
}

/// The lines of `text` over 80 columns, but for the status annotation's (one JSON line).
fn long_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.chars().count() > 80 && !l.contains("sidecar.samplecrd.k8s.io/status"))
        .collect()
}

/// Where a Pod's lists hold flow maps (`- {name: app, image: nginx}`), what the injection
/// adds is written in their style where it fits a line, and in block style where it does
/// not: never one line of thousands of characters. `uninject` gives the input back.
#[test]
fn additions_too_long_for_a_line_among_flow_items_are_written_in_block_style() {
    let long = TemplateSet::from_text("fixture", LONG, envoy_injector::template::KubeVersion::NEWEST).unwrap();
    let mut figures = Figures::default();
    let [(pod, _), ..] = opted_in(FLOW_ITEMS);
    for (text, indent) in opted_in(FLOW_ITEMS) {
        check(&text, &long, &mut figures).unwrap_or_else(|e| panic!("{e}"));
        let out = inject(&text, &long, Format::Yaml).out;
        // Short additions in their siblings' style, long ones in block style.
        for expected in [
            "  - command:\n    - sh\n    - -c\n    - mkdir -p /etc/proxy/run && echo ready > /etc/proxy/run/state\n    image: busybox\n    name: prepare\n  - {name: fetch-config, image: curl}\n",
            "  - {name: app, image: nginx, ports: [{containerPort: 80}]}\n  - args:\n    - --config-yaml\n    - |\n      admin:\n        address: {socket_address: {port_value: 15000}}\n      stats_flush_interval: 5s\n    image: envoy:v1\n    name: proxy\n",
            "  - {name: data, emptyDir: {}}\n  - {emptyDir: {}, name: proxy-certs}\n  - name: proxy-token\n    projected:\n      sources:\n      - serviceAccountToken:\n          audience: proxy\n          expirationSeconds: 3600\n          path: token\n",
        ] {
            let expected: String = expected.lines().map(|l| format!("{indent}{l}\n")).collect();
            assert!(out.contains(&expected), "{expected}\nin\n{out}");
        }
        assert!(long_lines(&out).is_empty(), "{:?}\n{out}", long_lines(&out));
    }
    // The default template's sidecar, with Envoy's whole bootstrap, as a container and
    // as a native sidecar: the bootstrap is a literal block, not a line of its own.
    let shipped = TemplateSet::embedded();
    let regular = pod.replace(
        "annotations: {",
        "annotations: {sidecar.samplecrd.k8s.io/native-sidecar: \"false\", ",
    );
    for (text, list) in [(&regular, "containers"), (&pod, "initContainers")] {
        check(text, &shipped, &mut figures).unwrap_or_else(|e| panic!("{e}"));
        let out = inject(text, &shipped, Format::Yaml).out;
        let at = out.find(&format!("  {list}:\n")).unwrap();
        assert!(out[at..].contains("  - args:\n    - --concurrency\n"), "{out}");
        assert!(out.contains("    - |\n      admin:\n"), "{out}");
        let longest = out.lines().filter(|l| !l.contains("/status")).map(str::len).max();
        assert!(longest < Some(200), "{out}");
    }
    assert_eq!(figures.round_trips, figures.inputs);
}

/// Where a Pod's lists are flow lists (`containers: [{name: app}]`), an addition that
/// does not fit the line is a flow item over lines, indented under the line it starts
/// on, a string of several lines double-quoted over as many; the input's text stays as
/// it is, and `uninject` gives it back.
#[test]
fn additions_too_long_for_a_line_in_flow_lists_are_written_over_lines() {
    let long = TemplateSet::from_text("fixture", LONG, envoy_injector::template::KubeVersion::NEWEST).unwrap();
    let mut figures = Figures::default();
    for (text, indent) in opted_in(FLOW_LISTS) {
        check(&text, &long, &mut figures).unwrap_or_else(|e| panic!("{e}"));
        let out = inject(&text, &long, Format::Yaml).out;
        for expected in [
            "  initContainers: [{\n      command: [\n        sh,\n        -c,\n        mkdir -p /etc/proxy/run && echo ready > /etc/proxy/run/state\n      ],\n      image: busybox,\n      name: prepare\n    }, {name: fetch-config, image: curl}]\n",
            "  containers: [{name: app, image: nginx, ports: [{containerPort: 80}]}, {\n      args: [\n        --config-yaml,\n        \"admin:\\n\\\n         \\  address: {socket_address: {port_value: 15000}}\\n\\\n         stats_flush_interval: 5s\\n\"\n      ],\n      image: 'envoy:v1',\n      name: proxy\n    }]\n",
            "  volumes: [\n    {name: data, emptyDir: {}},\n    {emptyDir: {}, name: proxy-certs},\n    {\n      name: proxy-token,\n      projected: {\n        sources: [\n          {\n            serviceAccountToken: {\n              audience: proxy,\n              expirationSeconds: 3600,\n              path: token\n            }\n          }\n        ]\n      }\n    }\n  ]\n",
        ] {
            let expected: String = expected.lines().map(|l| format!("{indent}{l}\n")).collect();
            assert!(out.contains(&expected), "{expected}\nin\n{out}");
        }
        assert!(long_lines(&out).is_empty(), "{:?}\n{out}", long_lines(&out));
    }
    // The default template's sidecar: Envoy's bootstrap a line of the output per line.
    let shipped = TemplateSet::embedded();
    let [(pod, _), ..] = opted_in(FLOW_LISTS);
    check(&pod, &shipped, &mut figures).unwrap_or_else(|e| panic!("{e}"));
    let out = inject(&pod, &shipped, Format::Yaml).out;
    assert!(
        out.contains("        \"admin:\\n\\\n         \\  address:\\n\\\n"),
        "{out}"
    );
    let longest = out.lines().filter(|l| !l.contains("/status")).map(str::len).max();
    assert!(longest < Some(200), "{out}");
    assert_eq!(figures.round_trips, figures.inputs);
}
