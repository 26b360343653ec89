//! Maps a field path (`containers[0].resources`) to the line it sits on in a YAML text.
//!
//! serde only tells us *which* field was ignored, never *where*; a second, event-level
//! pass over the same text recovers the line so an error can point the user at it.

use std::cell::OnceCell;
use std::collections::HashMap;

use granit_parser::{Event, Parser, ScalarStyle};

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

/// A YAML parser's message without the places it names (`at line 5 column 8`): the
/// line is reported apart, counted in the user's file, and a second line counted from
/// elsewhere (a template's first line) would only mislead.
pub fn without_locations(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(" at line ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + " at line ".len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let mut tail = &after[digits..];
        if digits == 0 {
            out.push_str(" at line ");
            rest = after;
            continue;
        }
        if let Some(column) = tail.strip_prefix(" column ") {
            let digits = column.bytes().take_while(u8::is_ascii_digit).count();
            if digits > 0 {
                tail = &column[digits..];
            }
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

enum Frame {
    Mapping { awaiting_key: bool, key: Option<String> },
    Sequence { next_index: usize },
}

/// Line (1-based) of every mapping key and list entry in the first document of `text`, by
/// path, and for every literal block scalar (`key: |`) value the line before its first
/// line.
#[derive(Default)]
pub struct LineIndex {
    lines: HashMap<Vec<Segment>, usize>,
    literal_blocks: HashMap<Vec<Segment>, usize>,
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
        LineIndex {
            lines: collector.lines,
            literal_blocks: collector.literal_blocks,
        }
    }

    pub fn line_of(&self, path: &[Segment]) -> Option<usize> {
        self.lines.get(path).copied()
    }
}

/// The lines of a template's text, read the first time a fault asks for one: a template
/// without faults is parsed once, one with many is read for its lines once.
pub struct Lines<'t> {
    text: &'t str,
    index: OnceCell<LineIndex>,
}

impl<'t> Lines<'t> {
    pub fn new(text: &'t str) -> Lines<'t> {
        Lines {
            text,
            index: OnceCell::new(),
        }
    }

    pub fn line_of(&self, path: &[Segment]) -> Option<usize> {
        self.index.get_or_init(|| LineIndex::build(self.text)).line_of(path)
    }

    /// The line of `path`, or of the nearest enclosing field written (a required field
    /// that is missing is pointed at by its parent).
    pub fn line_near(&self, path: &[Segment]) -> Option<usize> {
        (0..=path.len()).rev().find_map(|len| self.line_of(&path[..len]))
    }
}

/// Where the templates of a ConfigMap manifest sit in its file, so that an error found in a
/// template (whose lines count from the template's own first line) can name the file's
/// line. A key holding a literal block (`config: |`, the form kubectl and editors write)
/// keeps the template's lines one for one: its line N is the file's line `before + N`,
/// `before` being the line of the `|` indicator.
/// Other forms (quoted, folded) join or escape lines and have no such mapping.
#[derive(Debug, Default, Clone)]
pub struct ConfigMapLines {
    /// Per `data` key: the line before its block's first line.
    before: HashMap<String, usize>,
}

impl ConfigMapLines {
    /// Reads the first document of a ConfigMap manifest's text.
    pub fn build(manifest: &str) -> ConfigMapLines {
        let index = LineIndex::build(manifest);
        let before = index
            .literal_blocks
            .into_iter()
            .filter_map(|(path, line)| match path.as_slice() {
                [Segment::Key(data), Segment::Key(key)] if data == "data" => Some((key.clone(), line)),
                _ => None,
            })
            .collect();
        ConfigMapLines { before }
    }

    /// The file's line of line `template_line` (1-based) of the template under `key`, when
    /// the key holds a literal block.
    pub fn file_line(&self, key: &str, template_line: usize) -> Option<usize> {
        self.before.get(key).map(|before| before + template_line)
    }
}

#[derive(Default)]
struct Collector {
    stack: Vec<Frame>,
    path: Vec<Segment>,
    lines: HashMap<Vec<Segment>, usize>,
    literal_blocks: HashMap<Vec<Segment>, usize>,
}

impl Collector {
    /// Called before a node (scalar or collection) that is a *value* starts on `line`:
    /// pushes the segment that leads to it (a list entry's line is recorded here).
    fn enter_value(&mut self, line: usize) {
        match self.stack.last_mut() {
            Some(Frame::Sequence { next_index }) => {
                self.path.push(Segment::Index(*next_index));
                *next_index += 1;
                self.lines.entry(self.path.clone()).or_insert(line);
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
            Event::Scalar(value, style, ..) => {
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
                    self.enter_value(line);
                    if style == ScalarStyle::Literal {
                        // The event starts on the block's first line that is not blank;
                        // the value keeps the blank ones before it as newlines.
                        let blank = value.bytes().take_while(|&b| b == b'\n').count();
                        let before_first = line.saturating_sub(blank + 1);
                        self.literal_blocks.entry(self.path.clone()).or_insert(before_first);
                    }
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
                    self.enter_value(line);
                    self.leave_value();
                }
            }
            Event::MappingStart(..) => {
                self.enter_value(line);
                self.stack.push(Frame::Mapping {
                    awaiting_key: true,
                    key: None,
                });
            }
            Event::SequenceStart(..) => {
                self.enter_value(line);
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
        assert_eq!(index.line_of(&[key("containers"), Segment::Index(1)]), Some(4));
        assert_eq!(index.line_of(&[key("nope")]), None);
    }

    #[test]
    fn a_literal_block_keeps_its_lines_one_for_one() {
        let manifest = "apiVersion: v1\nkind: ConfigMap\ndata:\n  config: |\n    containers:\n    - name: a\n  \"quoted\": \"x: 1\\ny: 2\"\n  other: |-  # a comment\n\n    volumes: []\n";
        let lines = ConfigMapLines::build(manifest);
        // `config: |` is line 4; the template's line 2 (`- name: a`) is the file's line 6.
        assert_eq!(lines.file_line("config", 2), Some(6));
        assert_eq!(lines.file_line("config", 1), Some(5));
        // A blank first line is kept too: `volumes` is the template's line 2.
        assert_eq!(lines.file_line("other", 2), Some(10));
        // A quoted string has no line-for-line mapping; an absent key none at all.
        assert_eq!(lines.file_line("quoted", 1), None);
        assert_eq!(lines.file_line("nope", 1), None);
    }

    #[test]
    fn a_message_loses_every_place_it_names() {
        assert_eq!(
            without_locations(
                "did not find expected ',' or ']' at line 5 column 8, while parsing a flow sequence at line 4 column 9"
            ),
            "did not find expected ',' or ']', while parsing a flow sequence"
        );
        assert_eq!(without_locations("invalid type at line 3"), "invalid type");
        assert_eq!(without_locations("a value at line x"), "a value at line x");
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
