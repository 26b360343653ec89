//! Maps a field path (`containers[0].resources`) to the line it sits on in a YAML text.
//!
//! serde only tells us *which* field was ignored, never *where*; a second, event-level
//! pass over the same text recovers the line so an error can point the user at it.

use std::collections::HashMap;

use granit_parser::{Event, Parser};

/// One step of a path into a YAML document.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// Renders a path the way a user writes it: `containers[0].volumeMounts[1].name`.
pub fn render_path(path: &[Segment]) -> String {
    let mut out = String::new();
    for segment in path {
        match segment {
            Segment::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Segment::Index(index) => {
                out.push('[');
                out.push_str(&index.to_string());
                out.push(']');
            }
        }
    }
    out
}

enum Frame {
    Mapping { awaiting_key: bool, key: Option<String> },
    Sequence { next_index: usize },
}

/// Line (1-based) of every mapping key in the first document of `text`, by path.
#[derive(Default)]
pub struct LineIndex {
    lines: HashMap<Vec<Segment>, usize>,
}

impl LineIndex {
    pub fn build(text: &str) -> Self {
        let mut collector = Collector::default();
        // A text serde already parsed is valid YAML; if this parser still disagrees we
        // simply have no line numbers past that point, which only makes the message less
        // precise.
        for event in Parser::new_from_str(text) {
            let Ok((event, span)) = event else { break };
            if matches!(event, Event::DocumentEnd) {
                break;
            }
            collector.on_event(event, span.start.line());
        }
        LineIndex { lines: collector.lines }
    }

    pub fn line_of(&self, path: &[Segment]) -> Option<usize> {
        self.lines.get(path).copied()
    }
}

#[derive(Default)]
struct Collector {
    stack: Vec<Frame>,
    path: Vec<Segment>,
    lines: HashMap<Vec<Segment>, usize>,
}

impl Collector {
    /// Called before a node (scalar or collection) that is a *value* starts: pushes the
    /// segment that leads to it.
    fn enter_value(&mut self) {
        match self.stack.last_mut() {
            Some(Frame::Sequence { next_index }) => {
                self.path.push(Segment::Index(*next_index));
                *next_index += 1;
            }
            Some(Frame::Mapping { awaiting_key, key }) => {
                *awaiting_key = true;
                self.path.push(Segment::Key(key.take().unwrap_or_default()));
            }
            None => {}
        }
    }

    fn leave_value(&mut self) {
        if !self.stack.is_empty() {
            self.path.pop();
        }
    }

    fn is_key_position(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Mapping { awaiting_key: true, .. }))
    }
}

impl Collector {
    /// One parser event that starts on `line` (1-based).
    fn on_event(&mut self, event: Event<'_>, line: usize) {
        match event {
            Event::Scalar(value, ..) => {
                if self.is_key_position() {
                    let value = value.into_owned();
                    let mut key_path = self.path.clone();
                    key_path.push(Segment::Key(value.clone()));
                    self.lines.entry(key_path).or_insert(line);
                    if let Some(Frame::Mapping { awaiting_key, key }) = self.stack.last_mut() {
                        *awaiting_key = false;
                        *key = Some(value);
                    }
                } else {
                    self.enter_value();
                    self.leave_value();
                }
            }
            Event::Alias(_) | Event::UnresolvedAlias(_) => {
                if self.is_key_position() {
                    if let Some(Frame::Mapping { awaiting_key, key }) = self.stack.last_mut() {
                        *awaiting_key = false;
                        *key = Some(String::from("*alias"));
                    }
                } else {
                    self.enter_value();
                    self.leave_value();
                }
            }
            Event::MappingStart(..) => {
                self.enter_value();
                self.stack.push(Frame::Mapping {
                    awaiting_key: true,
                    key: None,
                });
            }
            Event::SequenceStart(..) => {
                self.enter_value();
                self.stack.push(Frame::Sequence { next_index: 0 });
            }
            Event::MappingEnd | Event::SequenceEnd => {
                self.stack.pop();
                self.leave_value();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Segment {
        Segment::Key(k.to_string())
    }

    #[test]
    fn finds_nested_keys_in_sequences() {
        let text = "containers:\n- name: a\n  image: x\n- name: b\n  resources:\n    limits: {}\nvolumes: []\n";
        let index = LineIndex::build(text);
        assert_eq!(index.line_of(&[key("containers")]), Some(1));
        assert_eq!(
            index.line_of(&[key("containers"), Segment::Index(1), key("resources")]),
            Some(5)
        );
        assert_eq!(
            index.line_of(&[key("containers"), Segment::Index(1), key("resources"), key("limits")]),
            Some(6)
        );
        assert_eq!(index.line_of(&[key("volumes")]), Some(7));
        assert_eq!(index.line_of(&[key("nope")]), None);
    }

    #[test]
    fn renders_paths_like_a_user_writes_them() {
        let path = [
            key("containers"),
            Segment::Index(0),
            key("volumeMounts"),
            Segment::Index(2),
        ];
        assert_eq!(render_path(&path), "containers[0].volumeMounts[2]");
    }
}
