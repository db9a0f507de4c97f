//! YAML into a tree of nodes that remember where they came from.
//!
//! GitLab reads `.gitlab-ci.yml` with Ruby's Psych (YAML 1.1), so plain scalars resolve the way
//! Psych resolves them: `yes`/`no`/`on`/`off` are booleans, `0755` is octal, `1:30` is base 60.
//! Merge keys (`<<: *a`, `<<: [*a, *b]`) are applied here, in Psych's order: the merged hash is
//! applied where `<<` appears, later keys override it, and in a list the earlier hashes win.
//! `!reference [a, b]` becomes [`Value::Reference`]; other local tags are dropped with a warning.

use std::collections::HashMap;
use std::sync::Arc;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, TScalarStyle};

use super::error::{CiError, Location, Warning};

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
    let mut parser = Parser::new_from_str(text);
    loop {
        match parser.next_token() {
            Ok((Event::StreamEnd, _)) => break,
            Ok((event, mark)) => {
                builder.on_event(event, mark);
                if builder.too_big {
                    break;
                }
            }
            Err(error) => {
                return Err(CiError::Syntax {
                    location: builder.location(error.marker()),
                    message: error.info().to_string(),
                });
            }
        }
    }
    if let Some(error) = CiError::from_list(builder.errors) {
        return Err(error);
    }
    Ok(Loaded {
        documents: builder.documents,
        warnings: builder.warnings,
        size: builder.bytes,
    })
}

/// A collection being built.
enum Frame {
    Seq {
        items: Vec<Node>,
        at: Location,
        anchor: usize,
        reference: bool,
        /// [`Builder::bytes`] when it started.
        first: usize,
    },
    Map {
        mapping: Mapping,
        at: Option<Location>,
        start: Location,
        anchor: usize,
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

struct Builder {
    file: Arc<str>,
    stack: Vec<Frame>,
    /// The current document's anchored nodes and the bytes each takes.
    anchors: HashMap<usize, (Node, usize)>,
    /// Bytes built so far ([`crate::budget`]), aliases counted at their expanded size.
    bytes: usize,
    /// Whether the file went past [`MAX_FILE_BYTES`] or [`MAX_DEPTH`] (reported once).
    too_big: bool,
    documents: Vec<Node>,
    errors: Vec<CiError>,
    warnings: Vec<Warning>,
}

impl Builder {
    fn location(&self, mark: &Marker) -> Location {
        Location::new(self.file.clone(), mark.line().max(1), mark.col() + 1)
    }

    /// `size`: the bytes the node takes (itself included).
    fn finish(&mut self, node: Node, anchor: usize, size: usize) {
        if anchor != 0 {
            self.anchors.insert(anchor, (node.clone(), size));
        }
        self.push(node, false);
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

    fn push(&mut self, node: Node, merge_key: bool) {
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
                        merge: merge_key,
                    });
                }
                Some(pending) => {
                    if pending.merge {
                        if let Err(error) = merge_into(mapping, node) {
                            self.errors.push(error);
                        }
                    } else {
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

    fn scalar(
        &mut self,
        text: String,
        style: TScalarStyle,
        tag: Option<Tag>,
        at: &Location,
    ) -> Value {
        if let Some(tag) = tag {
            if tag.handle == "tag:yaml.org,2002:" || tag.handle == "!!" {
                return match tag.suffix.as_str() {
                    "str" => Value::Str(text),
                    "null" => Value::Null,
                    "bool" | "int" | "float" => resolve_plain(&text),
                    other => {
                        self.warnings.push(Warning::at(
                            at,
                            format!(
                                "YAML tag !!{other} is not supported; the value is read as a string"
                            ),
                        ));
                        Value::Str(text)
                    }
                };
            }
            if tag.handle == "!" && tag.suffix == "reference" {
                self.errors.push(CiError::invalid(
                    at,
                    "!reference expects a list: !reference [job, key]",
                ));
                return Value::Null;
            }
            self.warnings.push(Warning::at(
                at,
                format!(
                    "YAML tag {}{} is not supported and was ignored",
                    tag.handle, tag.suffix
                ),
            ));
        }
        match style {
            TScalarStyle::Plain => resolve_plain(&text),
            _ => Value::Str(text),
        }
    }
}

impl MarkedEventReceiver for Builder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        let at = self.location(&mark);
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let merge = style == TScalarStyle::Plain && tag.is_none() && text == "<<";
                let is_key = matches!(self.stack.last(), Some(Frame::Map { key: None, .. }));
                if merge && is_key {
                    self.push(Node::new(Value::Str(text), at), true);
                    return;
                }
                let size = NODE_COST + text.len();
                if !self.grow(size, &at) {
                    return;
                }
                let value = self.scalar(text, style, tag, &at);
                self.finish(Node::new(value, at), anchor, size);
            }
            Event::Alias(id) => match self.anchors.get(&id) {
                Some((node, size)) => {
                    let (node, size) = (node.clone(), *size);
                    // Past the limit, the alias stands for nothing: the file is refused anyway.
                    let node = if self.grow(size, &at) {
                        node
                    } else {
                        Node::new(Value::Null, at)
                    };
                    self.push(node, false);
                }
                None => self.errors.push(CiError::Syntax {
                    location: at,
                    message: "an alias refers to no anchor before it in this document (or to \
                              the node that contains it)"
                        .into(),
                }),
            },
            Event::SequenceStart(anchor, tag) => {
                let reference = match &tag {
                    Some(t) if t.handle == "!" && t.suffix == "reference" => true,
                    Some(t) => {
                        self.warnings.push(Warning::at(
                            &at,
                            format!(
                                "YAML tag {}{} is not supported and was ignored",
                                t.handle, t.suffix
                            ),
                        ));
                        false
                    }
                    None => false,
                };
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
            Event::MappingStart(anchor, tag) => {
                if let Some(t) = tag {
                    self.warnings.push(Warning::at(
                        &at,
                        format!(
                            "YAML tag {}{} is not supported and was ignored",
                            t.handle, t.suffix
                        ),
                    ));
                }
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
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentEnd => {}
        }
    }
}

/// A mapping key as text (GitLab's keys are strings; numbers and booleans become their text).
fn key_text(node: &Node) -> Option<String> {
    match &node.value {
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        _ => node.scalar_text(),
    }
}

/// Apply a merge key's value to `mapping`.
fn merge_into(mapping: &mut Mapping, value: Node) -> Result<(), CiError> {
    match value.value {
        Value::Map(source) => {
            for (key, node) in source.into_entries() {
                mapping.insert(key, node);
            }
            Ok(())
        }
        Value::Seq(items) => {
            let mut combined = Mapping::default();
            for item in items.into_iter().rev() {
                match item.value {
                    Value::Map(source) => {
                        for (key, node) in source.into_entries() {
                            combined.insert(key, node);
                        }
                    }
                    _ => {
                        return Err(CiError::invalid(
                            &item.at,
                            format!(
                                "a merge key (<<) list must hold hashes, found {}",
                                item.kind()
                            ),
                        ));
                    }
                }
            }
            for (key, node) in combined.into_entries() {
                mapping.insert(key, node);
            }
            Ok(())
        }
        _ => Err(CiError::invalid(
            &value.at,
            format!(
                "a merge key (<<) expects a hash or a list of hashes, found {}",
                value.kind()
            ),
        )),
    }
}

/// Resolve a plain scalar as Psych does (YAML 1.1 core types).
pub(crate) fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" => {
            return Value::Bool(true);
        }
        "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" => {
            return Value::Bool(false);
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    if let Some(i) = parse_int(text) {
        return Value::Int(i);
    }
    if let Some(f) = parse_float(text) {
        return Value::Float(f);
    }
    Value::Str(text.to_string())
}

fn parse_int(text: &str) -> Option<i64> {
    let (negative, body) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if body.is_empty() || body.starts_with('_') || body.ends_with('_') {
        return None;
    }
    let digits = |s: &str| s.replace('_', "");
    let magnitude = if let Some(hex) = body.strip_prefix("0x") {
        if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit() || c == '_') {
            return None;
        }
        i64::from_str_radix(&digits(hex), 16).ok()?
    } else if let Some(bin) = body.strip_prefix("0b") {
        if bin.is_empty() || !bin.chars().all(|c| c == '0' || c == '1' || c == '_') {
            return None;
        }
        i64::from_str_radix(&digits(bin), 2).ok()?
    } else if body.len() > 1 && body.starts_with('0') {
        if !body.chars().all(|c| ('0'..='7').contains(&c) || c == '_') {
            return None;
        }
        i64::from_str_radix(&digits(body), 8).ok()?
    } else if body.contains(':') {
        // Base 60 (`1:30` is 90), YAML 1.1.
        let mut parts = body.split(':');
        let first = parts.next()?;
        if first.is_empty()
            || !first.chars().all(|c| c.is_ascii_digit() || c == '_')
            || first.starts_with('0')
        {
            return None;
        }
        let mut value: i64 = digits(first).parse().ok()?;
        for part in parts {
            if part.is_empty() || part.len() > 2 || !part.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let n: i64 = part.parse().ok()?;
            if n >= 60 {
                return None;
            }
            value = value.checked_mul(60)?.checked_add(n)?;
        }
        value
    } else {
        if !body.chars().all(|c| c.is_ascii_digit() || c == '_') {
            return None;
        }
        digits(body).parse().ok()?
    };
    Some(if negative { -magnitude } else { magnitude })
}

fn parse_float(text: &str) -> Option<f64> {
    // [-+]?([0-9][0-9_]*)?\.[0-9]*([eE][-+][0-9]+)?
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], Some(&body[i + 1..])),
        None => (body, None),
    };
    let (whole, fraction) = mantissa.split_once('.')?;
    if !whole.is_empty() && !whole.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if !whole.chars().all(|c| c.is_ascii_digit() || c == '_')
        || !fraction.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    if let Some(exp) = exponent {
        let digits = exp.strip_prefix(['-', '+'])?;
        if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
    }
    text.replace('_', "").parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(text: &str) -> Node {
        let file: Arc<str> = Arc::from("t.yml");
        load(text, &file).unwrap().documents.remove(0)
    }

    #[test]
    fn plain_scalars_resolve_like_psych() {
        assert_eq!(resolve_plain("yes"), Value::Bool(true));
        assert_eq!(resolve_plain("Off"), Value::Bool(false));
        assert_eq!(resolve_plain("0755"), Value::Int(493));
        assert_eq!(resolve_plain("0x1f"), Value::Int(31));
        assert_eq!(resolve_plain("1_000"), Value::Int(1000));
        assert_eq!(resolve_plain("1:30"), Value::Int(90));
        assert_eq!(resolve_plain("08"), Value::Str("08".into()));
        assert_eq!(resolve_plain("1.10"), Value::Float(1.1));
        assert_eq!(resolve_plain("1.5e+3"), Value::Float(1500.0));
        assert_eq!(resolve_plain("1e3"), Value::Str("1e3".into()));
        assert_eq!(resolve_plain("v1.2"), Value::Str("v1.2".into()));
        assert_eq!(resolve_plain("~"), Value::Null);
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
