//! YAML read and written the way kubectl reads it, with the input's text kept: what the
//! `inject` command needs of YAML, and nothing of what it injects.
//!
//! Reading: the input is cut into documents as it is read (`split`), each parsed into a
//! `node` tree (`read`) with YAML 1.1 plain scalars resolved as go-yaml v2 resolves them
//! (`yaml11`), parsed ahead on a thread per core (`ahead`). Where the caller will edit,
//! the reader records where each collection is in the text (`layout`); which collections
//! those are the caller says (`paths::Paths`). The items of a large root `items` list (a
//! Kubernetes `List`) wait `packed` as bytes.
//!
//! Writing: trees as YAML or JSON (`write`), and, where the output is the input's text,
//! JSON Patch `add`s and `remove`s turned into edits of that text in the style of what
//! they join (`splice`). `prune` copies to JSON only the parts of a tree a reader asks for.
//!
//! This module knows YAML, JSON Patch and the `List` convention of a root `items`; it
//! imports nothing else of the crate (`tests/architecture.rs` holds it to that).

pub mod ahead;
pub mod layout;
pub mod node;
pub mod packed;
pub mod paths;
pub mod prune;
pub mod read;
pub mod splice;
pub mod split;
pub mod write;
pub mod yaml11;
