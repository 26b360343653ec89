//! Cuts the input into documents as it is read, so that memory is bounded by the
//! largest document rather than by the file.
//!
//! YAML: a line that starts with `---` or `...` followed by a space, a tab or the end of
//! the line is a document boundary wherever it appears — YAML forbids such lines inside
//! any scalar, block or quoted — so the cut needs no parsing. A `---` line belongs to
//! the document it opens (it may carry content: `--- |`); a `...` line ends one and
//! belongs to it. Every byte of the input is in a piece (a byte order mark too: the
//! YAML parser skips it).
//!
//! JSON: kubectl reads an input whose first character is `{` as a stream of JSON values
//! (`{...}{...}`, as `jq` prints), and so does this.

use std::io::BufRead;

use super::node::Node;

/// A piece of the input holding one YAML document (or the comments between two).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    pub text: String,
    /// 1-based line of `text`'s first line in the input.
    pub first_line: usize,
}

/// Reading the input failed (I/O, or bytes that are not UTF-8).
#[derive(Debug, thiserror::Error)]
#[error("cannot read the manifests at line {line}: {source}")]
pub struct InputError {
    pub line: usize,
    pub source: std::io::Error,
}

pub struct YamlChunks<R> {
    reader: R,
    line_number: usize,
    line: String,
    /// A `---` line read while finishing the previous chunk: it starts the next one.
    carried: Option<(String, usize)>,
    done: bool,
}

fn is_marker(line: &str, marker: &str) -> bool {
    line.strip_prefix(marker)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

impl<R: BufRead> YamlChunks<R> {
    pub fn new(reader: R) -> YamlChunks<R> {
        YamlChunks {
            reader,
            line_number: 0,
            line: String::new(),
            carried: None,
            done: false,
        }
    }

    /// Reads the next piece into `text` (cleared first), reusing its allocation: a
    /// fresh buffer per document costs a large allocation each time. Returns the
    /// piece's first line, or `None` at the end of the input.
    pub fn read_chunk(&mut self, text: &mut String) -> Result<Option<usize>, InputError> {
        text.clear();
        if self.done {
            return Ok(None);
        }
        let mut first_line = self.line_number + 1;
        if let Some((line, number)) = self.carried.take() {
            text.push_str(&line);
            first_line = number;
        }
        let mut only_directives = false;
        loop {
            self.line.clear();
            let read = self.reader.read_line(&mut self.line).map_err(|source| InputError {
                line: self.line_number + 1,
                source,
            })?;
            if read == 0 {
                self.done = true;
                return Ok(Some(first_line));
            }
            self.line_number += 1;
            // A byte order mark stays in the text; the line is what follows it.
            let line = match self.line_number {
                1 => self.line.strip_prefix('\u{feff}').unwrap_or(&self.line),
                _ => &self.line,
            };
            if is_marker(line, "---") {
                // Directives (`%YAML 1.1`) belong to the document their `---` opens.
                if text.is_empty() || only_directives {
                    if text.is_empty() {
                        first_line = self.line_number;
                    }
                    only_directives = false;
                    text.push_str(&self.line);
                    continue;
                }
                self.carried = Some((std::mem::take(&mut self.line), self.line_number));
                return Ok(Some(first_line));
            }
            if is_marker(line, "...") {
                if text.is_empty() {
                    first_line = self.line_number;
                }
                text.push_str(&self.line);
                return Ok(Some(first_line));
            }
            if line.starts_with('%') {
                only_directives = true;
            } else if !line.trim_start().starts_with('#') && !line.trim().is_empty() {
                only_directives = false;
            }
            if text.is_empty() {
                first_line = self.line_number;
            }
            text.push_str(&self.line);
        }
    }
}

impl<R: BufRead> Iterator for YamlChunks<R> {
    type Item = Result<Chunk, InputError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut text = String::new();
        self.read_chunk(&mut text)
            .map(|first| first.map(|first_line| Chunk { text, first_line }))
            .transpose()
    }
}

/// Whether the input is a JSON stream: its first non-blank character is `{`, as
/// kubectl decides. Looks without consuming.
pub fn starts_like_json<R: BufRead>(reader: &mut R) -> Result<bool, InputError> {
    loop {
        let buffer = reader.fill_buf().map_err(|source| InputError { line: 1, source })?;
        if buffer.is_empty() {
            return Ok(false);
        }
        let skip = buffer.iter().take_while(|b| b.is_ascii_whitespace()).count();
        if skip < buffer.len() {
            let rest = &buffer[skip..];
            let rest = rest.strip_prefix("\u{feff}".as_bytes()).unwrap_or(rest);
            return Ok(rest.first() == Some(&b'{'));
        }
        let consumed = buffer.len();
        reader.consume(consumed);
    }
}

/// The values of a JSON stream, one at a time.
pub fn json_values<R: std::io::Read>(reader: R) -> impl Iterator<Item = Result<Node, serde_json::Error>> {
    serde_json::Deserializer::from_reader(reader).into_iter::<Node>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks(text: &str) -> Vec<(String, usize)> {
        YamlChunks::new(text.as_bytes())
            .map(|c| c.unwrap())
            .map(|c| (c.text, c.first_line))
            .collect()
    }

    #[test]
    fn cuts_at_markers_only_at_line_start() {
        let got = chunks("a: 1\n---\nb: |\n  ---\n  x\n--- # next\nc: '---'\n...\nd: 4\n");
        assert_eq!(
            got,
            [
                ("a: 1\n".to_string(), 1),
                ("---\nb: |\n  ---\n  x\n".to_string(), 2),
                ("--- # next\nc: '---'\n...\n".to_string(), 6),
                ("d: 4\n".to_string(), 9),
            ]
        );
    }

    #[test]
    fn crlf_bom_and_markers_with_content() {
        let got = chunks("\u{feff}a: 1\r\n---\r\n--- |\r\n  text\r\n----\r\n");
        // The mark stays in the text, for the output; the YAML parser skips it.
        assert_eq!(got[0], ("\u{feff}a: 1\r\n".to_string(), 1));
        assert_eq!(got[1], ("---\r\n".to_string(), 2));
        // `----` is content, not a marker.
        assert_eq!(got[2], ("--- |\r\n  text\r\n----\r\n".to_string(), 3));
    }

    #[test]
    fn directives_stay_with_their_document() {
        let got = chunks("a: 1\n...\n%YAML 1.1\n---\nb: 2\n");
        assert_eq!(got[0], ("a: 1\n...\n".to_string(), 1));
        assert_eq!(got[1], ("%YAML 1.1\n---\nb: 2\n".to_string(), 3));
    }

    #[test]
    fn json_is_sniffed_like_kubectl() {
        assert!(starts_like_json(&mut "  \n {\"a\": 1}".as_bytes()).unwrap());
        assert!(!starts_like_json(&mut "a: {}".as_bytes()).unwrap());
        assert!(!starts_like_json(&mut "[1]".as_bytes()).unwrap());
        let values: Vec<Node> = json_values("{\"a\": 1}\n{\"b\": 2}{\"c\": 3}".as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(values.len(), 3);
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let bytes: &[u8] = b"a: 1\nb: \xff\n";
        let err = YamlChunks::new(bytes).find_map(Result::err).unwrap();
        assert_eq!(err.line, 2);
    }
}
