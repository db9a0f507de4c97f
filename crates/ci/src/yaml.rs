//! YAML into a tree of nodes that remember where they came from.
//!
//! GitLab reads `.gitlab-ci.yml` with Ruby's Psych: libyaml's parser ([`crate::libyaml`]), then
//! Psych's tree building, which this file follows (ruby/psych `lib/psych/visitors/to_ruby.rb`):
//! - plain scalars resolve as `Psych::ScalarScanner` resolves them ([`crate::scalar`]);
//!   quoted and block scalars are strings; a tagged scalar is deserialized by its tag;
//! - merge keys are applied where `<<` appears (`revive_hash`): a hash (or an alias of one) is
//!   merged over what is there, later keys override it; a literal list of hashes is merged
//!   with its earlier hashes winning; anything else (a scalar, an alias of a list, a list
//!   holding a non-hash) is kept as an ordinary `<<` key, as Psych keeps it. A `<<` key in any
//!   style merges, unless tagged `!!str`;
//! - a repeated key keeps its first place and its last value, as in a Ruby hash.
//!
//! `!reference [a, b]` becomes [`Value::Reference`]; other tags on collections are ignored
//! with a warning, as Psych ignores the ones it does not know.

use std::collections::HashMap;
use std::sync::Arc;

use super::error::{CiError, Location, Warning};
use super::libyaml::{Event, Mark, Parser, Style};
use super::scalar::{Refused, resolve_plain, resolve_tagged};

use super::budget::{MAX_FILE_BYTES, NODE_COST};

/// GitLab's limit on nesting (`MAX_YAML_DEPTH` in gitlabhq/gitlabhq
/// lib/gitlab/config/loader/yaml.rb).
const MAX_DEPTH: usize = 100;

/// A mapping with this many keys or more keeps an index of them: looking a key up in the
/// list made a 100,000-key mapping take 49 s to load.
const INDEXED_FROM: usize = 16;

/// A YAML value.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    /// `null`, `~` or nothing.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Str(String),
    /// A Ruby symbol (`:name` unquoted): GitLab's loader permits them, and its validators
    /// refuse them where a string is expected.
    Symbol(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in file order.
    Map(Mapping),
    /// A `!reference [path...]` tag, resolved later.
    Reference(Vec<Node>),
}

/// A value and where it starts.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Node {
    /// The value.
    pub value: Value,
    /// Where it starts.
    pub at: Location,
}

/// A mapping key and where it is.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Key {
    /// The key as text.
    pub name: String,
    /// Where it is.
    pub at: Location,
}

/// An ordered mapping; a key appears once (a repeated key keeps its first place and its last
/// value, as in a Ruby hash).
#[derive(Clone, Debug, Default)]
pub(crate) struct Mapping {
    entries: Vec<(Key, Node)>,
    /// Each key's place in `entries`, kept from [`INDEXED_FROM`] entries on.
    index: Option<HashMap<String, usize>>,
}

impl PartialEq for Mapping {
    fn eq(&self, other: &Mapping) -> bool {
        self.entries == other.entries
    }
}

impl Mapping {
    /// The place of `key` in the entries.
    fn position(&self, key: &str) -> Option<usize> {
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| k.name == key),
        }
    }

    /// Adds an entry for a key that is not there yet.
    fn push(&mut self, key: Key, value: Node) {
        if let Some(index) = &mut self.index {
            index.insert(key.name.clone(), self.entries.len());
        }
        self.entries.push((key, value));
        if self.index.is_none() && self.entries.len() >= INDEXED_FROM {
            self.reindex();
        }
    }

    fn reindex(&mut self) {
        self.index = (self.entries.len() >= INDEXED_FROM).then(|| {
            self.entries
                .iter()
                .enumerate()
                .map(|(i, (k, _))| (k.name.clone(), i))
                .collect()
        });
    }

    /// The value under `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&Node> {
        self.position(key).map(|i| &self.entries[i].1)
    }

    /// The key and value under `key`.
    pub(crate) fn entry(&self, key: &str) -> Option<(&Key, &Node)> {
        self.position(key).map(|i| {
            let (k, v) = &self.entries[i];
            (k, v)
        })
    }

    /// Set `key` to `value`, keeping the key's place if it is already there.
    pub(crate) fn insert(&mut self, key: Key, value: Node) {
        match self.position(&key.name) {
            Some(i) => self.entries[i].1 = value,
            None => self.push(key, value),
        }
    }

    /// Set `key` to `value` in the key's place if it is there (the key's position becomes
    /// `key`'s), at the end otherwise.
    pub(crate) fn replace(&mut self, key: Key, value: Node) {
        match self.position(&key.name) {
            Some(i) => self.entries[i] = (key, value),
            None => self.push(key, value),
        }
    }

    /// Take the value under `key` out, leaving null in its place (so that a following
    /// [`Mapping::insert`] keeps the key's position).
    pub(crate) fn take(&mut self, key: &str) -> Option<Node> {
        let i = self.position(key)?;
        let slot = &mut self.entries[i];
        let at = slot.1.at.clone();
        Some(std::mem::replace(&mut slot.1, Node::new(Value::Null, at)))
    }

    /// Remove `key`, returning what it held.
    pub(crate) fn remove(&mut self, key: &str) -> Option<(Key, Node)> {
        let index = self.position(key)?;
        let removed = self.entries.remove(index);
        if self.index.is_some() {
            self.reindex();
        }
        Some(removed)
    }

    /// The entries in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Key, &Node)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// The entries in order, values mutable.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut Node)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }

    /// The entries whose values are not null: GitLab's entry factory treats a null value as
    /// an unspecified keyword (`Gitlab::Config::Entry::Factory#create!`), and attributes are
    /// validated with `allow_nil`.
    pub(crate) fn without_nulls(&self) -> Mapping {
        let mut m = Mapping {
            entries: self
                .entries
                .iter()
                .filter(|(_, v)| !v.is_null())
                .cloned()
                .collect(),
            index: None,
        };
        m.reindex();
        m
    }

    /// Whether there are no entries.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Take the entries out.
    pub(crate) fn into_entries(self) -> Vec<(Key, Node)> {
        self.entries
    }
}

impl Node {
    /// A node holding `value` at `at`.
    pub(crate) fn new(value: Value, at: Location) -> Self {
        Self { value, at }
    }

    /// What kind of value this is, for messages ("a hash", "an integer").
    pub(crate) fn kind(&self) -> &'static str {
        match self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a float",
            Value::Str(_) => "a string",
            Value::Symbol(_) => "a symbol",
            Value::Seq(_) => "an array",
            Value::Map(_) => "a hash",
            Value::Reference(_) => "an unresolved !reference",
        }
    }

    /// The string, if this is a string.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// The mapping, if this is one.
    pub(crate) fn as_map(&self) -> Option<&Mapping> {
        match &self.value {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The sequence, if this is one.
    pub(crate) fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(s) => Some(s),
            _ => None,
        }
    }

    /// The boolean, if this is one.
    pub(crate) fn as_bool(&self) -> Option<bool> {
        match self.value {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// The integer, if this is one.
    pub(crate) fn as_int(&self) -> Option<i64> {
        match self.value {
            Value::Int(i) => Some(i),
            _ => None,
        }
    }

    /// Whether this is null.
    pub(crate) fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }

    /// The value as JSON, positions dropped (for values flotilla keeps but does not interpret).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.value {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Str(s) => J::String(s.clone()),
            Value::Symbol(s) => J::String(format!(":{s}")),
            Value::Seq(items) | Value::Reference(items) => {
                J::Array(items.iter().map(Node::to_json).collect())
            }
            Value::Map(m) => J::Object(
                m.iter()
                    .map(|(k, v)| (k.name.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// Strings and numbers as the text GitLab would use (numbers as Ruby prints them).
    pub(crate) fn scalar_text(&self) -> Option<String> {
        match &self.value {
            Value::Str(s) => Some(s.clone()),
            Value::Int(i) => Some(i.to_string()),
            Value::Float(f) => Some(ruby_float(*f)),
            _ => None,
        }
    }
}

/// A float as Ruby's `Float#to_s` prints the usual cases (`1.0`, `1.5`, `Infinity`).
fn ruby_float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let text = format!("{value}");
    if text.contains('.') || text.contains('e') {
        text
    } else {
        format!("{text}.0")
    }
}

/// The documents of one YAML file, with the warnings loading produced.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// The documents, in order.
    pub documents: Vec<Node>,
    /// Tags that were dropped and similar.
    pub warnings: Vec<Warning>,
    /// What the documents take in the budget's bytes ([`crate::budget`]), aliases at their
    /// expanded size.
    pub size: usize,
}

/// Parse `text` (the contents of `file`) into documents.
pub(crate) fn load(text: &str, file: &Arc<str>) -> Result<Loaded, CiError> {
    let mut builder = Builder {
        file: file.clone(),
        stack: Vec::new(),
        anchors: HashMap::new(),
        bytes: 0,
        too_big: false,
        documents: Vec::new(),
        errors: Vec::new(),
        warnings: Vec::new(),
    };
    // One event at a time, stopping at the first limit passed: the parser's own `load`
    // recurses once per nesting level, and 10,000 levels overflowed the stack before any
    // limit could be looked at.
    let mut parser = Parser::new(text);
    loop {
        match parser.next_event() {
            Ok((Event::StreamEnd, _)) => break,
            Ok((event, mark)) => {
                builder.on_event(event, mark);
                if builder.too_big {
                    break;
                }
            }
            Err(error) => {
                return Err(CiError::Syntax {
                    location: builder.location(error.mark),
                    message: error.message,
                });
            }
        }
    }
    // Psych stops at the first problem in the order it builds the tree (an alias inside a
    // key before the key itself), and so does GitLab's message: the first is reported.
    if let Some(error) = builder.errors.into_iter().next() {
        return Err(error);
    }
    Ok(Loaded {
        documents: builder.documents,
        warnings: builder.warnings,
        size: builder.bytes,
    })
}

/// flotilla's reading of `text` in the form `scripts/yaml-psych-tree.py` prints, so that
/// `tests/ci_yaml_differential.rs` can hold it against libyaml in C and Psych's rules.
#[doc(hidden)]
pub fn differential_tree(text: &str) -> serde_json::Value {
    use serde_json::json;
    let file: Arc<str> = Arc::from("t.yml");
    let error = match load(text, &file) {
        Ok(loaded) => {
            return json!({
                "documents": loaded.documents.iter().map(differential_node).collect::<Vec<_>>()
            });
        }
        Err(error) => error,
    };
    let first = error.errors()[0];
    let text = first.to_string();
    match first {
        CiError::Syntax { message, .. } if message.starts_with("an alias") => {
            json!({"error": "alias"})
        }
        CiError::Syntax { message, .. } if message.contains(REFUSED_HINT) => {
            json!({"error": "refused", "message": message.replace(REFUSED_HINT, "")})
        }
        CiError::Syntax { message, .. } if message.starts_with("the YAML nests") => {
            json!({"error": "limit"})
        }
        CiError::Syntax { location, message } => json!({
            "error": "syntax", "message": message, "line": location.line, "column": location.column
        }),
        _ if text.contains("a mapping key must be a scalar") => json!({"error": "key"}),
        _ if text.contains("!reference expects a list") => json!({"error": "reference"}),
        _ => json!({"error": "other", "message": text}),
    }
}

fn differential_node(node: &Node) -> serde_json::Value {
    use serde_json::json;
    match &node.value {
        Value::Null => json!(null),
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!({"int": i.to_string()}),
        Value::Float(f) => {
            let bits = if f.is_nan() {
                0x7ff8_0000_0000_0000
            } else {
                f.to_bits()
            };
            json!({"float": format!("{bits:016x}")})
        }
        Value::Str(s) => json!(s),
        Value::Symbol(s) => json!({"sym": s}),
        Value::Seq(items) => json!(items.iter().map(differential_node).collect::<Vec<_>>()),
        Value::Reference(items) => {
            json!({"ref": items.iter().map(differential_node).collect::<Vec<_>>()})
        }
        Value::Map(m) => json!({
            "map": m.iter().map(|(k, v)| json!([k.name, differential_node(v)])).collect::<Vec<_>>()
        }),
    }
}

/// Said after a refused scalar's message.
const REFUSED_HINT: &str = " (quote the value to keep it a string)";

/// A collection being built.
enum Frame {
    Seq {
        items: Vec<Node>,
        at: Location,
        anchor: Option<String>,
        reference: bool,
        /// [`Builder::bytes`] when it started.
        first: usize,
    },
    Map {
        mapping: Mapping,
        at: Option<Location>,
        start: Location,
        anchor: Option<String>,
        key: Option<PendingKey>,
        /// [`Builder::bytes`] when it started.
        first: usize,
    },
}

/// A mapping key waiting for its value.
struct PendingKey {
    node: Node,
    merge: bool,
}

/// Where a node handed to [`Builder::push`] came from: Psych merges a literal list of hashes
/// but not an alias of one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Written here.
    Literal,
    /// `*name`.
    Alias,
    /// A `<<` key.
    MergeKey,
}

struct Builder {
    file: Arc<str>,
    stack: Vec<Frame>,
    /// The current document's anchored nodes and the bytes each takes.
    anchors: HashMap<String, (Node, usize, usize)>,
    /// Bytes built so far ([`crate::budget`]), aliases counted at their expanded size.
    bytes: usize,
    /// Whether the file went past [`MAX_FILE_BYTES`] or [`MAX_DEPTH`] (reported once).
    too_big: bool,
    documents: Vec<Node>,
    errors: Vec<CiError>,
    warnings: Vec<Warning>,
}

impl Builder {
    fn location(&self, mark: Mark) -> Location {
        Location::new(self.file.clone(), mark.line, mark.column)
    }

    /// `size`: the bytes the node takes (itself included).
    fn finish(&mut self, node: Node, anchor: Option<String>, size: usize) {
        if let Some(anchor) = anchor {
            let depth = tree_depth(&node);
            self.anchors.insert(anchor, (node.clone(), size, depth));
        }
        self.push(node, Origin::Literal);
    }

    /// Count `size` more bytes; past the limits, record the error once and tell the caller to
    /// stop building.
    fn grow(&mut self, size: usize, at: &Location) -> bool {
        self.bytes = self.bytes.saturating_add(size);
        if self.too_big {
            return false;
        }
        if self.bytes > MAX_FILE_BYTES || self.stack.len() > MAX_DEPTH {
            self.too_big = true;
            let error = if self.stack.len() > MAX_DEPTH {
                CiError::Syntax {
                    location: at.clone(),
                    message: format!(
                        "the YAML nests too deep: more than {MAX_DEPTH} levels (GitLab's limit)"
                    ),
                }
            } else {
                CiError::TooBig {
                    location: at.clone(),
                    message: format!(
                        "the parsed YAML is too big: the file expands, aliases included, to more \
                         than {} MiB (GitLab refuses files over 1 MB)",
                        MAX_FILE_BYTES >> 20
                    ),
                }
            };
            self.errors.push(error);
            return false;
        }
        true
    }

    fn push(&mut self, node: Node, origin: Origin) {
        match self.stack.last_mut() {
            None => self.documents.push(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map {
                mapping, key, at, ..
            }) => match key.take() {
                None => {
                    if at.is_none() {
                        *at = Some(node.at.clone());
                    }
                    *key = Some(PendingKey {
                        node,
                        merge: origin == Origin::MergeKey,
                    });
                }
                Some(pending) => {
                    let node = if pending.merge {
                        merge_into(mapping, node, origin)
                    } else {
                        Some(node)
                    };
                    if let Some(node) = node {
                        match key_text(&pending.node) {
                            Some(name) => mapping.insert(
                                Key {
                                    name,
                                    at: pending.node.at,
                                },
                                node,
                            ),
                            None => self.errors.push(CiError::invalid(
                                &pending.node.at,
                                format!(
                                    "a mapping key must be a scalar, found {}",
                                    pending.node.kind()
                                ),
                            )),
                        }
                    }
                }
            },
        }
    }

    fn scalar(&mut self, text: String, style: Style, tag: Option<String>, at: &Location) -> Value {
        let resolved = match (tag.as_deref(), style) {
            (None, Style::Plain) => resolve_plain(&text),
            (None, Style::Other) => Ok(Value::Str(text)),
            (Some("!reference"), _) => {
                self.errors.push(CiError::invalid(
                    at,
                    "!reference expects a list: !reference [job, key]",
                ));
                return Value::Null;
            }
            (Some(tag), _) => {
                if !KNOWN_SCALAR_TAGS.contains(&tag) {
                    self.warnings.push(Warning::at(
                        at,
                        format!(
                            "YAML tag {} is not supported; the value is read as if untagged",
                            shown_tag(tag)
                        ),
                    ));
                }
                resolve_tagged(tag, &text)
            }
        };
        resolved.unwrap_or_else(|Refused(message)| {
            self.errors.push(CiError::Syntax {
                location: at.clone(),
                message: format!("{message}{REFUSED_HINT}"),
            });
            Value::Null
        })
    }

    /// Warn about a collection's tag (only `!reference` on a sequence means something;
    /// `!!seq` and `!!map` say what it is anyway).
    fn collection_tag(&mut self, tag: Option<&str>, at: &Location) {
        if let Some(tag) =
            tag.filter(|t| !matches!(*t, "tag:yaml.org,2002:seq" | "tag:yaml.org,2002:map"))
        {
            self.warnings.push(Warning::at(
                at,
                format!(
                    "YAML tag {} is not supported and was ignored",
                    shown_tag(tag)
                ),
            ));
        }
    }

    fn on_event(&mut self, event: Event, mark: Mark) {
        let at = self.location(mark);
        match event {
            Event::Scalar {
                value: text,
                style,
                anchor,
                tag,
            } => {
                // Psych merges on a key that loads as the string `<<`, unless tagged `!!str`.
                let merge = text == "<<" && tag.as_deref() != Some("tag:yaml.org,2002:str");
                let is_key = matches!(self.stack.last(), Some(Frame::Map { key: None, .. }));
                if merge && is_key {
                    self.push(Node::new(Value::Str(text), at), Origin::MergeKey);
                    return;
                }
                let size = NODE_COST + text.len();
                if !self.grow(size, &at) {
                    return;
                }
                let value = self.scalar(text, style, tag, &at);
                self.finish(Node::new(value, at), anchor, size);
            }
            Event::Alias(name) => match self.anchors.get(&name) {
                Some((node, size, depth)) => {
                    let (node, size, depth) = (node.clone(), *size, *depth);
                    // GitLab measures the depth of what the aliases build, not of the text
                    // (`Gitlab::Utils::DeepSize`, max_depth 100): aliases of aliases nest.
                    if self.stack.len() + depth > MAX_DEPTH && !self.too_big {
                        self.too_big = true;
                        self.errors.push(CiError::Syntax {
                            location: at.clone(),
                            message: format!(
                                "the YAML nests too deep: more than {MAX_DEPTH} levels (GitLab's \
                                 limit), aliases included"
                            ),
                        });
                    }
                    // Past the limit, the alias stands for nothing: the file is refused anyway.
                    let node = if !self.too_big && self.grow(size, &at) {
                        node
                    } else {
                        Node::new(Value::Null, at)
                    };
                    self.push(node, Origin::Alias);
                }
                None => self.errors.push(CiError::Syntax {
                    location: at,
                    message: format!(
                        "an alias (*{name}) refers to no anchor before it in this document (or to \
                         the node that contains it)"
                    ),
                }),
            },
            Event::SequenceStart { anchor, tag } => {
                let reference = tag.as_deref() == Some("!reference");
                if !reference {
                    self.collection_tag(tag.as_deref(), &at);
                }
                let first = self.bytes;
                self.stack.push(Frame::Seq {
                    items: Vec::new(),
                    at: at.clone(),
                    anchor,
                    reference,
                    first,
                });
                self.grow(NODE_COST, &at);
            }
            Event::MappingStart { anchor, tag } => {
                self.collection_tag(tag.as_deref(), &at);
                let first = self.bytes;
                self.stack.push(Frame::Map {
                    mapping: Mapping::default(),
                    at: None,
                    start: at.clone(),
                    anchor,
                    key: None,
                    first,
                });
                self.grow(NODE_COST, &at);
            }
            Event::SequenceEnd | Event::MappingEnd => match self.stack.pop() {
                Some(Frame::Seq {
                    items,
                    at,
                    anchor,
                    reference,
                    first,
                }) => {
                    let value = if reference {
                        Value::Reference(items)
                    } else {
                        Value::Seq(items)
                    };
                    let size = self.bytes - first;
                    self.finish(Node::new(value, at), anchor, size);
                }
                Some(Frame::Map {
                    mapping,
                    at,
                    start,
                    anchor,
                    first,
                    ..
                }) => {
                    let at = at.unwrap_or(start);
                    let size = self.bytes - first;
                    self.finish(Node::new(Value::Map(mapping), at), anchor, size);
                }
                None => {}
            },
            // Anchors belong to their document, as in libyaml.
            Event::DocumentStart => self.anchors.clear(),
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

/// How many collections `node` nests (a scalar is 0, `[x]` is 1), as the parser's stack
/// counts them, without recursion.
fn tree_depth(node: &Node) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(node, 0usize)];
    while let Some((n, outer)) = pending.pop() {
        match &n.value {
            Value::Seq(items) | Value::Reference(items) => {
                deepest = deepest.max(outer + 1);
                pending.extend(items.iter().map(|i| (i, outer + 1)));
            }
            Value::Map(m) => {
                deepest = deepest.max(outer + 1);
                pending.extend(m.iter().map(|(_, v)| (v, outer + 1)));
            }
            _ => {}
        }
    }
    deepest
}

/// A mapping key as text (GitLab's keys are strings; numbers and booleans become their text).
fn key_text(node: &Node) -> Option<String> {
    match &node.value {
        Value::Bool(b) => Some(b.to_string()),
        // GitLab symbolizes every key, so `:script:` and `script:` are the same key.
        Value::Symbol(s) => Some(s.clone()),
        Value::Null => Some(String::new()),
        _ => node.scalar_text(),
    }
}

/// Apply a merge key's value to `mapping` as Psych's `revive_hash` does; the value back when
/// Psych keeps it as an ordinary `<<` key instead (its `Hash#merge!` raised `TypeError`).
fn merge_into(mapping: &mut Mapping, value: Node, origin: Origin) -> Option<Node> {
    match value.value {
        Value::Map(source) => {
            for (key, node) in source.into_entries() {
                mapping.insert(key, node);
            }
            None
        }
        Value::Seq(ref items)
            if origin == Origin::Literal && items.iter().all(|i| i.as_map().is_some()) =>
        {
            let Value::Seq(items) = value.value else {
                return None;
            };
            let mut combined = Mapping::default();
            for item in items.into_iter().rev() {
                if let Value::Map(source) = item.value {
                    for (key, node) in source.into_entries() {
                        combined.insert(key, node);
                    }
                }
            }
            for (key, node) in combined.into_entries() {
                mapping.insert(key, node);
            }
            None
        }
        _ => Some(value),
    }
}

/// Tags whose meaning Psych knows and flotilla follows ([`resolve_tagged`]); the non-specific
/// `!` resolves the text as if plain, as Psych does.
const KNOWN_SCALAR_TAGS: &[&str] = &[
    "!",
    "!str",
    "!float",
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
];

/// A tag as people write it (`!!str` for `tag:yaml.org,2002:str`).
fn shown_tag(tag: &str) -> String {
    tag.strip_prefix("tag:yaml.org,2002:")
        .map_or_else(|| tag.to_string(), |s| format!("!!{s}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Node {
        let file: Arc<str> = Arc::from("t.yml");
        load(text, &file).unwrap().documents.remove(0)
    }

    #[test]
    fn floats_print_as_ruby_prints_them() {
        assert_eq!(
            Node::new(Value::Float(3.0), Location::new("f", 1, 1))
                .scalar_text()
                .unwrap(),
            "3.0"
        );
    }

    #[test]
    fn positions_are_one_based() {
        let root = doc("a: 1\nbb:\n  - x\n");
        let map = root.as_map().unwrap();
        let (key, value) = map.entry("bb").unwrap();
        assert_eq!((key.at.line, key.at.column), (2, 1));
        let first = &value.as_seq().unwrap()[0];
        assert_eq!((first.at.line, first.at.column), (3, 5));
    }

    #[test]
    fn merge_keys_follow_psych_order() {
        let root = doc("a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\nc:\n  <<: [*a, *b]\n  z: 3\n");
        let c = root.as_map().unwrap().get("c").unwrap().as_map().unwrap();
        assert_eq!(c.get("x").unwrap().as_int(), Some(1));
        assert_eq!(
            c.get("y").unwrap().as_int(),
            Some(1),
            "earlier hash in the list wins"
        );
        assert_eq!(
            c.get("z").unwrap().as_int(),
            Some(3),
            "explicit key after << wins"
        );
    }

    #[test]
    fn reference_tags_are_kept() {
        let root = doc("a:\n  script: !reference [.setup, script]\n");
        let a = root.as_map().unwrap().get("a").unwrap().as_map().unwrap();
        assert!(matches!(a.get("script").unwrap().value, Value::Reference(ref p) if p.len() == 2));
    }

    /// An alias bomb (each level ten aliases of the one before) is refused as GitLab refuses a
    /// file whose parsed form is too big, instead of exhausting memory.
    #[test]
    fn alias_bombs_are_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let items = vec![format!("*a{}", i - 1); 10].join(", ");
            text.push_str(&format!("a{i}: &a{i} [{items}]\n"));
        }
        let file: Arc<str> = Arc::from("t.yml");
        let error = load(&text, &file).unwrap_err();
        assert!(
            error.to_string().contains("the parsed YAML is too big"),
            "{error}"
        );
        // The same shape a few levels deep is fine.
        let small: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
        assert!(load(&small, &file).is_ok());
        // Aliases of aliases nest as deep as what they build.
        let mut chain = String::from("a0: &a0 [x]\n");
        for i in 1..120 {
            chain.push_str(&format!("a{i}: &a{i} [*a{}]\n", i - 1));
        }
        let error = load(&chain, &file).unwrap_err();
        assert!(error.to_string().contains("aliases included"), "{error}");
        let deep = format!("{}x{}", "[".repeat(150), "]".repeat(150));
        let error = load(&deep, &file).unwrap_err();
        assert!(
            error.to_string().contains("more than 100 levels"),
            "{error}"
        );
    }

    #[test]
    fn syntax_errors_have_positions() {
        let file: Arc<str> = Arc::from("t.yml");
        let error = load("a: 1\n  b: 2\n", &file).unwrap_err();
        assert_eq!(error.location().unwrap().line, 2);
        assert!(error.to_string().starts_with("t.yml:2:"), "{error}");
    }
}
