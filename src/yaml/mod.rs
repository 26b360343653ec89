//! YAML read and written the way kubectl reads it, with the input's text kept: what the
//! `inject` command needs of YAML, and nothing of what it injects.
//!
//! Reading: the input is cut into documents as it is read (`split`), each parsed into a
//! `node` tree (`read`) with YAML 1.1 plain scalars resolved as go-yaml v2 resolves them
//! (`yaml11`), parsed ahead on a thread per core (`ahead`). Where the caller will edit,
//! the reader records where each collection is in the text (`layout`); which collections
//! those are the caller says (`layout::Paths`). The items of a large root `items` list (a
//! Kubernetes `List`) wait `packed` as bytes.
//!
//! Writing: trees as YAML or JSON (`write`), and, where the output is the input's text,
//! JSON Patch `add`s and `remove`s turned into edits of that text in the style of what
//! they join (`splice`). `prune` copies to JSON only the parts of a tree a reader asks for.
//!
//! This module knows YAML, JSON Patch and the `List` convention of a root `items`; it
//! imports nothing else of the crate (a test below holds it to that).

pub mod ahead;
pub mod layout;
pub mod node;
pub mod packed;
pub mod prune;
pub mod read;
pub mod splice;
pub mod split;
pub mod write;
pub mod yaml11;

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Every `crate::` path in the files of this module stays inside it, and none of them
    /// climbs out of it with `super::`: the YAML layer knows nothing of Pods or templates.
    #[test]
    fn the_yaml_layer_imports_nothing_else_of_the_crate() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/yaml");
        let mut files = vec![root.clone()];
        let mut read = 0;
        while let Some(path) = files.pop() {
            if path.is_dir() {
                files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            // How many modules the file's is below `yaml`: `super::` that many times at
            // most (`mod.rs` is its directory's module).
            let relative = path.strip_prefix(&root).unwrap();
            let depth = relative.components().count() - usize::from(relative.ends_with("mod.rs"));
            // Spelt in two, so that this test does not find itself.
            let (in_crate, up) = (concat!("crate", "::"), concat!("super", "::"));
            let code = text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim_start().starts_with("//"));
            for (n, line) in code {
                let at = format!("src/yaml/{}:{}", relative.display(), n + 1);
                for (i, _) in line.match_indices(in_crate) {
                    let within = line[i + in_crate.len()..].starts_with("yaml::");
                    assert!(within, "{at}: `{}` leaves the YAML layer", line.trim());
                }
                let climbs = line.contains(&up.repeat(depth + 1));
                assert!(!climbs, "{at}: `{}` climbs out of the YAML layer", line.trim());
            }
            read += 1;
        }
        assert!(read >= 10, "only {read} files read");
    }
}
