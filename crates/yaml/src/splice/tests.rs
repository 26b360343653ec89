use serde_json::json;

use json_patch::Patch;
use serde_json::Value as Json;

use super::*;
use crate::paths::EveryCollection;
use crate::read::read_documents_with_layouts;

/// The order in which the additions undone here created keys: annotations before labels.
const CREATED: &[&str] = &["annotations", "labels"];

fn root(text: &str) -> Node {
    let mut documents = read_documents_with_layouts(text, 1, &EveryCollection).unwrap();
    documents[0].unpack();
    documents.remove(0).root.unwrap()
}

fn patch(ops: Json) -> Patch {
    serde_json::from_value(ops).unwrap()
}

/// `text` with the edits `splice` makes of `ops`; it must read back as the input with
/// the patch applied.
fn edited(text: &str, ops: Json, splice: impl Fn(&str, &Node, &Patch) -> Result<Edits, NotInText>) -> String {
    let patch = patch(ops);
    let edits = splice(text, &root(text), &patch).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let out = apply(text, &edits.edits);
    let mut expected = root(text).to_json();
    json_patch::patch(&mut expected, &patch).unwrap();
    assert_eq!(root(&out).to_json(), expected, "{out}");
    out
}

/// The text `inject` writes for `ops`.
fn added(text: &str, ops: Json) -> String {
    edited(text, ops, |text, root, patch| {
        additions(text, root, patch, &mut Renders::default())
    })
}

/// The text `uninject` writes for `ops` (removals).
fn removed(text: &str, ops: Json) -> String {
    edited(text, ops, |text, root, patch| removals(text, root, patch, CREATED))
}

#[test]
fn block_lists_get_items_at_their_dashes_and_the_input_s_indentation() {
    let kubectl = "spec:\n  containers:\n  - name: a # mine\n    image: x\n  volumes: []\n";
    let out = added(
        kubectl,
        json!([{"op": "add", "path": "/spec/containers/-", "value": {"name": "b", "ports": [{"containerPort": 80}]}}]),
    );
    assert_eq!(
        out,
        "spec:\n  containers:\n  - name: a # mine\n    image: x\n  - name: b\n    ports:\n    - containerPort: 80\n  volumes: []\n"
    );
    // Four spaces a level, dashes indented under their key: so are the additions.
    let indented = "spec:\n    containers:\n        - name: a\n          resources:\n              limits: {cpu: 1}\n";
    let out = added(
        indented,
        json!([{"op": "add", "path": "/spec/containers/-", "value": {"name": "b", "resources": {"limits": {"cpu": "1"}}, "args": ["x"]}}]),
    );
    assert_eq!(
        out,
        format!(
            "{indented}        - args:\n              - x\n          name: b\n          resources:\n              limits:\n                  cpu: '1'\n"
        )
    );
}

#[test]
fn a_list_of_flow_maps_gets_flow_maps_and_flow_lists_grow_in_flow_style() {
    let text = "spec:\n  containers:\n  - name: a\n    volumeMounts:\n    - {name: a, mountPath: /a}\n  volumes: [{name: a}]\n  imagePullSecrets: []\n  initContainers: [\n    {name: i},\n    {name: j}\n  ]\n";
    let out = added(
        text,
        json!([
            {"op": "add", "path": "/spec/containers/0/volumeMounts/-", "value": {"name": "b", "mountPath": "/b"}},
            {"op": "add", "path": "/spec/volumes/-", "value": {"name": "v", "emptyDir": {}}},
            {"op": "add", "path": "/spec/imagePullSecrets/-", "value": {"name": "x:y"}},
            {"op": "add", "path": "/spec/initContainers/-", "value": {"name": "k"}},
        ]),
    );
    assert_eq!(
        out,
        "spec:\n  containers:\n  - name: a\n    volumeMounts:\n    - {name: a, mountPath: /a}\n    - {mountPath: /b, name: b}\n  volumes: [{name: a}, {emptyDir: {}, name: v}]\n  imagePullSecrets: [{name: 'x:y'}]\n  initContainers: [\n    {name: i},\n    {name: j},\n    {name: k}\n  ]\n"
    );
}

#[test]
fn among_flow_items_an_addition_too_long_for_a_line_is_written_in_block_style() {
    let text = "spec:\n  containers:\n  - {name: app, image: nginx}\n  - {name: log, image: busybox}\n";
    let sidecar = json!({"name": "envoy", "image": "envoy:v1", "args": ["--config-yaml", "admin:\n  port: 15000\n"], "ports": [{"containerPort": 15001}]});
    let out = added(
        text,
        json!([
            {"op": "add", "path": "/spec/containers/-", "value": sidecar.clone()},
            {"op": "add", "path": "/spec/containers/-", "value": {"name": "short", "image": "x"}},
        ]),
    );
    assert_eq!(
        out,
        format!(
            "{text}  - args:\n    - --config-yaml\n    - |\n      admin:\n        port: 15000\n    image: envoy:v1\n    name: envoy\n    ports:\n    - containerPort: 15001\n  - {{image: x, name: short}}\n"
        )
    );
    // At the front, as a native sidecar goes, the same.
    let init = "spec:\n  initContainers:\n  - {name: setup, image: busybox}\n";
    let out = added(
        init,
        json!([{"op": "add", "path": "/spec/initContainers/0", "value": sidecar}]),
    );
    assert_eq!(
        out,
        "spec:\n  initContainers:\n  - args:\n    - --config-yaml\n    - |\n      admin:\n        port: 15000\n    image: envoy:v1\n    name: envoy\n    ports:\n    - containerPort: 15001\n  - {name: setup, image: busybox}\n"
    );
    assert_eq!(
        removed(&out, json!([{"op": "remove", "path": "/spec/initContainers/0"}])),
        init
    );
    // The line width counts from the dashes: the same item fits a list less indented.
    let item = json!({"name": "a-long-container-name", "image": "registry.example.com/team/image:v1.2.3"});
    let shallow = "containers:\n- {name: app}\n";
    let out = added(shallow, json!([{"op": "add", "path": "/containers/-", "value": item}]));
    assert_eq!(
        out,
        format!("{shallow}- {{image: 'registry.example.com/team/image:v1.2.3', name: a-long-container-name}}\n")
    );
    let deep = "spec:\n  template:\n    spec:\n      containers:\n      - {name: app}\n";
    let out = added(
        deep,
        json!([{"op": "add", "path": "/spec/template/spec/containers/-", "value": item}]),
    );
    assert_eq!(
        out,
        format!("{deep}      - image: registry.example.com/team/image:v1.2.3\n        name: a-long-container-name\n")
    );
    // Taken out again, each by its own lines: the input comes back.
    let back = removed(
        &out,
        json!([{"op": "remove", "path": "/spec/template/spec/containers/1"}]),
    );
    assert_eq!(back, deep);
}

#[test]
fn in_a_flow_collection_an_addition_too_long_for_a_line_is_written_over_lines() {
    let sidecar = json!({"name": "envoy", "args": ["--config-yaml", "admin:\n  address: {socket_address: {address: 127.0.0.1, port_value: 15000}}\n"], "ports": [{"containerPort": 15001}]});
    let add = |text: &str, path: &str| added(text, json!([{"op": "add", "path": path, "value": sidecar.clone()}]));
    // After an item on the bracket's line: a step deeper than the line, a string of
    // several lines over as many.
    let text = "spec:\n  containers: [{name: app, image: nginx}]\n";
    let out = add(text, "/spec/containers/-");
    assert_eq!(
        out,
        "spec:\n  containers: [{name: app, image: nginx}, {\n      args: [\n        --config-yaml,\n        \"admin:\\n\\\n         \\  address: {socket_address: {address: 127.0.0.1, port_value: 15000}}\\n\"\n      ],\n      name: envoy,\n      ports: [{containerPort: 15001}]\n    }]\n"
    );
    assert_eq!(
        removed(&out, json!([{"op": "remove", "path": "/spec/containers/1"}])),
        text
    );
    // Items one a line: the addition on a line of its own, closed at its column.
    let text = "spec:\n  initContainers: [\n    {name: i}\n  ]\n";
    let out = add(text, "/spec/initContainers/-");
    assert_eq!(
        out,
        "spec:\n  initContainers: [\n    {name: i},\n    {\n      args: [\n        --config-yaml,\n        \"admin:\\n\\\n         \\  address: {socket_address: {address: 127.0.0.1, port_value: 15000}}\\n\"\n      ],\n      name: envoy,\n      ports: [{containerPort: 15001}]\n    }\n  ]\n"
    );
    assert_eq!(
        removed(&out, json!([{"op": "remove", "path": "/spec/initContainers/1"}])),
        text
    );
    // At the front; in a list item's map, whose keys are deeper than the line's dash.
    let text = "items:\n- initContainers: [{name: i}]\n";
    let out = add(text, "/items/0/initContainers/0");
    assert_eq!(
        out,
        "items:\n- initContainers: [{\n      args: [\n        --config-yaml,\n        \"admin:\\n\\\n         \\  address: {socket_address: {address: 127.0.0.1, port_value: 15000}}\\n\"\n      ],\n      name: envoy,\n      ports: [{containerPort: 15001}]\n    }, {name: i}]\n"
    );
    assert_eq!(
        removed(&out, json!([{"op": "remove", "path": "/items/0/initContainers/0"}])),
        text
    );
    // JSON: over lines too, its strings each on one.
    let text = "{\"spec\": {\"containers\": [{\"name\": \"app\"}]}}\n";
    let out = add(text, "/spec/containers/-");
    assert_eq!(
        out,
        "{\"spec\": {\"containers\": [{\"name\": \"app\"}, {\n    \"args\": [\n      \"--config-yaml\",\n      \"admin:\\n  address: {socket_address: {address: 127.0.0.1, port_value: 15000}}\\n\"\n    ],\n    \"name\": \"envoy\",\n    \"ports\": [{\"containerPort\": 15001}]\n  }]}}\n"
    );
    assert_eq!(
        removed(&out, json!([{"op": "remove", "path": "/spec/containers/1"}])),
        text
    );
}

#[test]
fn maps_get_keys_at_their_keys_column_and_json_stays_json() {
    let text = "metadata:\n  name: p\n  labels: {app: web}\n";
    let out = added(
        text,
        json!([
            {"op": "add", "path": "/metadata/labels/rev", "value": "1"},
            {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "{\"json\":true}"}},
        ]),
    );
    assert_eq!(
        out,
        "metadata:\n  name: p\n  labels: {app: web, rev: '1'}\n  annotations:\n    a/b: '{\"json\":true}'\n"
    );
    let json_text = "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"p\"},\n \"spec\": {}}\n";
    let out = added(
        json_text,
        json!([{"op": "add", "path": "/metadata/labels", "value": {"rev": "1"}}]),
    );
    assert_eq!(
        out,
        "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"p\", \"labels\": {\"rev\": \"1\"}},\n \"spec\": {}}\n"
    );
}

#[test]
fn a_map_created_by_one_operation_takes_the_next_ones() {
    let text = "kind: Pod\nspec:\n  containers: [{name: a}]\n";
    let out = added(
        text,
        json!([
            {"op": "add", "path": "/metadata", "value": {"annotations": {"s": "x"}}},
            {"op": "add", "path": "/metadata/labels", "value": {"r": "1"}},
        ]),
    );
    assert_eq!(
        out,
        "kind: Pod\nspec:\n  containers: [{name: a}]\nmetadata:\n  annotations:\n    s: x\n  labels:\n    r: '1'\n"
    );
}

#[test]
fn additions_at_one_place_go_deepest_first() {
    // The labels map ends where `metadata` does: its label before the new key.
    let text = "metadata:\n  labels:\n    app: web\nspec: {}\n";
    let out = added(
        text,
        json!([
            {"op": "add", "path": "/metadata/annotations", "value": {"s": "x"}},
            {"op": "add", "path": "/metadata/labels/rev", "value": "r"},
        ]),
    );
    assert_eq!(
        out,
        "metadata:\n  labels:\n    app: web\n    rev: r\n  annotations:\n    s: x\nspec: {}\n"
    );
}

#[test]
fn items_at_the_front_go_above_the_comments_of_the_first() {
    let text = "spec:\n  initContainers:\n  # the first\n  - name: a\n  imagePullSecrets: [{name: a}]\n";
    let out = added(
        text,
        json!([
            {"op": "add", "path": "/spec/initContainers/0", "value": {"name": "x"}},
            {"op": "add", "path": "/spec/initContainers/1", "value": {"name": "w"}},
            {"op": "add", "path": "/spec/imagePullSecrets/0", "value": {"name": "z"}},
        ]),
    );
    assert_eq!(
        out,
        "spec:\n  initContainers:\n  - name: x\n  - name: w\n  # the first\n  - name: a\n  imagePullSecrets: [{name: z}, {name: a}]\n"
    );
    assert_eq!(
        removed(
            &out,
            json!([
                {"op": "remove", "path": "/spec/initContainers/1"},
                {"op": "remove", "path": "/spec/initContainers/0"},
                {"op": "remove", "path": "/spec/imagePullSecrets/0"},
            ])
        ),
        text
    );
}

#[test]
fn what_follows_the_last_item_stays_after_the_addition() {
    // A kept block scalar's blank lines are its content; a deeper comment belongs to the
    // last item; a comment at the list's column is the next thing's.
    let text = "spec:\n  containers:\n  - name: a\n    args:\n    - |+\n      keep\n\n    # about the item\n  # about volumes\n  volumes: []\n";
    let out = added(
        text,
        json!([{"op": "add", "path": "/spec/containers/-", "value": {"name": "b"}}]),
    );
    assert_eq!(
        out,
        "spec:\n  containers:\n  - name: a\n    args:\n    - |+\n      keep\n\n    # about the item\n  - name: b\n  # about volumes\n  volumes: []\n"
    );
}

#[test]
fn an_alias_gets_a_merge_key_and_uninject_gives_the_alias_back() {
    let text = "kind: Deployment\nspec:\n  selector:\n    matchLabels: &labels {app: db}\n  template:\n    metadata:\n      labels: *labels # shared\n";
    let add = json!([{"op": "add", "path": "/spec/template/metadata/labels/rev", "value": "1"}]);
    let out = added(text, add.clone());
    assert_eq!(
        out,
        "kind: Deployment\nspec:\n  selector:\n    matchLabels: &labels {app: db}\n  template:\n    metadata:\n      labels: {<<: *labels, rev: '1'} # shared\n"
    );
    assert!(
        !additions(text, &root(text), &patch(add), &mut Renders::default())
            .unwrap()
            .unsure
    );
    assert_eq!(
        removed(
            &out,
            json!([{"op": "remove", "path": "/spec/template/metadata/labels/rev"}])
        ),
        text
    );
}

#[test]
fn a_string_set_in_place_of_a_quoted_scalar_keeps_its_quotes() {
    let text = "spec:\n  resources:\n    requests: {cpu: \"200m\", memory: '1Gi', e: 3, f: \"1\", g: '1'}\n    limits:\n      cpu: 500m # mine\n";
    let ops = json!([
        {"op": "add", "path": "/spec/resources/requests/cpu", "value": "300m"},
        {"op": "add", "path": "/spec/resources/requests/memory", "value": "it's"},
        {"op": "add", "path": "/spec/resources/requests/e", "value": "4"},
        {"op": "add", "path": "/spec/resources/requests/f", "value": "1100m"},
        {"op": "add", "path": "/spec/resources/requests/g", "value": "1100m"},
        {"op": "add", "path": "/spec/resources/limits/cpu", "value": "1"},
    ]);
    let out = added(text, ops);
    // `'1'` needed its quotes, which say nothing of the input's style; `"1"` chose them.
    assert_eq!(
        out,
        "spec:\n  resources:\n    requests: {cpu: \"300m\", memory: 'it''s', e: '4', f: \"1100m\", g: 1100m}\n    limits:\n      cpu: '1' # mine\n"
    );
    // Set back, each value is its text again (the writer quotes a number-like string).
    let back = added(
        &out,
        json!([
            {"op": "add", "path": "/spec/resources/requests/cpu", "value": "200m"},
            {"op": "add", "path": "/spec/resources/requests/memory", "value": "1Gi"},
            {"op": "add", "path": "/spec/resources/requests/e", "value": 3},
            {"op": "add", "path": "/spec/resources/requests/f", "value": "1"},
            {"op": "add", "path": "/spec/resources/requests/g", "value": "1"},
            {"op": "add", "path": "/spec/resources/limits/cpu", "value": "500m"},
        ]),
    );
    assert_eq!(back, text);
}

#[test]
fn an_empty_key_gets_its_value_on_the_lines_after_it() {
    let text = "metadata:\n  annotations: # none yet\n  name: p\nspec:\n  volumes: ~\n";
    let out = added(
        text,
        json!([
            {"op": "add", "path": "/metadata/annotations", "value": {"s": "x"}},
            {"op": "add", "path": "/spec/volumes", "value": [{"name": "v"}]},
        ]),
    );
    assert_eq!(
        out,
        "metadata:\n  annotations: # none yet\n    s: x\n  name: p\nspec:\n  volumes: [{name: v}]\n"
    );
}

#[test]
fn line_ends_and_a_missing_last_line_break_are_the_input_s() {
    let crlf = "spec:\r\n  containers:\r\n  - name: a\r\n";
    let out = added(
        crlf,
        json!([{"op": "add", "path": "/spec/containers/-", "value": {"name": "b", "args": ["x"]}}]),
    );
    assert_eq!(
        out,
        "spec:\r\n  containers:\r\n  - name: a\r\n  - args:\r\n    - x\r\n    name: b\r\n"
    );
    let unterminated = "spec:\n  containers:\n  - name: a";
    let out = added(
        unterminated,
        json!([{"op": "add", "path": "/spec/containers/-", "value": {"name": "b"}}]),
    );
    assert_eq!(out, "spec:\n  containers:\n  - name: a\n  - name: b");
    assert_eq!(
        removed(&out, json!([{"op": "remove", "path": "/spec/containers/1"}])),
        unterminated
    );
}

#[test]
fn removals_take_an_entry_s_own_text_and_nothing_else() {
    let text = "spec:\n  containers:\n  - volumeMounts:\n    - {name: a, mountPath: /a}\n    name: app\n  - name: envoy\n    image: x\n  volumes: [{name: a}, {name: b}, {name: c}]\n  imagePullSecrets: []\n";
    let out = removed(
        text,
        json!([
            {"op": "remove", "path": "/spec/containers/0/volumeMounts"},
            {"op": "remove", "path": "/spec/containers/1"},
            {"op": "remove", "path": "/spec/volumes/2"},
            {"op": "remove", "path": "/spec/volumes/0"},
        ]),
    );
    assert_eq!(
        out,
        "spec:\n  containers:\n  - name: app\n  volumes: [{name: b}]\n  imagePullSecrets: []\n"
    );
    // A flow list in a block map emptied by removals keeps its brackets: an injection
    // writes the lists it creates in block style, so this one was the input's.
    let text = "spec:\n  volumes: [ {name: a} ]\n";
    let whole = patch(json!([{"op": "remove", "path": "/spec/volumes"}]));
    let edits = removals(text, &root(text), &whole, CREATED).unwrap();
    assert_eq!(apply(text, &edits.edits), "spec:\n  volumes: [  ]\n");
    // In a flow map, an entry that one staying follows was there before the injection,
    // which appends what it creates, annotations before labels.
    let text = "metadata: {name: p, labels: {rev: x}, annotations: {s: y}}\nspec: {}\n";
    let both = patch(json!([
        {"op": "remove", "path": "/metadata/annotations"},
        {"op": "remove", "path": "/metadata/labels"},
    ]));
    let edits = removals(text, &root(text), &both, CREATED).unwrap();
    assert_eq!(apply(text, &edits.edits), "metadata: {name: p, labels: {}}\nspec: {}\n");
    let text = "{\"metadata\": {\"annotations\": {\"s\": \"y\"}}, \"spec\": {}}\n";
    let metadata = patch(json!([{"op": "remove", "path": "/metadata"}]));
    let edits = removals(text, &root(text), &metadata, CREATED).unwrap();
    assert_eq!(apply(text, &edits.edits), "{\"metadata\": {}, \"spec\": {}}\n");
}
