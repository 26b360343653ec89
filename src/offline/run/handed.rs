//! A large `List` written as its text, its items injected while the rest of it is read.
//!
//! Whether a document is a `List` whose items can be written one by one (`kind` ends in
//! `List`, one `items`, no alias from one item into another) is known only at its end:
//! `kind` may come after `items` (as `kubectl get -o yaml` writes it) or come twice, and
//! the text may turn out not to be YAML at all. So each item the reader hands over
//! (`ahead::Handing`) is injected at once, as if it were, and what it makes is held: its
//! edits (the additions' text shared between items: a run adds the same sidecar to one
//! Pod after another) and its messages, named without the document. At the end, if the
//! document is that `List`, the held edits are written and the messages told; if it is
//! anything else, the held work is dropped and the text is read again and written the
//! usual way, so that the output is the same either way. Held work is bounded: past a
//! budget, items wait packed, as they would have without this, and are injected at the
//! end.

use std::rc::Rc;
use std::sync::Arc;

use super::text::{Failed, removal, write_pieces};
use super::{Message, Stream, StreamError, is_list};
use crate::offline::paths::PodPaths;
use crate::yaml::ahead::{Handed, Handing, InOrder};
use crate::yaml::layout::Entry;
use crate::yaml::node::{Node, Value};
use crate::yaml::packed::Packed;
use crate::yaml::read::{Aliased, Document, HandedItem, ListPlace, read_documents_with_layouts};
use crate::yaml::splice::{self, Edit, ItemText};

/// What was done of a `List`'s items as they were read.
#[derive(Default)]
pub(super) struct Speculation {
    /// One per item handed over, in order.
    items: Vec<Taken>,
    /// The held edits of every item, one after another: `(from, to, with)`.
    edits: Vec<(usize, usize, Rc<str>)>,
    /// Held messages, each with its item's index.
    messages: Vec<(usize, Message)>,
    /// The entries the items were handed with, and the list's place.
    entries: Vec<Entry>,
    list: Option<ListPlace>,
    /// Whether every item came with the same place of its list.
    same_list: bool,
    /// The aliases read so far.
    aliased: Vec<Aliased>,
    /// Texts of edits held, the latest first found again.
    shared: Vec<Rc<str>>,
    /// Bytes held so far, and how many may be.
    held: usize,
    budget: usize,
}

enum Taken {
    /// Injected: its edits end at `edits_end` in `Speculation::edits` (`None`: it
    /// failed, and is left out), made knowing the first `aliases_known` aliases.
    Done {
        edits_end: Option<usize>,
        aliases_known: usize,
    },
    /// Past the budget: injected when the `List` is known.
    Waiting(Packed),
}

/// Texts of edits kept to be found again: the few additions of a template.
const SHARED: usize = 32;

impl Speculation {
    fn new(text: &str, budget: Option<usize>) -> Speculation {
        Speculation {
            same_list: true,
            // Half the text: with the text itself, less than the packed items held
            // without this.
            budget: budget.unwrap_or(text.len() / 2),
            ..Speculation::default()
        }
    }

    /// `with` as a shared text: one held already if it is the same.
    fn share(&mut self, with: String) -> Rc<str> {
        if let Some(found) = self.shared.iter().find(|s| s.len() == with.len() && ***s == *with) {
            return Rc::clone(found);
        }
        self.held += with.len();
        let shared: Rc<str> = Rc::from(with);
        if self.shared.len() == SHARED {
            self.shared.pop();
        }
        self.shared.insert(0, Rc::clone(&shared));
        shared
    }

    /// Whether what was done holds for `list` (the document's `items`, in the document's
    /// `aliased`): the items handed are all of its items, placed as it is, and no alias
    /// read after an item was done could have changed what it made (see
    /// `splice::touches`: an alias read later is of a later item, if `list` is to be
    /// written item by item, and an edit that ends before its anchored node's line
    /// cannot touch it).
    fn holds_for(&self, text: &str, list: &Node, aliased: &[Aliased]) -> bool {
        let Some(layout) = list.layout() else {
            return false;
        };
        let placed = self.same_list
            && self.list == Some(ListPlace::of(layout))
            && layout.entries.len() == self.entries.len()
            && layout.entries.iter().zip(&self.entries).all(|(a, b)| *a == Some(*b));
        if !placed
            || !aliased.starts_with(&self.aliased)
            || !matches!(list.value, Value::Seq(ref items) if items.is_empty())
        {
            return false;
        }
        let untouched = splice::untouched_below(text, aliased);
        let mut start = 0;
        self.items.iter().all(|taken| match taken {
            Taken::Done {
                edits_end: Some(end),
                aliases_known,
            } => {
                let edits = &self.edits[start..*end];
                start = *end;
                edits.iter().all(|(_, to, _)| *to <= untouched[*aliases_known])
            }
            _ => true,
        })
    }
}

impl<W: std::io::Write> Stream<'_, W> {
    /// A piece handed over before it is parsed: its items injected as they come, then its
    /// documents written (see the module's comment).
    pub(super) fn handing(
        &mut self,
        index: &mut usize,
        first_line: usize,
        handing: Handing,
        parsed: &mut InOrder,
    ) -> Result<(), StreamError> {
        let Handing { text, items } = handing;
        let mut speculation = Speculation::new(&text, self.settings.hold_at_most);
        let documents = loop {
            match items.recv() {
                Ok(Handed::Items(items)) => {
                    for item in items {
                        self.speculate(&mut speculation, &text, item);
                    }
                }
                Ok(Handed::End(documents)) => break Some(documents),
                // The parsing thread is gone without an end (it panicked): read here.
                Err(_) => break None,
            }
        };
        drop(items);
        let documents = documents.unwrap_or_else(|| read_documents_with_layouts(&text, first_line, &PodPaths));
        let handed = (!speculation.items.is_empty()).then_some(speculation);
        let written = match (handed, documents) {
            (Some(handed), Ok(documents)) => {
                if self.handed_holds(&text, &handed, &documents) {
                    self.handed_lists += 1;
                    self.piece(index, first_line, &text, Ok(documents), parsed, Some(handed))
                } else {
                    // Not the List it was taken for: its items are gone, read it again.
                    drop(documents);
                    drop(handed);
                    let documents = read_documents_with_layouts(&text, first_line, &PodPaths);
                    self.piece(index, first_line, &text, documents, parsed, None)
                }
            }
            // No item handed over, or not YAML (then nothing of it is written either way).
            (_, documents) => self.piece(index, first_line, &text, documents, parsed, None),
        };
        if let Ok(text) = Arc::try_unwrap(text) {
            parsed.free_text(text);
        }
        written
    }

    /// Whether `documents` are one `List` written as its text whose items are the
    /// ones `handed` was made of (the conditions of `document` for `commit_list_text`).
    fn handed_holds(&self, text: &str, handed: &Speculation, documents: &[Document]) -> bool {
        let mut roots = documents.iter().filter(|d| d.root.is_some());
        let (Some(document), None) = (roots.next(), roots.next()) else {
            return false;
        };
        let Some(root) = document.root.as_ref() else {
            return false;
        };
        let Some(list) = root.get("items") else {
            return false;
        };
        self.splicing
            && std::ptr::eq(document, &documents[0])
            && document.packed_items.is_empty()
            && is_list(root)
            && !splice::aliases_cross_items(list, &document.aliased)
            && handed.holds_for(text, list, &document.aliased)
    }

    /// One item handed over: injected now, its edits and messages held, unless the
    /// budget is spent.
    fn speculate(&mut self, speculation: &mut Speculation, text: &str, handed: HandedItem) {
        let HandedItem {
            mut item,
            entry,
            list,
            aliased,
        } = handed;
        let i = speculation.items.len();
        speculation.aliased.extend(aliased);
        speculation.entries.push(entry);
        match speculation.list {
            None => speculation.list = Some(list),
            Some(first) => speculation.same_list &= first == list,
        }
        if speculation.held > speculation.budget {
            speculation
                .items
                .push(Taken::Waiting(Packed::new(&item, &mut Vec::new())));
            return;
        }
        // Named without the document, which may not be known yet: `commit_list_text`
        // puts its name in front.
        self.held = Some(Vec::new());
        let place_of = ItemText::of(text, list, entry);
        let edits = self.list_item("", text, i, &mut item, Some(place_of), list.json, &speculation.aliased);
        let messages = self.held.take().unwrap_or_default();
        drop(item);
        for message in messages {
            speculation.held += message_text(&message).len();
            speculation.messages.push((i, message));
        }
        let edits_end = match edits {
            Ok(edits) => {
                for Edit { from, to, with } in edits {
                    let with = speculation.share(with);
                    speculation.edits.push((from, to, with));
                }
                Some(speculation.edits.len())
            }
            Err(Failed) => None,
        };
        speculation.held += std::mem::size_of::<Taken>();
        speculation.items.push(Taken::Done {
            edits_end,
            aliases_known: speculation.aliased.len(),
        });
    }

    /// A `List` as its text, from what was done of its items as they were read: the
    /// held edits written, the held messages told, named `at`.
    pub(super) fn commit_list_text(
        &mut self,
        at: &str,
        root: Node,
        handed: Speculation,
        text: &str,
        aliased: &[Aliased],
    ) -> Result<(), StreamError> {
        let Some(list) = root.get("items") else {
            return Ok(());
        };
        let json = list.layout().is_some_and(|l| l.json);
        let Speculation {
            items, edits, messages, ..
        } = handed;
        self.written += 1;
        let mut written_to = 0;
        let mut start = 0;
        let mut messages = messages.into_iter().peekable();
        for (i, taken) in items.into_iter().enumerate() {
            while let Some((_, message)) = messages.next_if(|(of, _)| *of == i) {
                self.say(named(at, message));
            }
            let done = match taken {
                Taken::Done { edits_end, .. } => edits_end.ok_or(Failed).map(|end| {
                    let range = start..end;
                    start = end;
                    range
                }),
                Taken::Waiting(packed) => {
                    let mut item = packed.unpack();
                    let place_of = splice::item_text(text, list, i);
                    let made = self.list_item(at, text, i, &mut item, place_of, json, aliased);
                    drop(item);
                    let made = made.unwrap_or_else(|Failed| removal(text, list, i));
                    written_to = super::text::write_edited(&mut self.output, text, &made, written_to)?;
                    continue;
                }
            };
            written_to = match done {
                Ok(range) => write_pieces(
                    &mut self.output,
                    text,
                    edits[range].iter().map(|(from, to, with)| (*from, *to, &**with)),
                    written_to,
                )?,
                Err(Failed) => super::text::write_edited(&mut self.output, text, &removal(text, list, i), written_to)?,
            };
        }
        self.output.write_all(&text.as_bytes()[written_to..])?;
        self.discard(root);
        Ok(())
    }
}

fn message_text(message: &Message) -> &str {
    match message {
        Message::Note(m) | Message::Warning(m) | Message::Error(m) => m,
    }
}

/// A held message, named without its document, with `at` (the document) in front.
fn named(at: &str, message: Message) -> Message {
    match message {
        Message::Note(m) => Message::Note(format!("{at}{m}")),
        Message::Warning(m) => Message::Warning(format!("{at}{m}")),
        Message::Error(m) => Message::Error(format!("{at}{m}")),
    }
}
