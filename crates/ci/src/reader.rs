//! Typed reading of keyword values, collecting an error (with its position) for each value of
//! the wrong shape instead of stopping at the first.

use super::error::{CiError, Diagnostics, Location};
use super::yaml::{Mapping, Node, Value};

/// Reads the values of one entry (`jobs:build`, `default`, `jobs:build:artifacts`).
pub(crate) struct Reader<'d> {
    /// Where errors and warnings go.
    pub diag: &'d mut Diagnostics,
    /// The entry, in GitLab's words (`jobs:build`).
    pub context: String,
}

impl<'d> Reader<'d> {
    /// A reader for `context`.
    pub(crate) fn new(diag: &'d mut Diagnostics, context: impl Into<String>) -> Self {
        Self {
            diag,
            context: context.into(),
        }
    }

    /// A reader for a sub-entry (`jobs:build` + `artifacts`).
    pub(crate) fn nested(&mut self, key: &str) -> Reader<'_> {
        Reader {
            context: if self.context.is_empty() {
                key.to_string()
            } else {
                format!("{}:{key}", self.context)
            },
            diag: self.diag,
        }
    }

    /// `message` prefixed by the context (when there is one).
    fn prefixed(&self, message: &str) -> String {
        if self.context.is_empty() {
            message.to_string()
        } else {
            format!("{} {message}", self.context)
        }
    }

    /// Record "`key` should be `expected`" at `node`.
    pub(crate) fn wrong(&mut self, node: &Node, key: &str, expected: &str) {
        let message = self.prefixed(&format!(
            "{key} should be {expected}, found {}",
            node.kind()
        ));
        self.diag.error(CiError::invalid(&node.at, message));
    }

    /// Record an error with a free message prefixed by the context.
    pub(crate) fn fail(&mut self, at: &Location, message: impl AsRef<str>) {
        let message = self.prefixed(message.as_ref());
        self.diag.error(CiError::invalid(at, message));
    }

    /// Warn at `at`, prefixed by the context.
    pub(crate) fn warn(&mut self, at: &Location, message: impl AsRef<str>) {
        if self.context.starts_with("jobs:") {
            self.diag.warn_in(&self.context, at, message.as_ref());
        } else {
            let text = self.prefixed(message.as_ref());
            self.diag.warn(at, text);
        }
    }

    /// The value as a hash, or an error.
    pub(crate) fn map<'n>(&mut self, node: &'n Node, key: &str) -> Option<&'n Mapping> {
        let map = node.as_map();
        if map.is_none() {
            self.wrong(node, key, "a hash");
        }
        map
    }

    /// Check that `map` holds only `allowed` keys; the unknown ones are one error.
    pub(crate) fn check_keys(&mut self, map: &Mapping, allowed: &[&str]) -> bool {
        let unknown: Vec<_> = map
            .iter()
            .filter(|(k, _)| !allowed.contains(&k.name.as_str()))
            .collect();
        match unknown.first() {
            None => true,
            Some((first, _)) => {
                let keys = unknown
                    .iter()
                    .map(|(k, _)| k.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ");
                self.diag.error(CiError::UnknownKeys {
                    location: first.at.clone(),
                    context: self.context.clone(),
                    keys,
                });
                false
            }
        }
    }

    /// A string (numbers are accepted as their text).
    pub(crate) fn string(&mut self, node: &Node, key: &str) -> Option<String> {
        let text = node.scalar_text();
        if text.is_none() {
            self.wrong(node, key, "a string");
        }
        text
    }

    /// A boolean.
    pub(crate) fn boolean(&mut self, node: &Node, key: &str) -> Option<bool> {
        let value = node.as_bool();
        if value.is_none() {
            self.wrong(node, key, "a boolean value");
        }
        value
    }

    /// An integer.
    pub(crate) fn integer(&mut self, node: &Node, key: &str) -> Option<i64> {
        let value = node.as_int();
        if value.is_none() {
            self.wrong(node, key, "an integer");
        }
        value
    }

    /// An array of strings (nested arrays, as `!reference` produces, are flattened).
    pub(crate) fn strings(&mut self, node: &Node, key: &str) -> Option<Vec<String>> {
        let mut out = Vec::new();
        if self.collect_strings(node, &mut out, 0) {
            Some(out)
        } else {
            self.wrong(node, key, "an array of strings");
            None
        }
    }

    fn collect_strings(&mut self, node: &Node, out: &mut Vec<String>, depth: usize) -> bool {
        match &node.value {
            Value::Seq(items) if depth < 10 => items.iter().all(|item| match item.value {
                Value::Seq(_) => self.collect_strings(item, out, depth + 1),
                _ => match item.scalar_text() {
                    Some(text) => {
                        out.push(text);
                        true
                    }
                    None => false,
                },
            }),
            _ => false,
        }
    }

    /// A string or an array of strings.
    pub(crate) fn string_or_strings(&mut self, node: &Node, key: &str) -> Option<Vec<String>> {
        match node.scalar_text() {
            Some(text) => Some(vec![text]),
            None => match node.value {
                Value::Seq(_) => self.strings(node, key),
                _ => {
                    self.wrong(node, key, "a string or an array of strings");
                    None
                }
            },
        }
    }

    /// An integer or an array of integers.
    pub(crate) fn integers(&mut self, node: &Node, key: &str) -> Option<Vec<i64>> {
        match &node.value {
            Value::Int(i) => Some(vec![*i]),
            Value::Seq(items) => {
                let values: Option<Vec<i64>> = items.iter().map(Node::as_int).collect();
                if values.is_none() {
                    self.wrong(node, key, "an integer or an array of integers");
                }
                values
            }
            _ => {
                self.wrong(node, key, "an integer or an array of integers");
                None
            }
        }
    }
}
