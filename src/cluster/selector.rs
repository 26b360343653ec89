//! Label selectors as the API server applies them (`namespaceSelector`, `objectSelector`).
//! Pure.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Whether `selector` selects an object with `labels`: every `matchLabels` pair and every
/// `matchExpressions` entry (`In`, `NotIn`, `Exists`, `DoesNotExist`) must hold; an empty
/// selector selects everything. `Err` names an operator the API server would not accept.
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<bool, String> {
    Ok(unmet(selector, labels)?.is_none())
}

/// A requirement not met: what the selector wants (`k in (a,b)`) and what the object
/// has (`` has `k=c` `` or `` has no label `k` ``).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmet {
    pub wanted: String,
    pub found: String,
}

/// The first requirement of `selector` that `labels` do not meet, or `None` when the
/// selector selects them.
pub fn unmet(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> Result<Option<Unmet>, String> {
    let found = |key: &str| match labels.get(key) {
        Some(value) => format!("has `{key}={value}`"),
        None => format!("has no label `{key}`"),
    };
    for (key, value) in selector.match_labels.iter().flatten() {
        if labels.get(key) != Some(value) {
            return Ok(Some(Unmet {
                wanted: format!("{key}={value}"),
                found: found(key),
            }));
        }
    }
    for expression in selector.match_expressions.iter().flatten() {
        let key = expression.key.as_str();
        let value = labels.get(key);
        let values = expression.values.as_deref().unwrap_or_default();
        let (holds, wanted) = match expression.operator.as_str() {
            "In" => (
                value.is_some_and(|v| values.contains(v)),
                format!("{key} in ({})", values.join(",")),
            ),
            "NotIn" => (
                value.is_none_or(|v| !values.contains(v)),
                format!("{key} notin ({})", values.join(",")),
            ),
            "Exists" => (value.is_some(), key.to_string()),
            "DoesNotExist" => (value.is_none(), format!("!{key}")),
            other => {
                return Err(format!(
                    "selector key `{key}`: expected operator In, NotIn, Exists or DoesNotExist, found `{other}`"
                ));
            }
        };
        if !holds {
            return Ok(Some(Unmet {
                wanted,
                found: found(key),
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    use super::*;

    fn requirement(key: &str, operator: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: operator.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn every_operator_and_match_labels() {
        let labels = BTreeMap::from([("a".to_string(), "1".to_string()), ("b".to_string(), "2".to_string())]);
        let selector = |expressions: Vec<LabelSelectorRequirement>| LabelSelector {
            match_labels: Some(BTreeMap::from([("a".to_string(), "1".to_string())])),
            match_expressions: Some(expressions),
        };
        assert_eq!(
            selects(&selector(vec![requirement("b", "In", &["2", "3"])]), &labels),
            Ok(true)
        );
        assert_eq!(
            selects(&selector(vec![requirement("b", "NotIn", &["2"])]), &labels),
            Ok(false)
        );
        assert_eq!(
            selects(&selector(vec![requirement("c", "NotIn", &["2"])]), &labels),
            Ok(true)
        );
        assert_eq!(
            selects(&selector(vec![requirement("b", "Exists", &[])]), &labels),
            Ok(true)
        );
        assert_eq!(
            selects(&selector(vec![requirement("b", "DoesNotExist", &[])]), &labels),
            Ok(false)
        );
        assert_eq!(selects(&LabelSelector::default(), &BTreeMap::new()), Ok(true));
        let wrong = LabelSelector {
            match_labels: Some(BTreeMap::from([("a".to_string(), "2".to_string())])),
            match_expressions: None,
        };
        assert_eq!(selects(&wrong, &labels), Ok(false));
        let words = |e| unmet(&selector(vec![e]), &labels).unwrap().map(|u| (u.wanted, u.found));
        assert_eq!(
            words(requirement("b", "NotIn", &["2"])),
            Some(("b notin (2)".to_string(), "has `b=2`".to_string()))
        );
        assert_eq!(
            words(requirement("c", "In", &["2"])),
            Some(("c in (2)".to_string(), "has no label `c`".to_string()))
        );
        let err = selects(&selector(vec![requirement("b", "Gt", &["1"])]), &labels).unwrap_err();
        assert!(err.contains("found `Gt`"), "{err}");
    }
}
