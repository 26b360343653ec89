//! A manifest as kubectl sees it (JSON values after YAML 1.1 resolution), with what
//! JSON forgets and a user wants kept: key order and comments.

use json_patch::jsonptr::Pointer;
use serde_json::Value as Json;

use super::layout::Layout;

/// One value. Maps keep their keys in input order.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    /// May be NaN or infinite: YAML can say `.nan`, JSON (and so kubectl) cannot.
    Float(f64),
    Str(String),
    Seq(Vec<Node>),
    Map(Vec<(String, Node)>),
}

/// Comments around a node and where it started. Boxed and optional: most nodes have
/// none, and a manifest holds many nodes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Meta {
    /// Own-line comments written before the node (before its key, in a map).
    pub before: Vec<String>,
    /// A comment on the node's own line.
    pub right: Option<String>,
    /// 1-based line where the node starts, kept for documents and list items only.
    pub line: Option<usize>,
    /// Where the collection is in the text, for the few that additions can go into.
    pub layout: Option<Layout>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    pub meta: Option<Box<Meta>>,
}

impl From<Value> for Node {
    fn from(value: Value) -> Node {
        Node { value, meta: None }
    }
}

impl Node {
    pub fn meta_mut(&mut self) -> &mut Meta {
        self.meta.get_or_insert_with(Default::default)
    }

    pub fn line(&self) -> Option<usize> {
        self.meta.as_ref().and_then(|m| m.line)
    }

    /// Where this collection is in the text, if recorded.
    pub fn layout(&self) -> Option<&Layout> {
        self.meta.as_ref().and_then(|m| m.layout.as_ref())
    }

    /// The value of `key` when this is a map.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.value {
            Value::Map(entries) => entries.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The node at a JSON Pointer made of plain keys (`/spec/template`), if any.
    pub fn pointer(&self, pointer: &str) -> Option<&Node> {
        pointer
            .split('/')
            .filter(|t| !t.is_empty())
            .try_fold(self, |node, key| node.get(key))
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A copy without comments, for an alias: the comments belong to the anchor's place.
    pub fn without_meta(&self) -> Node {
        let value = match &self.value {
            Value::Seq(items) => Value::Seq(items.iter().map(Node::without_meta).collect()),
            Value::Map(entries) => Value::Map(entries.iter().map(|(k, v)| (k.clone(), v.without_meta())).collect()),
            other => other.clone(),
        };
        Node::from(value)
    }

    /// The JSON kubectl would send for this node. NaN and infinities, which JSON cannot
    /// hold, become null here; the JSON writer refuses them instead.
    pub fn to_json(&self) -> Json {
        match &self.value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Int(i) => Json::from(*i),
            Value::Uint(u) => Json::from(*u),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(Json::Null, Json::Number),
            Value::Str(s) => Json::String(s.clone()),
            Value::Seq(items) => Json::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => Json::Object(entries.iter().map(|(k, v)| (k.clone(), v.to_json())).collect()),
        }
    }

    pub fn from_json(json: &Json) -> Node {
        let value = match json {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => Value::Int(i),
                (_, Some(u), _) => Value::Uint(u),
                (_, _, f) => Value::Float(f.unwrap_or(f64::NAN)),
            },
            Json::String(s) => Value::Str(s.clone()),
            Json::Array(items) => Value::Seq(items.iter().map(Node::from_json).collect()),
            Json::Object(map) => Value::Map(map.iter().map(|(k, v)| (k.clone(), Node::from_json(v))).collect()),
        };
        Node::from(value)
    }

    /// RFC 6902 `add` at a JSON Pointer: appends (`-`) or inserts into a list, adds or
    /// replaces a map key. New map keys go last, so every existing key keeps its place.
    pub fn add(&mut self, pointer: &Pointer, value: Node) -> Result<(), String> {
        let Some((parent, last)) = pointer.split_back() else {
            *self = value;
            return Ok(());
        };
        // Most tokens hold no escape: decoded, they are borrowed, not copied.
        let last = last.decoded();
        let target = self.at_mut(pointer, parent)?;
        match &mut target.value {
            Value::Map(entries) => {
                match entries.iter_mut().rev().find(|(k, _)| **k == *last) {
                    Some((_, v)) => *v = value,
                    None => entries.push((last.into_owned(), value)),
                }
                Ok(())
            }
            Value::Seq(items) if last == "-" => {
                items.push(value);
                Ok(())
            }
            Value::Seq(items) => match last.parse::<usize>() {
                Ok(index) if index <= items.len() => {
                    items.insert(index, value);
                    Ok(())
                }
                _ => Err(format!(
                    "`{pointer}`: `{last}` is not an index of a list of {}",
                    items.len()
                )),
            },
            _ => Err(format!("`{pointer}`: the parent is a scalar")),
        }
    }
}

impl Node {
    /// The node at `parent` (a prefix of `pointer`, which names it in errors).
    fn at_mut(&mut self, pointer: &Pointer, parent: &Pointer) -> Result<&mut Node, String> {
        let mut target = self;
        for token in parent.tokens() {
            let token = token.decoded();
            target = match &mut target.value {
                Value::Map(entries) => match entries.iter_mut().rev().find(|(k, _)| **k == *token) {
                    Some((_, v)) => v,
                    None => return Err(format!("`{pointer}`: no key `{token}`")),
                },
                Value::Seq(items) => {
                    let index: usize = token
                        .parse()
                        .map_err(|_| format!("`{pointer}`: `{token}` is not a list index"))?;
                    items
                        .get_mut(index)
                        .ok_or_else(|| format!("`{pointer}`: index {index} is past the end"))?
                }
                _ => return Err(format!("`{pointer}`: `{token}` is inside a scalar")),
            };
        }
        Ok(target)
    }

    /// RFC 6902 `remove` at a JSON Pointer: the map key or list entry goes, everything
    /// else (order, comments) stays as it was.
    pub fn remove(&mut self, pointer: &Pointer) -> Result<(), String> {
        let Some((parent, last)) = pointer.split_back() else {
            return Err(String::from("cannot remove the whole document"));
        };
        let last = last.decoded();
        let target = self.at_mut(pointer, parent)?;
        match &mut target.value {
            Value::Map(entries) => match entries.iter().rposition(|(k, _)| **k == *last) {
                Some(index) => {
                    entries.remove(index);
                    Ok(())
                }
                None => Err(format!("`{pointer}`: no key `{last}`")),
            },
            Value::Seq(items) => match last.parse::<usize>() {
                Ok(index) if index < items.len() => {
                    items.remove(index);
                    Ok(())
                }
                _ => Err(format!(
                    "`{pointer}`: `{last}` is not an index of a list of {}",
                    items.len()
                )),
            },
            _ => Err(format!("`{pointer}`: the parent is a scalar")),
        }
    }
}

/// Reads JSON input (one value of a JSON stream) straight into a `Node`, keeping key
/// order, which `serde_json::Value` would sort.
impl<'de> serde::Deserialize<'de> for Node {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Node, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Node;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<Node, E> {
                Ok(Value::Null.into())
            }
            fn visit_none<E>(self) -> Result<Node, E> {
                Ok(Value::Null.into())
            }
            fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
                Ok(Value::Bool(v).into())
            }
            fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
                Ok(Value::Int(v).into())
            }
            fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
                Ok(i64::try_from(v).map_or(Value::Uint(v), Value::Int).into())
            }
            fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
                Ok(Value::Float(v).into())
            }
            fn visit_str<E>(self, v: &str) -> Result<Node, E> {
                Ok(Value::Str(v.to_string()).into())
            }
            fn visit_string<E>(self, v: String) -> Result<Node, E> {
                Ok(Value::Str(v).into())
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Value::Seq(items).into())
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
                let mut entries: Vec<(String, Node)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, Node>()? {
                    // encoding/json keeps the last of duplicate keys.
                    match entries.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, v)) => *v = value,
                        None => entries.push((key, value)),
                    }
                }
                Ok(Value::Map(entries).into())
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn add_follows_json_patch_and_keeps_key_order() {
        let mut node: Node = serde_json::from_str(r#"{"z": 1, "spec": {"containers": [{"name": "a"}]}}"#).unwrap();
        let at = Pointer::from_static;
        node.add(at("/spec/containers/-"), Node::from_json(&json!({"name": "b"})))
            .unwrap();
        node.add(at("/spec/initContainers"), Node::from_json(&json!([])))
            .unwrap();
        node.add(at("/spec/initContainers/0"), Node::from_json(&json!({"name": "i"})))
            .unwrap();
        node.add(at("/a~1b"), Node::from_json(&json!("slash"))).unwrap();
        assert_eq!(
            node.to_json(),
            json!({"z": 1, "spec": {"containers": [{"name": "a"}, {"name": "b"}], "initContainers": [{"name": "i"}]}, "a/b": "slash"})
        );
        let Value::Map(entries) = &node.value else { panic!() };
        let keys: Vec<&str> = entries.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["z", "spec", "a/b"]);
        assert!(node.add(at("/spec/containers/9"), Node::from(Value::Null)).is_err());
        assert!(node.add(at("/nope/x"), Node::from(Value::Null)).is_err());
    }

    #[test]
    fn json_input_keeps_key_order_and_last_duplicate() {
        let node: Node = serde_json::from_str(r#"{"b": 1, "a": [true, null, 1.5, -2, "x"], "b": 2}"#).unwrap();
        let Value::Map(entries) = &node.value else { panic!() };
        assert_eq!(entries[0].0, "b");
        assert_eq!(node.to_json(), json!({"b": 2, "a": [true, null, 1.5, -2, "x"]}));
    }
}
