//! A tree copied to JSON only in the parts a reader asks for: converting a whole object
//! whose reader needs a few fields of it costs more, in converting and freeing, than the
//! reading itself.

use serde_json::Value as Json;

use super::node::{Node, Value};

/// What of a value to keep.
#[derive(Debug, Clone, Copy)]
pub enum Keep {
    /// The whole value.
    All,
    /// Of an object, these keys (each kept as said); other keys are skipped.
    Fields(&'static [(&'static str, Keep)]),
    /// Of an array, each item as said.
    Each(&'static Keep),
}

/// `node` as JSON with only what `keep` says, each kept part in its exact shape: a value
/// of another type than `keep` expects is kept whole, for the reader to name.
pub fn pruned(node: &Node, keep: Keep) -> Json {
    match (&node.value, keep) {
        (Value::Map(entries), Keep::Fields(fields)) => Json::Object(
            entries
                .iter()
                .filter_map(|(key, value)| {
                    let (name, keep) = fields.iter().find(|(name, _)| name == key)?;
                    Some((name.to_string(), pruned(value, *keep)))
                })
                .collect(),
        ),
        (Value::Seq(items), Keep::Each(item)) => Json::Array(items.iter().map(|i| pruned(i, *item)).collect()),
        _ => node.to_json(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::read::read_documents;

    #[test]
    fn only_the_fields_asked_for_are_kept_and_a_wrong_type_whole() {
        static ITEM: Keep = Keep::Fields(&[("name", Keep::All)]);
        static KEEP: Keep = Keep::Fields(&[("list", Keep::Each(&ITEM)), ("map", Keep::Each(&ITEM))]);
        let node = read_documents("list: [{name: a, x: 1}, text]\nmap: {name: b}\nother: 1\n", 1).unwrap()[0]
            .root
            .clone()
            .unwrap();
        assert_eq!(
            pruned(&node, KEEP),
            serde_json::json!({"list": [{"name": "a"}, "text"], "map": {"name": "b"}})
        );
    }
}
