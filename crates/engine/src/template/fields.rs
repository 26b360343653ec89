//! The fields a template may carry at a place, read from the types themselves (the
//! template's own and k8s-openapi's), and the one nearest a misspelled name.
//!
//! serde tells a type's fields only to the deserializer it reads from: `deserialize_struct`
//! is handed them. So a deserializer that reads no text is walked down a path, handing each
//! type one key (or one list entry) and the next step as its value, until the type at the
//! end names its fields; no list is kept here that could drift from the types.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::yaml_locate::Segment;

/// The fields of the object at `path` inside a `T` (`[]`: `T`'s own), or `None` when
/// there is no struct there (a map of free keys, a scalar, a path `T` does not have).
pub fn known_at<'de, T: Deserialize<'de>>(path: &[Segment]) -> Option<&'static [&'static str]> {
    match T::deserialize(Walk { path }) {
        Err(Found::Fields(fields)) => Some(fields),
        _ => None,
    }
}

/// Of `known`, the name nearest `name` if it is near enough to be the one meant: at most
/// one edit ([`distance`]) for every three of its letters (and at least one), case aside.
pub fn nearest<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    let folded = name.to_ascii_lowercase();
    let allowed = (name.chars().count() / 3).max(1);
    known
        .iter()
        .map(|k| (distance(&folded, &k.to_ascii_lowercase()), *k))
        .filter(|(d, _)| *d <= allowed)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// Edits from `a` to `b` in chars: one for each char added, dropped or changed, and for
/// two neighbours swapped (`prot` for `port`), the commonest slip of the fingers (optimal
/// string alignment). A few lines, where a crate would be one more dependency of the pure
/// engine for this one use.
fn distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // d[i][j]: the distance of the first i chars of `a` to the first j of `b`.
    let mut d = vec![vec![0; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let changed = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1).min(d[i][j - 1] + 1).min(d[i - 1][j - 1] + changed);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// How a walk ends: the fields found, or no struct at the path.
#[derive(Debug)]
enum Found {
    Fields(&'static [&'static str]),
    Nothing,
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("walk ended")
    }
}

impl std::error::Error for Found {}

impl de::Error for Found {
    fn custom<M: fmt::Display>(_: M) -> Found {
        Found::Nothing
    }
}

/// The rest of the path to walk.
struct Walk<'p> {
    path: &'p [Segment],
}

impl<'de> Deserializer<'de> for Walk<'_> {
    type Error = Found;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
        Err(Found::Nothing)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Found> {
        if self.path.is_empty() {
            return Err(Found::Fields(fields));
        }
        self.deserialize_map(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        match self.path {
            [Segment::Key(key), rest @ ..] => visitor.visit_map(Step { key: Some(key), rest }),
            _ => Err(Found::Nothing),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        match self.path {
            [Segment::Index(_), rest @ ..] => visitor.visit_seq(Entry { rest: Some(rest) }),
            _ => Err(Found::Nothing),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Found> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, Found> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct tuple tuple_struct enum identifier ignored_any
    }
}

/// A map of one entry: the path's next key, then the walk on.
struct Step<'p> {
    key: Option<&'p str>,
    rest: &'p [Segment],
}

impl<'de> MapAccess<'de> for Step<'_> {
    type Error = Found;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, Found> {
        match self.key.take() {
            Some(key) => seed.deserialize(de::value::StrDeserializer::new(key)).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Found> {
        seed.deserialize(Walk { path: self.rest })
    }
}

/// A list of one entry: the walk on.
struct Entry<'p> {
    rest: Option<&'p [Segment]>,
}

impl<'de> SeqAccess<'de> for Entry<'_> {
    type Error = Found;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, Found> {
        match self.rest.take() {
            Some(path) => seed.deserialize(Walk { path }).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Container;

    use super::*;
    use crate::template::spec::TemplateSpec;

    fn path(text: &str) -> Vec<Segment> {
        text.split('.')
            .filter(|s| !s.is_empty())
            .map(|s| match s.parse() {
                Ok(i) => Segment::Index(i),
                Err(_) => Segment::Key(s.to_string()),
            })
            .collect()
    }

    #[test]
    fn the_fields_at_a_place_are_the_types_own() {
        let top = known_at::<TemplateSpec>(&[]).unwrap();
        assert!(top.contains(&"initContainers") && top.contains(&"fromPod"), "{top:?}");
        let container = known_at::<TemplateSpec>(&path("containers.0")).unwrap();
        assert_eq!(container, known_at::<Container>(&[]).unwrap());
        assert!(container.contains(&"imagePullPolicy"), "{container:?}");
        let http = known_at::<TemplateSpec>(&path("initContainers.2.livenessProbe.httpGet")).unwrap();
        assert!(http.contains(&"httpHeaders"), "{http:?}");
        let decl = known_at::<TemplateSpec>(&path("overrides.cpu")).unwrap();
        assert!(decl.contains(&"oneOf"), "{decl:?}");
        // A map of free keys, a scalar and a path the type lacks have no fields.
        assert_eq!(known_at::<TemplateSpec>(&path("containers.0.resources.limits")), None);
        assert_eq!(known_at::<TemplateSpec>(&path("containers.0.image")), None);
        assert_eq!(known_at::<TemplateSpec>(&path("containers.image")), None);
    }

    #[test]
    fn the_nearest_field_is_suggested_only_when_near() {
        let container = known_at::<Container>(&[]).unwrap();
        assert_eq!(nearest("imagePullPolcy", container), Some("imagePullPolicy"));
        assert_eq!(nearest("ImagePullPolicy", container), Some("imagePullPolicy"));
        assert_eq!(nearest("imag", container), Some("image"));
        assert_eq!(nearest("volumeMount", container), Some("volumeMounts"));
        assert_eq!(nearest("foo", container), None);
        assert_eq!(nearest("replicas", container), None);
        assert_eq!(
            nearest("prot", known_at::<TemplateSpec>(&path("containers.0.ports.0")).unwrap()),
            None
        );
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("prot", "port"), 1);
        assert_eq!(distance("ca", "abc"), 3);
    }
}
