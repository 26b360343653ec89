use serde_json::json;

use super::*;

/// `text` read with its root `items` packed or not.
fn parse(text: &str, first_line: usize, pack: bool) -> Result<Vec<Document>, ReadError> {
    Builder::new(text, first_line, pack, None).run()
}

fn one(text: &str) -> serde_json::Value {
    let docs = read_documents(text, 1).unwrap();
    assert_eq!(docs.len(), 1, "{text}");
    docs[0].root.as_ref().unwrap().to_json()
}

#[test]
fn scalars_resolve_as_kubectl_reads_them() {
    let got = one(
        "a: yes\nb: \"yes\"\nc: 0644\nd: '0644'\ne: ~\nf:\ng: 1e3\nh: 0x1F\ni: |\n  text\nj: !!str 12\nk: !!float 3\nl: !custom 12\nm: 2024-01-01\no: on\nn: 1\n",
    );
    assert_eq!(
        got,
        json!({"a": true, "b": "yes", "c": 420, "d": "0644", "e": null, "f": null, "g": 1000.0, "h": 31,
               "i": "text\n", "j": "12", "k": 3.0, "l": "12", "m": "2024-01-01", "o": true, "false": 1})
    );
}

#[test]
fn keys_become_strings_like_sigs_yaml() {
    assert_eq!(
        one("1: a\ntrue: b\n1.5: c\n\"x\": d\nyes: e\n"),
        json!({"1": "a", "true": "e", "1.5": "c", "x": "d"})
    );
    let err = read_documents("~: a\n", 1).unwrap_err();
    assert!(err.message.contains("cannot become a JSON key"), "{err}");
    assert_eq!(err.line, Some(1));
}

#[test]
fn anchors_aliases_and_merge_keys_expand() {
    let got = one(
        "base: &b {image: x, port: 80}\nuse: *b\nmerged:\n  <<: *b\n  port: 81\nlist:\n  <<: [{a: 1}, {a: 2, b: 2}]\nquoted:\n  \"<<\": 1\n",
    );
    assert_eq!(got["use"], json!({"image": "x", "port": 80}));
    assert_eq!(got["merged"], json!({"image": "x", "port": 81}));
    assert!(
        read_documents("b: &b {x: 1}\nm:\n  <<: *b\n  x: 2\n", 1).unwrap()[0]
            .warnings
            .is_empty()
    );
    assert_eq!(got["list"], json!({"a": 1, "b": 2}));
    assert_eq!(got["quoted"], json!({"<<": 1}));
}

#[test]
fn duplicate_keys_keep_the_last_value_and_warn() {
    let docs = read_documents("a: 1\nb: 2\na: 3\n", 10).unwrap();
    assert_eq!(docs[0].root.as_ref().unwrap().to_json(), json!({"a": 3, "b": 2}));
    assert_eq!(docs[0].warnings.len(), 1);
    assert!(docs[0].warnings[0].contains("`a` at line 12"), "{:?}", docs[0].warnings);
}

#[test]
fn comments_attach_to_the_node_they_describe() {
    let docs = read_documents(
        "# head\nkind: Pod # right\nspec:\n  # above\n  containers: []\n# tail\n",
        1,
    )
    .unwrap();
    let root = docs[0].root.as_ref().unwrap();
    let kind = root.get("kind").unwrap().meta.as_ref().unwrap();
    assert_eq!(kind.before, [" head"]);
    assert_eq!(kind.right.as_deref(), Some(" right"));
    let containers = root.get("spec").unwrap().get("containers").unwrap();
    assert_eq!(containers.meta.as_ref().unwrap().before, [" above"]);
    assert_eq!(docs[0].trailing, [" tail"]);
}

#[test]
fn errors_point_at_the_line_in_the_whole_file() {
    let err = read_documents("a: 1\nb: [\n", 20).unwrap_err();
    assert!(err.line.is_some_and(|l| l >= 21), "{err:?}");
    let err = read_documents("a: *nope\n", 1).unwrap_err();
    assert_eq!(err.line, Some(1));
}

#[test]
fn a_large_lists_items_are_packed_and_unpack_to_the_same_values() {
    let text = "kind: List\nitems:\n# first\n- {kind: Pod, metadata: {name: a}, x: yes}\n- [1, 2]\nmetadata: {}\n";
    let mut docs = parse(text, 1, true).unwrap();
    let doc = &mut docs[0];
    assert_eq!(doc.packed_items.len(), 2);
    assert_eq!(doc.packed_items[0].unpack().line(), Some(4));
    assert_eq!(doc.root.as_ref().unwrap().to_json()["items"], json!([]));
    doc.unpack();
    assert_eq!(
        doc.root.as_ref().unwrap().to_json(),
        json!({"kind": "List", "items": [{"kind": "Pod", "metadata": {"name": "a"}, "x": true}, [1, 2]], "metadata": {}})
    );
    // Only the root map's `items`.
    let nested = parse("spec:\n  items: [a]\n", 1, true).unwrap();
    assert!(nested[0].packed_items.is_empty());
    // A small text is not packed at all.
    assert!(read_documents(text, 1).unwrap()[0].packed_items.is_empty());
}

#[test]
fn an_item_with_its_own_items_unpacks_whole() {
    let text = "kind: List\nitems:\n- kind: ConfigMapList\n  items: [a, b]\n";
    let mut docs = parse(text, 1, true).unwrap();
    docs[0].unpack();
    assert_eq!(
        docs[0].root.as_ref().unwrap().to_json()["items"],
        json!([{"kind": "ConfigMapList", "items": ["a", "b"]}])
    );
}

#[test]
fn billion_laughs_are_refused() {
    let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let prev = (b'a' + i - 1) as char;
        let this = (b'a' + i) as char;
        text.push_str(&format!("{this}: &{this} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
    }
    let err = read_documents(&text, 1).unwrap_err();
    assert!(err.message.contains("excessive aliasing"), "{err}");
}
