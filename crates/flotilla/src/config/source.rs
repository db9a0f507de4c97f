//! Positions in the configuration text: key paths (`runners[0].autoscaler.policy[1]`) and how
//! they map to `file:line:col` through the spans the TOML parser keeps.

use super::error::Location;
use std::fmt;
use std::ops::Range;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

/// One step of a [`KeyPath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// A key in a table.
    Key(String),
    /// An element of an array (of tables).
    Index(usize),
}

/// The path from the document root to a key or value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct KeyPath(pub(crate) Vec<Segment>);

impl KeyPath {
    /// The root.
    pub(crate) fn root() -> KeyPath {
        KeyPath(Vec::new())
    }

    /// This path extended by a key.
    pub(crate) fn key(&self, key: &str) -> KeyPath {
        let mut p = self.clone();
        p.0.push(Segment::Key(key.to_string()));
        p
    }

    /// This path extended by an index.
    pub(crate) fn index(&self, index: usize) -> KeyPath {
        let mut p = self.clone();
        p.0.push(Segment::Index(index));
        p
    }

    /// The keys only, without indices: the table's name as TOML headers spell it
    /// (`runners.autoscaler.policy`).
    pub(crate) fn table_name(&self) -> String {
        self.keys().collect::<Vec<_>>().join(".")
    }

    /// The keys, without indices.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.iter().filter_map(|s| match s {
            Segment::Key(k) => Some(k.as_str()),
            Segment::Index(_) => None,
        })
    }

    /// The last key and the path of the table holding it.
    pub(crate) fn split_last_key(&self) -> Option<(KeyPath, &str)> {
        match self.0.last() {
            Some(Segment::Key(k)) => Some((KeyPath(self.0[..self.0.len() - 1].to_vec()), k)),
            _ => None,
        }
    }

    /// Converts a path reported by `serde_ignored`.
    pub(crate) fn from_ignored(path: &serde_ignored::Path<'_>) -> KeyPath {
        fn walk(path: &serde_ignored::Path<'_>, out: &mut Vec<Segment>) {
            match path {
                serde_ignored::Path::Root => {}
                serde_ignored::Path::Seq { parent, index } => {
                    walk(parent, out);
                    out.push(Segment::Index(*index));
                }
                serde_ignored::Path::Map { parent, key } => {
                    walk(parent, out);
                    out.push(Segment::Key(key.clone()));
                }
                serde_ignored::Path::Some { parent }
                | serde_ignored::Path::NewtypeStruct { parent }
                | serde_ignored::Path::NewtypeVariant { parent } => walk(parent, out),
            }
        }
        let mut out = Vec::new();
        walk(path, &mut out);
        KeyPath(out)
    }
}

impl fmt::Display for KeyPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for s in &self.0 {
            match s {
                Segment::Key(k) => {
                    if !first {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Index(i) => write!(f, "[{i}]")?,
            }
            first = false;
        }
        Ok(())
    }
}

/// Which part of a `key = value` pair a location should point at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// The key (for unknown keys).
    Key,
    /// The value (for bad values).
    Value,
}

/// The configuration text with its parsed, span-carrying tree, for turning paths and byte
/// offsets into [`Location`]s.
pub(crate) struct SourceMap<'i> {
    file: String,
    text: &'i str,
    root: Spanned<DeTable<'i>>,
}

impl<'i> SourceMap<'i> {
    /// Wraps an already parsed document.
    pub(crate) fn new(file: &str, text: &'i str, root: Spanned<DeTable<'i>>) -> SourceMap<'i> {
        SourceMap {
            file: file.to_string(),
            text,
            root,
        }
    }

    /// The location of a byte offset (clamped to the text).
    pub(crate) fn location_of_offset(&self, offset: usize) -> Location {
        location_of_offset(&self.file, self.text, offset)
    }

    /// The location of the key or value at `path`. When the path does not exist in the text
    /// (a key left out), the deepest existing ancestor is used: the enclosing table.
    pub(crate) fn locate(&self, path: &KeyPath, target: Target) -> Location {
        self.location_of_offset(self.span(path, target).start)
    }

    fn span(&self, path: &KeyPath, target: Target) -> Range<usize> {
        // A document's root span starts at its first byte: line 1, column 1.
        let mut best: Range<usize> = 0..0;
        let mut current: &DeValue<'i> = &DeValue::Table(DeTable::new());
        let mut in_root = true;
        let last = path.0.len().saturating_sub(1);
        for (i, seg) in path.0.iter().enumerate() {
            let found = match seg {
                Segment::Key(k) => {
                    let table = if in_root {
                        Some(self.root.get_ref())
                    } else {
                        current.as_table()
                    };
                    table.and_then(|t| {
                        t.iter()
                            .find(|(key, _)| key.get_ref().as_ref() == k.as_str())
                            .map(|(key, value)| (key.span(), value))
                    })
                }
                Segment::Index(idx) => {
                    if in_root {
                        None
                    } else {
                        current
                            .as_array()
                            .and_then(|a| a.get(*idx))
                            .map(|v| (v.span(), v))
                    }
                }
            };
            let Some((key_span, value)) = found else {
                break;
            };
            best = if i == last && target == Target::Key {
                key_span
            } else {
                let vs = value.span();
                // Tables opened by a header have an empty span; point at their key instead.
                if vs.is_empty() { key_span } else { vs }
            };
            current = value.get_ref();
            in_root = false;
        }
        best
    }
}

/// The 1-based line and column (in characters) of a byte offset in `text`.
pub(crate) fn location_of_offset(file: &str, text: &str, offset: usize) -> Location {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |p| p + 1);
    let column = before[line_start..].chars().count() + 1;
    Location {
        file: file.to_string(),
        line,
        column,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "concurrent = 2\n\
                       [[runners]]\n\
                       \x20 name = \"a\"\n\
                       [[runners]]\n\
                       \x20 name = \"b\"\n\
                       \x20 [runners.autoscaler]\n\
                       \x20   max_instances = 4\n\
                       \x20   [[runners.autoscaler.policy]]\n\
                       \x20     periods = [\"* * * * *\", \"bad\"]\n";

    fn map() -> SourceMap<'static> {
        SourceMap::new("c.toml", DOC, DeTable::parse(DOC).unwrap())
    }

    fn at(path: KeyPath, target: Target) -> (usize, usize) {
        let l = map().locate(&path, target);
        (l.line, l.column)
    }

    #[test]
    fn locates_keys_values_and_array_elements() {
        let root = KeyPath::root();
        assert_eq!(at(root.key("concurrent"), Target::Key), (1, 1));
        assert_eq!(at(root.key("concurrent"), Target::Value), (1, 14));
        let r1 = root.key("runners").index(1);
        assert_eq!(at(r1.key("name"), Target::Value), (5, 10));
        let a = r1.key("autoscaler");
        assert_eq!(at(a.key("max_instances"), Target::Key), (7, 5));
        let p = a.key("policy").index(0).key("periods").index(1);
        assert_eq!(at(p, Target::Value), (9, 31));
    }

    #[test]
    fn missing_keys_fall_back_to_the_nearest_ancestor() {
        let root = KeyPath::root();
        // The autoscaler table exists; the key does not: point at the table's key.
        let l = at(
            root.key("runners").index(1).key("autoscaler").key("plugin"),
            Target::Value,
        );
        assert_eq!(l.0, 6, "{l:?}");
        assert_eq!(at(root.key("nothing"), Target::Key), (1, 1));
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let text = "a = \"é\" x";
        let l = location_of_offset("f", text, text.find('x').unwrap());
        assert_eq!((l.line, l.column), (1, 9));
    }

    #[test]
    fn paths_display_and_split() {
        let p = KeyPath::root()
            .key("runners")
            .index(2)
            .key("autoscaler")
            .key("max_instances");
        assert_eq!(p.to_string(), "runners[2].autoscaler.max_instances");
        let (parent, last) = p.split_last_key().unwrap();
        assert_eq!(last, "max_instances");
        assert_eq!(parent.table_name(), "runners.autoscaler");
    }
}
