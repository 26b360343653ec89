//! Reading `/metrics` (the Prometheus text format): one parser for every test binary and
//! the scale benchmark.

use std::collections::BTreeMap;

/// One sample line: name, labels, value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Sample {
    /// `name{k="v",...} value`; `None` for comments, blank lines and anything else.
    fn parse(line: &str) -> Option<Sample> {
        if line.starts_with('#') {
            return None;
        }
        let (series, value) = line.trim().rsplit_once(' ')?;
        let value = value.parse().ok()?;
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let labels = rest
                    .trim_end_matches('}')
                    .split("\",")
                    .filter_map(|pair| pair.split_once("=\""))
                    .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
                    .collect();
                (name, labels)
            }
            None => (series, BTreeMap::new()),
        };
        Some(Sample {
            name: name.to_string(),
            labels,
            value,
        })
    }
}

/// Every sample of one `/metrics` text.
#[derive(Debug, Clone)]
pub struct Samples(pub Vec<Sample>);

impl Samples {
    pub fn parse(text: &str) -> Samples {
        Samples(text.lines().filter_map(Sample::parse).collect())
    }

    /// The value of one series, written as in the text (`name` or `name{k="v",...}`, the
    /// whole label set).
    pub fn value(&self, series: &str) -> Option<f64> {
        let wanted = Sample::parse(&format!("{series} 0"))?;
        self.0
            .iter()
            .find(|s| s.name == wanted.name && s.labels == wanted.labels)
            .map(|s| s.value)
    }

    /// Whether any sample is named `name`.
    pub fn has(&self, name: &str) -> bool {
        self.0.iter().any(|s| s.name == name)
    }

    /// Sum of `name` over the samples whose labels pass `keep`; 0 when there is none.
    pub fn sum_where(&self, name: &str, keep: impl Fn(&BTreeMap<String, String>) -> bool) -> f64 {
        self.0
            .iter()
            .filter(|s| s.name == name && keep(&s.labels))
            .map(|s| s.value)
            .sum()
    }

    /// Sum of `name` over the samples whose labels include every `labels` pair.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.sum_where(name, |have| {
            labels.iter().all(|(k, v)| have.get(*k).is_some_and(|x| x == v))
        })
    }
}

/// The value of one series of the metrics text (`name{labels}`, the whole label set).
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    Samples::parse(text).value(series)
}

/// The sum of the samples of `name` whose labels include every `labels` pair; 0 when
/// there is none.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    Samples::parse(text).sum(name, labels)
}
