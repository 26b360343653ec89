//! What the engine reads of a Pod, borrowed from wherever the Pod is: a parsed JSON value
//! (`inject`, `check`) or the raw JSON text of an AdmissionReview, read in the same pass
//! as the review (admission). Everything else in the Pod is skipped, never allocated.
//!
//! What is kept keeps its exact shape: absent, `null`, of the wrong type, list indices.
//! The patch addresses the Pod the API server sent, never a re-serialised copy, so fields
//! this binary does not know survive untouched; a wrong type is named by [`PodView::check`]
//! only when the engine comes to use the field, as the API server would name it.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::InjectError;
use super::policy::{Flag, MetaMap, PodMeta};
use crate::template::quantity::Quantity;

/// A field as it was found.
#[derive(Debug, Clone, Default)]
pub enum Found<T> {
    #[default]
    Absent,
    Null,
    Is(T),
    /// Of another JSON type than expected; says which.
    Wrong(&'static str),
}

impl<T> Found<T> {
    pub fn get(&self) -> Option<&T> {
        match self {
            Found::Is(value) => Some(value),
            _ => None,
        }
    }
}

/// How a type is read from the JSON value that should hold it: `None` when the value is
/// of another JSON type (then it has been skipped).
pub trait Shape<'de>: Sized {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn from_str(_: Cow<'de, str>) -> Option<Self> {
        None
    }
    fn from_i64(_: i64) -> Option<Self> {
        None
    }
    fn from_bool(_: bool) -> Option<Self> {
        None
    }
    fn from_f64(_: f64) -> Option<Self> {
        None
    }
}

impl Shape<'_> for bool {
    fn from_bool(value: bool) -> Option<Self> {
        Some(value)
    }
}

impl<'de: 'a, 'a> Shape<'de> for Cow<'a, str> {
    fn from_str(text: Cow<'de, str>) -> Option<Self> {
        Some(text)
    }
}

impl Shape<'_> for i64 {
    fn from_i64(number: i64) -> Option<Self> {
        Some(number)
    }
}

impl<'de, T: Deserialize<'de>> Shape<'de> for Vec<T> {
    fn from_seq<A: SeqAccess<'de>>(mut seq: A) -> Result<Option<Self>, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Some(items))
    }
}

/// Implements [`Shape`] for a struct read from a JSON object by its derived `Deserialize`.
macro_rules! object_shape {
    ($($name:ident),*) => {$(
        impl<'de: 'a, 'a> Shape<'de> for $name<'a> {
            fn from_map<A: MapAccess<'de>>(map: A) -> Result<Option<Self>, A::Error> {
                $name::deserialize(de::value::MapAccessDeserializer::new(map)).map(Some)
            }
        }
    )*};
}

impl<'de, T: Shape<'de>> Deserialize<'de> for Found<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(FoundVisitor(PhantomData))
    }
}

struct FoundVisitor<T>(PhantomData<T>);

fn found<T>(value: Option<T>, type_name: &'static str) -> Found<T> {
    value.map_or(Found::Wrong(type_name), Found::Is)
}

impl<'de, T: Shape<'de>> Visitor<'de> for FoundVisitor<T> {
    type Value = Found<T>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Found<T>, A::Error> {
        Ok(found(T::from_map(map)?, "an object"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Found<T>, A::Error> {
        Ok(found(T::from_seq(seq)?, "an array"))
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Found<T>, E> {
        Ok(found(T::from_str(Cow::Borrowed(text)), "a string"))
    }

    fn visit_str<E>(self, text: &str) -> Result<Found<T>, E> {
        Ok(found(T::from_str(Cow::Owned(text.to_string())), "a string"))
    }

    fn visit_string<E>(self, text: String) -> Result<Found<T>, E> {
        Ok(found(T::from_str(Cow::Owned(text)), "a string"))
    }

    fn visit_i64<E>(self, number: i64) -> Result<Found<T>, E> {
        Ok(found(T::from_i64(number), "a number"))
    }

    fn visit_u64<E>(self, number: u64) -> Result<Found<T>, E> {
        Ok(found(i64::try_from(number).ok().and_then(T::from_i64), "a number"))
    }

    fn visit_bool<E>(self, value: bool) -> Result<Found<T>, E> {
        Ok(found(T::from_bool(value), "a boolean"))
    }

    fn visit_f64<E>(self, number: f64) -> Result<Found<T>, E> {
        Ok(found(T::from_f64(number), "a number"))
    }

    fn visit_unit<E>(self) -> Result<Found<T>, E> {
        Ok(Found::Null)
    }

    fn visit_none<E>(self) -> Result<Found<T>, E> {
        Ok(Found::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Found<T>, D::Error> {
        Found::deserialize(deserializer)
    }
}

/// An annotation or label value: a string, or the JSON text of whatever else it was.
#[derive(Debug, Clone)]
pub enum Text<'a> {
    Str(Cow<'a, str>),
    Other(String),
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TextVisitor(PhantomData))
    }
}

struct TextVisitor<'a>(PhantomData<&'a ()>);

/// Strings borrowed; anything else (the API server refuses it) kept as its JSON text, to
/// be named in a warning.
impl<'de: 'a, 'a> Visitor<'de> for TextVisitor<'a> {
    type Value = Text<'a>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Text<'a>, E> {
        Ok(Text::Str(Cow::Borrowed(text)))
    }

    fn visit_str<E>(self, text: &str) -> Result<Text<'a>, E> {
        Ok(Text::Str(Cow::Owned(text.to_string())))
    }

    fn visit_string<E>(self, text: String) -> Result<Text<'a>, E> {
        Ok(Text::Str(Cow::Owned(text)))
    }

    fn visit_bool<E>(self, value: bool) -> Result<Text<'a>, E> {
        Ok(Text::Other(value.to_string()))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Text<'a>, E> {
        Ok(Text::Other(value.to_string()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Text<'a>, E> {
        Ok(Text::Other(value.to_string()))
    }

    fn visit_f64<E>(self, value: f64) -> Result<Text<'a>, E> {
        Ok(Text::Other(Value::from(value).to_string()))
    }

    fn visit_unit<E>(self) -> Result<Text<'a>, E> {
        Ok(Text::Other("null".into()))
    }

    fn visit_none<E>(self) -> Result<Text<'a>, E> {
        Ok(Text::Other("null".into()))
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Text<'a>, D::Error> {
        deserializer.deserialize_any(TextVisitor(PhantomData))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Text<'a>, A::Error> {
        let value = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Text::Other(value.to_string()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Text<'a>, A::Error> {
        let value = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Text::Other(value.to_string()))
    }
}

/// `metadata.annotations` or `metadata.labels`, in the Pod's order.
#[derive(Debug, Clone, Default)]
pub struct Dict<'a>(pub Vec<(Cow<'a, str>, Text<'a>)>);

impl<'a> Dict<'a> {
    pub fn get(&self, key: &str) -> Option<&Text<'a>> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    pub fn text(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            Text::Str(text) => Some(text),
            Text::Other(_) => None,
        }
    }
}

impl MetaMap for Dict<'_> {
    fn flag(&self, key: &str) -> Option<Flag<'_>> {
        Some(match self.get(key)? {
            Text::Str(text) => Flag::Text(text),
            Text::Other(found) => Flag::Other(found.clone()),
        })
    }
}

/// A key borrowed from the input where it has no escapes.
struct Key<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Key<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match Found::<Cow<'a, str>>::deserialize(deserializer)? {
            Found::Is(key) => Ok(Key(key)),
            _ => Err(de::Error::custom("expected a string key")),
        }
    }
}

impl<'de: 'a, 'a> Shape<'de> for Dict<'a> {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(64));
        while let Some((Key(key), value)) = map.next_entry::<Key<'a>, Text<'a>>()? {
            entries.push((key, value));
        }
        Ok(Some(Dict(entries)))
    }
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount<'a> {
    #[serde(borrow, default)]
    pub name: Found<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub mount_path: Found<Cow<'a, str>>,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Port<'a> {
    #[serde(default)]
    pub container_port: Found<i64>,
    #[serde(borrow, default)]
    pub protocol: Found<Cow<'a, str>>,
}

/// A quantity as the Pod writes it: a string, or a JSON number, which the API server
/// reads as a quantity too (`cpu: 1` in YAML).
#[derive(Debug, Clone)]
pub struct QuantityText<'a> {
    pub text: Cow<'a, str>,
    pub number: bool,
}

impl<'de: 'a, 'a> Shape<'de> for QuantityText<'a> {
    fn from_str(text: Cow<'de, str>) -> Option<Self> {
        Some(QuantityText { text, number: false })
    }
    fn from_i64(number: i64) -> Option<Self> {
        Some(QuantityText {
            text: Cow::Owned(number.to_string()),
            number: true,
        })
    }
    fn from_f64(number: f64) -> Option<Self> {
        // serde_json writes an f64 in its shortest exact form, which is its JSON text.
        Some(QuantityText {
            text: Cow::Owned(Value::from(number).to_string()),
            number: true,
        })
    }
}

/// `requests` or `limits`: resource names and their quantities, in the Pod's order.
#[derive(Debug, Clone, Default)]
pub struct ResourceMap<'a>(pub Vec<(Cow<'a, str>, Found<QuantityText<'a>>)>);

impl<'de: 'a, 'a> Shape<'de> for ResourceMap<'a> {
    fn from_map<A: MapAccess<'de>>(mut map: A) -> Result<Option<Self>, A::Error> {
        let mut entries = Vec::with_capacity(map.size_hint().unwrap_or(0).min(8));
        while let Some((Key(key), value)) = map.next_entry::<Key<'a>, Found<QuantityText<'a>>>()? {
            entries.push((key, value));
        }
        Ok(Some(ResourceMap(entries)))
    }
}

/// A container's or the Pod's `resources`: what the Pod-level raise and the QoS class
/// are computed from.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Resources<'a> {
    #[serde(borrow, default)]
    pub requests: Found<ResourceMap<'a>>,
    #[serde(borrow, default)]
    pub limits: Found<ResourceMap<'a>>,
}

/// Of a container: its name, mounts and ports (what the template's are compared with),
/// its resources and (of an init container) whether it is a native sidecar.
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container<'a> {
    #[serde(borrow, default)]
    pub name: Found<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub volume_mounts: Found<Vec<Found<Mount<'a>>>>,
    #[serde(borrow, default)]
    pub ports: Found<Vec<Found<Port<'a>>>>,
    #[serde(borrow, default)]
    pub resources: Found<Resources<'a>>,
    #[serde(borrow, default)]
    pub restart_policy: Found<Cow<'a, str>>,
}

/// Of a list entry known by its name (an image pull secret).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Named<'a> {
    #[serde(borrow, default)]
    pub name: Found<Cow<'a, str>>,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct Metadata<'a> {
    #[serde(borrow, default)]
    pub annotations: Found<Dict<'a>>,
    #[serde(borrow, default)]
    pub labels: Found<Dict<'a>>,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec<'a> {
    #[serde(borrow, default)]
    pub containers: Found<Vec<Found<Container<'a>>>>,
    #[serde(borrow, default)]
    pub init_containers: Found<Vec<Found<Container<'a>>>>,
    /// By name only: a same-named volume is read whole from [`Whole`] when compared.
    #[serde(borrow, default)]
    pub volumes: Found<Vec<Found<Named<'a>>>>,
    #[serde(borrow, default)]
    pub image_pull_secrets: Found<Vec<Found<Named<'a>>>>,
    /// On the node's network, a Pod is left alone unless its template allows it.
    #[serde(default)]
    pub host_network: Found<bool>,
    /// Pod-level resources, which the injection raises by what it adds.
    #[serde(borrow, default)]
    pub resources: Found<Resources<'a>>,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Body<'a> {
    #[serde(borrow, default)]
    pub api_version: Found<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub kind: Found<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub metadata: Found<Metadata<'a>>,
    #[serde(borrow, default)]
    pub spec: Found<Spec<'a>>,
}

object_shape!(Mount, Port, Resources, Container, Named, Metadata, Spec, Body);

/// Where the whole Pod is, for the rare field the view skipped but the engine needs: a
/// volume whose name is also a template volume's, compared field by field.
#[derive(Debug, Clone, Copy, Default)]
pub enum Whole<'a> {
    /// Not known (a view parsed on its own): such a comparison is refused.
    #[default]
    Unknown,
    Value(&'a Value),
    /// JSON text holding the Pod at `pointer` (e.g. a review body at `/request/object`).
    Text {
        json: &'a [u8],
        pointer: &'static str,
    },
}

impl Whole<'_> {
    /// The whole Pod, parsed: for the rare path that reads what the view skips.
    pub fn pod(&self) -> Option<Value> {
        match self {
            Whole::Unknown => None,
            Whole::Value(pod) => Some((*pod).clone()),
            Whole::Text { json, pointer } => {
                let mut text: Value = serde_json::from_slice(json).ok()?;
                text.pointer_mut(pointer).map(Value::take)
            }
        }
    }

    /// Volume `index` of the Pod, read whole.
    fn volume(&self, index: usize) -> Option<Map<String, Value>> {
        let at = |pod: &Value| pod.pointer(&format!("/spec/volumes/{index}"))?.as_object().cloned();
        match self {
            Whole::Unknown => None,
            Whole::Value(pod) => at(pod),
            Whole::Text { json, pointer } => {
                let text: Value = serde_json::from_slice(json).ok()?;
                at(text.pointer(pointer)?)
            }
        }
    }
}

/// What the engine reads of one Pod. Reading never fails on the Pod's content; the
/// engine asks [`PodView::check`] for the fields it is about to use.
#[derive(Debug, Clone, Default)]
pub struct PodView<'a> {
    pub body: Found<Body<'a>>,
    pub whole: Whole<'a>,
}

impl<'de: 'a, 'a> Deserialize<'de> for PodView<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(PodView {
            body: Found::deserialize(deserializer)?,
            whole: Whole::Unknown,
        })
    }
}

impl<'a> PodView<'a> {
    /// Reads a Pod held as a JSON value, borrowing its strings.
    pub fn read(pod: &'a Value) -> PodView<'a> {
        // A `Value` is always readable: every shape is a `Found` variant.
        let body = PodView::deserialize(pod).map(|view| view.body).unwrap_or_default();
        PodView {
            body,
            whole: Whole::Value(pod),
        }
    }

    /// Says where the whole Pod is (see [`Whole`]).
    pub fn within(mut self, whole: Whole<'a>) -> PodView<'a> {
        self.whole = whole;
        self
    }

    /// True when the review carried no Pod at all (absent or `null`).
    pub fn is_none(&self) -> bool {
        matches!(self.body, Found::Absent | Found::Null)
    }

    fn body(&self) -> Option<&Body<'a>> {
        self.body.get()
    }

    fn metadata(&self) -> Option<&Metadata<'a>> {
        self.body()?.metadata.get()
    }

    /// The object's own apiVersion and kind, when they are strings.
    pub fn api_version(&self) -> Option<&str> {
        self.body()?.api_version.get().map(|v| v.as_ref())
    }

    pub fn kind(&self) -> Option<&str> {
        self.body()?.kind.get().map(|v| v.as_ref())
    }

    /// `metadata.annotations` when it is a map (anything else opts nothing in).
    pub fn annotations(&self) -> Option<&Dict<'a>> {
        self.metadata()?.annotations.get()
    }

    /// The annotations as the opt-in rules read them.
    pub fn annotations_for_policy(&self) -> Option<&dyn MetaMap> {
        self.annotations().map(|a| a as &dyn MetaMap)
    }

    /// `metadata.labels` when it is a map.
    pub fn labels(&self) -> Option<&Dict<'a>> {
        self.metadata()?.labels.get()
    }

    /// `spec.hostNetwork: true`. Any other value is not the node's network: the API server
    /// refuses a Pod whose value is not a boolean.
    pub fn host_network(&self) -> bool {
        let spec = self.body().and_then(|b| b.spec.get());
        matches!(spec.map(|s| &s.host_network), Some(Found::Is(true)))
    }

    /// The annotations and labels as the opt-in rules read them.
    pub fn meta(&self) -> PodMeta<'_> {
        PodMeta::new(self.annotations_for_policy(), self.labels().map(|l| l as &dyn MetaMap))
    }

    /// The fields the engine uses, each checked for its type, or the first wrong one named
    /// (in the order the API server's validation would meet them).
    pub fn check(&self) -> Result<Checked<'_, 'a>, InjectError> {
        let body = match &self.body {
            Found::Is(body) => body,
            Found::Wrong(type_name) => return Err(wrong("(the Pod)", "an object", type_name)),
            Found::Absent | Found::Null => return Err(wrong("(the Pod)", "an object", "null")),
        };
        let metadata = object(&body.metadata, "metadata")?;
        let spec = object(&body.spec, "spec")?;
        Ok(Checked {
            has_metadata: metadata.is_some(),
            has_spec: spec.is_some(),
            annotations: object_or_absent(metadata.map(|m| &m.annotations), "metadata.annotations")?,
            labels: object_or_absent(metadata.map(|m| &m.labels), "metadata.labels")?,
            containers: list(spec.map(|s| &s.containers), "spec.containers")?,
            containers_null: spec.is_some_and(|s| matches!(s.containers, Found::Null)),
            init_containers: list(spec.map(|s| &s.init_containers), "spec.initContainers")?,
            volumes: list(spec.map(|s| &s.volumes), "spec.volumes")?,
            image_pull_secrets: list(spec.map(|s| &s.image_pull_secrets), "spec.imagePullSecrets")?,
            resources: spec.map(|s| &s.resources),
            whole: &self.whole,
        })
    }
}

fn wrong(path: &str, expected: &'static str, found: &'static str) -> InjectError {
    InjectError::InvalidPod {
        path: path.to_string(),
        expected,
        found,
    }
}

fn object<'v, T>(field: &'v Found<T>, path: &str) -> Result<Option<&'v T>, InjectError> {
    match field {
        Found::Absent | Found::Null => Ok(None),
        Found::Is(value) => Ok(Some(value)),
        Found::Wrong(type_name) => Err(wrong(path, "an object", type_name)),
    }
}

fn object_or_absent<'v, T>(field: Option<&'v Found<T>>, path: &str) -> Result<Option<&'v T>, InjectError> {
    field.map_or(Ok(None), |field| object(field, path))
}

fn list<'v, T>(field: Option<&'v Found<Vec<Found<T>>>>, path: &str) -> Result<List<'v, T>, InjectError> {
    match field {
        None | Some(Found::Absent | Found::Null) => Ok(List::Absent),
        Some(Found::Wrong(type_name)) => Err(wrong(path, "an array", type_name)),
        Some(Found::Is(items)) => {
            for (index, item) in items.iter().enumerate() {
                match item {
                    Found::Is(_) => {}
                    Found::Wrong(type_name) => return Err(wrong(&format!("{path}[{index}]"), "an object", type_name)),
                    Found::Absent | Found::Null => return Err(wrong(&format!("{path}[{index}]"), "an object", "null")),
                }
            }
            Ok(List::Present(items))
        }
    }
}

/// A list field of the Pod: absent (or `null`) is different from empty for JSON Patch.
/// Present lists have been checked: every entry is an object.
#[derive(Debug)]
pub enum List<'v, T> {
    Absent,
    Present(&'v [Found<T>]),
}

impl<T> Clone for List<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for List<'_, T> {}

impl<'v, T> List<'v, T> {
    pub fn items(&self) -> impl Iterator<Item = &'v T> + 'v {
        let items: &'v [Found<T>] = match self {
            List::Absent => &[],
            List::Present(items) => items,
        };
        items.iter().filter_map(Found::get)
    }

    pub fn get(&self, index: usize) -> Option<&'v T> {
        match self {
            List::Absent => None,
            List::Present(items) => items.get(index)?.get(),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            List::Absent => 0,
            List::Present(items) => items.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_absent(&self) -> bool {
        matches!(self, List::Absent)
    }
}

/// The fields the engine uses, checked ([`PodView::check`]).
#[derive(Debug, Clone, Copy)]
pub struct Checked<'v, 'a> {
    pub has_metadata: bool,
    pub has_spec: bool,
    pub annotations: Option<&'v Dict<'a>>,
    pub labels: Option<&'v Dict<'a>>,
    pub containers: List<'v, Container<'a>>,
    /// `spec.containers: null` (told apart from absent in the refusal's wording).
    pub containers_null: bool,
    pub init_containers: List<'v, Container<'a>>,
    pub volumes: List<'v, Named<'a>>,
    whole: &'v Whole<'a>,
    pub image_pull_secrets: List<'v, Named<'a>>,
    /// Checked when read ([`Checked::pod_resources`]).
    resources: Option<&'v Found<Resources<'a>>>,
}

/// The text of a string field, or "" when it is absent or not a string (the API server
/// refuses such a Pod later; it must not make us panic now).
pub fn text<'v>(field: &'v Found<Cow<'_, str>>) -> &'v str {
    field.get().map_or("", |text| text.as_ref())
}

impl<'a> Container<'a> {
    pub fn name(&self) -> &str {
        text(&self.name)
    }

    /// `volumeMounts`, as (name, mountPath) pairs.
    pub fn mounts(&self) -> impl Iterator<Item = (&str, &str)> {
        let mounts: &[Found<Mount<'a>>] = self.volume_mounts.get().map_or(&[], Vec::as_slice);
        mounts.iter().map(|mount| match mount.get() {
            Some(mount) => (text(&mount.name), text(&mount.mount_path)),
            None => ("", ""),
        })
    }

    /// `(port, protocol)` of each containerPort (protocol defaults to TCP).
    pub fn ports(&self) -> impl Iterator<Item = (i64, &str)> {
        let ports: &[Found<Port<'a>>] = self.ports.get().map_or(&[], Vec::as_slice);
        ports.iter().filter_map(Found::get).filter_map(|port| {
            let number = *port.container_port.get()?;
            let protocol = port.protocol.get().map_or("TCP", |p| p.as_ref());
            Some((number, protocol))
        })
    }
}

impl Named<'_> {
    pub fn name(&self) -> &str {
        text(&self.name)
    }
}

/// `requests` and `limits` of a `resources` field, each quantity parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceLists {
    /// `None` where the map is absent or `null`.
    pub requests: Option<BTreeMap<String, Quantity>>,
    pub limits: Option<BTreeMap<String, Quantity>>,
}

impl Container<'_> {
    /// `resources.requests` and `resources.limits`, each quantity parsed, or the first
    /// wrong one named; `at` is where the container is (`spec.containers[0]`).
    pub fn resource_lists(&self, at: &str) -> Result<ResourceLists, InjectError> {
        Ok(read_resources(&self.resources, &format!("{at}.resources"))?.unwrap_or_default())
    }

    /// A native sidecar: an init container with `restartPolicy: Always`.
    pub fn restartable(&self) -> bool {
        self.restart_policy.get().is_some_and(|policy| policy == "Always")
    }
}

/// A `resources` field read: `None` when absent or `null`.
fn read_resources(field: &Found<Resources<'_>>, at: &str) -> Result<Option<ResourceLists>, InjectError> {
    let Some(resources) = object(field, at)? else {
        return Ok(None);
    };
    let list = |field: &Found<ResourceMap<'_>>, name: &str| -> Result<_, InjectError> {
        let path = format!("{at}.{name}");
        let Some(map) = object(field, &path)? else {
            return Ok(None);
        };
        let mut parsed = BTreeMap::new();
        for (resource, value) in &map.0 {
            let path = || format!("{path}.{resource}");
            let text = match value {
                Found::Is(value) => &value.text,
                Found::Wrong(type_name) => return Err(wrong(&path(), "a quantity", type_name)),
                Found::Absent | Found::Null => return Err(wrong(&path(), "a quantity", "null")),
            };
            let quantity =
                Quantity::parse(text).map_err(|source| InjectError::InvalidQuantity { path: path(), source })?;
            // A key written twice: the last one counts, as when the API server decodes it.
            parsed.insert(resource.to_string(), quantity);
        }
        Ok(Some(parsed))
    };
    Ok(Some(ResourceLists {
        requests: list(&resources.requests, "requests")?,
        limits: list(&resources.limits, "limits")?,
    }))
}

impl Resources<'_> {
    /// `requests` and `limits` as JSON, each quantity as the Pod wrote it (a string or a
    /// number), a map absent left out and a `null` one kept: what `uninject` puts back.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        for (name, field) in [("requests", &self.requests), ("limits", &self.limits)] {
            let value = match field {
                Found::Absent | Found::Wrong(_) => continue,
                Found::Null => Value::Null,
                Found::Is(map) => Value::Object(
                    map.0
                        .iter()
                        .filter_map(|(key, value)| {
                            let value = value.get()?;
                            let json = match value.number {
                                true => serde_json::from_str(&value.text).ok()?,
                                false => Value::from(value.text.as_ref()),
                            };
                            Some((key.to_string(), json))
                        })
                        .collect(),
                ),
            };
            out.insert(name.to_string(), value);
        }
        Value::Object(out)
    }
}

impl<'v> Checked<'v, '_> {
    /// Volume `index`, read whole; `None` when the view does not know where the Pod is.
    pub fn whole_volume(&self, index: usize) -> Option<Map<String, Value>> {
        self.whole.volume(index)
    }

    /// `spec.resources`, each quantity parsed: `None` when absent or `null`.
    pub fn pod_resources(&self) -> Result<Option<ResourceLists>, InjectError> {
        match self.resources {
            None => Ok(None),
            Some(field) => read_resources(field, "spec.resources"),
        }
    }

    /// `spec.resources` as JSON, as the Pod wrote it ([`Resources::to_json`]).
    pub fn pod_resources_json(&self) -> Option<Value> {
        self.resources?.get().map(Resources::to_json)
    }
}

/// True when every field set in `wanted` is set to the same value in `actual`. The API
/// server fills defaults (`defaultMode: 420`, ...) into stored objects, so an equal
/// definition may carry more fields than the template wrote.
pub fn is_subset(wanted: &Value, actual: &Value) -> bool {
    match (wanted, actual) {
        (Value::Object(w), Value::Object(a)) => is_subset_map(w, a),
        (Value::Array(w), Value::Array(a)) => w.len() == a.len() && w.iter().zip(a).all(|(wv, av)| is_subset(wv, av)),
        (w, a) => w == a,
    }
}

/// [`is_subset`] of two objects.
pub fn is_subset_map(wanted: &Map<String, Value>, actual: &Map<String, Value>) -> bool {
    wanted
        .iter()
        .all(|(k, wv)| actual.get(k).is_some_and(|av| is_subset(wv, av)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The same Pod read from a value and parsed from its text gives the same view.
    fn both(pod: &Value) -> [Result<String, InjectError>; 2] {
        let text = pod.to_string();
        let parsed: PodView<'_> = serde_json::from_str(&text).unwrap();
        // Told apart only by where the whole Pod is, which is not what is compared here.
        let read = PodView::read(pod).within(Whole::Unknown);
        [read, parsed].map(|view| view.check().map(|checked| format!("{checked:?}")))
    }

    #[test]
    fn absent_null_and_present_lists_are_told_apart() {
        let pod = json!({"metadata": {"annotations": null}, "spec": {"containers": [], "volumes": null}});
        let view = PodView::read(&pod);
        let checked = view.check().unwrap();
        assert!(checked.annotations.is_none());
        assert!(!checked.containers.is_absent());
        assert!(checked.volumes.is_absent());
        assert!(checked.init_containers.is_absent());
        let [read, parsed] = both(&pod);
        assert_eq!(read.unwrap(), parsed.unwrap());
    }

    #[test]
    fn wrong_types_name_the_field() {
        for (pod, path, message) in [
            (
                json!({"spec": {"containers": "nginx"}}),
                "spec.containers",
                "expected an array, found a string",
            ),
            (
                json!({"spec": {"volumes": [1]}}),
                "spec.volumes[0]",
                "expected an object, found a number",
            ),
            (
                json!({"metadata": [1]}),
                "metadata",
                "expected an object, found an array",
            ),
            (
                json!({"metadata": {"labels": true}}),
                "metadata.labels",
                "found a boolean",
            ),
            (json!("pod"), "(the Pod)", "expected an object, found a string"),
        ] {
            for result in both(&pod) {
                let err = result.err().unwrap().to_string();
                assert!(err.contains(path), "{err}");
                assert!(err.contains(message), "{err}");
            }
        }
    }

    #[test]
    fn what_is_kept_is_borrowed_and_lenient_inside_entries() {
        let text = r#"{"metadata": {"annotations": {"a": "b", "n": 1, "e": "x\"y"}},
            "spec": {"containers": [{"name": "app", "image": "nginx", "env": [{"name": "E"}],
              "ports": [{"containerPort": 80}, {"containerPort": "80"}, {"containerPort": 81, "protocol": "UDP"}],
              "volumeMounts": [{"name": "v", "mountPath": "/v"}, 3]}, {"name": 7}],
             "nodeName": "n"}, "status": {"phase": "Pending"}}"#;
        let view: PodView<'_> = serde_json::from_str(text).unwrap();
        let annotations = view.annotations().unwrap();
        assert!(matches!(annotations.get("a"), Some(Text::Str(Cow::Borrowed("b")))));
        assert!(matches!(annotations.get("n"), Some(Text::Other(found)) if found == "1"));
        assert_eq!(annotations.text("e"), Some("x\"y"));
        let checked = view.check().unwrap();
        let app = checked.containers.get(0).unwrap();
        assert_eq!(app.name(), "app");
        assert_eq!(app.ports().collect::<Vec<_>>(), [(80, "TCP"), (81, "UDP")]);
        assert_eq!(app.mounts().collect::<Vec<_>>(), [("v", "/v"), ("", "")]);
        assert_eq!(checked.containers.get(1).unwrap().name(), "");
    }

    #[test]
    fn subset_tolerates_server_defaults() {
        let template = json!({"name": "v", "configMap": {"name": "envoy"}});
        let stored = json!({"name": "v", "configMap": {"name": "envoy", "defaultMode": 420}});
        assert!(is_subset(&template, &stored));
        assert!(!is_subset(&stored, &template));
        assert!(!is_subset(&json!({"name": "v", "emptyDir": {}}), &stored));
    }
}
