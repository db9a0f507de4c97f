//! `extends`: a job (or hidden job) inherits the keys of the templates it names, several levels
//! deep and several parents in order; the parents are deep-merged left to right and the job on
//! top. Cycles, missing templates and chains deeper than GitLab's limit are errors.

use std::collections::{BTreeSet, HashMap, HashSet};

use super::budget::{Budget, deep_size};
use super::error::{CiError, Diagnostics, Location};
use super::merge::deep_merge;
use super::yaml::{Mapping, Node, Value};

/// GitLab's limit on `extends` nesting.
const MAX_NESTING: usize = 10;

/// Resolve `extends` for every top-level entry except `reserved` ones. When includes were
/// skipped (`skipped` names them), a template that is not defined may be in one of them: the
/// job is compiled without it, with a warning, instead of failing the pipeline. Returns the
/// entries compiled without a template (directly or through their parents).
pub(crate) fn resolve_extends(
    config: &mut Mapping,
    reserved: &[&str],
    skipped: Option<&str>,
    diag: &mut Diagnostics,
) -> HashSet<String> {
    let names: Vec<String> = config
        .iter()
        .filter(|(k, v)| {
            !reserved.contains(&k.name.as_str())
                && v.as_map()
                    .is_some_and(|m| m.get("extends").is_some_and(|e| !e.is_null()))
        })
        .map(|(k, _)| k.name.clone())
        .collect();
    if names.is_empty() {
        return HashSet::new();
    }
    let mut resolver = Resolver {
        config,
        budget: &mut diag.budget,
        reserved,
        skipped,
        warnings: Vec::new(),
        partial: HashSet::new(),
        resolved: HashMap::new(),
        depth: HashMap::new(),
        failed: HashSet::new(),
        cycles: HashSet::new(),
    };
    let mut results = Vec::new();
    let mut errors = Vec::new();
    for name in &names {
        let mut stack = Vec::new();
        match resolver.resolve(name, &mut stack) {
            Ok(node) => results.push((name.clone(), node)),
            Err(Some(error)) => errors.push(error),
            Err(None) => {}
        }
    }
    let warnings = std::mem::take(&mut resolver.warnings);
    let partial = std::mem::take(&mut resolver.partial);
    for error in errors {
        diag.error(error);
    }
    for (job, at, parent) in warnings {
        diag.incomplete(
            &job,
            &at,
            &format!("extends `{parent}`"),
            &format!(
                "extends `{parent}`, which is not defined here (a skipped include may define \
                 it); the job is compiled without it"
            ),
        );
    }
    for (name, node) in results {
        if let Some(slot) = config
            .iter_mut()
            .find(|(k, _)| k.name == name)
            .map(|(_, v)| v)
        {
            *slot = node;
        }
    }
    partial
}

struct Resolver<'a> {
    config: &'a Mapping,
    /// The compile's budget: every resolved entry is a copy of its templates.
    budget: &'a mut Budget,
    reserved: &'a [&'a str],
    /// The includes local runs skipped, when there are any.
    skipped: Option<&'a str>,
    /// Templates left out because they may be in a skipped include.
    /// Jobs extending what is not here while includes were skipped: job, where, parent.
    warnings: Vec<(String, Location, String)>,
    /// The entries resolved without a template (theirs or a parent's).
    partial: HashSet<String>,
    resolved: HashMap<String, Node>,
    /// How many `extends` hops lie below each resolved entry.
    depth: HashMap<String, usize>,
    /// Entries whose resolution failed (and was reported).
    failed: HashSet<String>,
    /// The members of the cycles reported so far (each cycle is reported once).
    cycles: HashSet<BTreeSet<String>>,
}

impl Resolver<'_> {
    /// Resolve `name`; `Err(None)` for a failure already reported.
    fn resolve(&mut self, name: &str, stack: &mut Vec<String>) -> Result<Node, Option<CiError>> {
        if let Some(done) = self.resolved.get(name) {
            return Ok(done.clone());
        }
        let node = self
            .config
            .get(name)
            .cloned()
            .unwrap_or_else(|| Node::new(Value::Null, Location::new("", 1, 1)));
        let Some(map) = node.as_map() else {
            return Ok(node);
        };
        // `extends:` without a value extends nothing.
        let Some(extends) = map.get("extends").filter(|e| !e.is_null()) else {
            return Ok(node);
        };
        let parents: Vec<(String, Location)> = match &extends.value {
            Value::Str(s) => vec![(s.clone(), extends.at.clone())],
            Value::Seq(items) => {
                let mut out = Vec::new();
                for item in items {
                    match item.as_str() {
                        Some(s) => out.push((s.to_string(), item.at.clone())),
                        None => {
                            return Err(Some(CiError::invalid(
                                &item.at,
                                format!(
                                    "jobs:{name} extends should be a string or an array of strings, found {}",
                                    item.kind()
                                ),
                            )));
                        }
                    }
                }
                out
            }
            _ => {
                return Err(Some(CiError::invalid(
                    &extends.at,
                    format!(
                        "jobs:{name} extends should be a string or an array of strings, found {}",
                        extends.kind()
                    ),
                )));
            }
        };
        stack.push(name.to_string());
        let mut base: Option<Node> = None;
        let mut depth = 1;
        for (parent, at) in parents {
            if let Some(start) = stack.iter().position(|s| *s == parent) {
                let mut chain = stack[start..].to_vec();
                if !self.cycles.insert(chain.iter().cloned().collect()) {
                    return Err(None);
                }
                chain.push(parent.clone());
                return Err(Some(CiError::ExtendsCycle {
                    location: at,
                    job: name.to_string(),
                    message: format!(
                        "circular dependency detected in `extends`: {}",
                        chain.join(" -> ")
                    ),
                }));
            }
            let exists = !self.reserved.contains(&parent.as_str())
                && self
                    .config
                    .get(&parent)
                    .is_some_and(|n| n.as_map().is_some());
            if !exists && self.skipped.is_some() {
                self.warnings.push((name.to_string(), at, parent.clone()));
                self.partial.insert(name.to_string());
                continue;
            }
            if !exists {
                return Err(Some(CiError::MissingExtends {
                    location: at,
                    job: name.to_string(),
                    parent,
                }));
            }
            if self.failed.contains(&parent) {
                return Err(None);
            }
            let resolved_parent = match self.resolve(&parent, stack) {
                Ok(node) => node,
                Err(error) => {
                    self.failed.insert(name.to_string());
                    return Err(error);
                }
            };
            if self.partial.contains(&parent) {
                self.partial.insert(name.to_string());
            }
            depth = depth.max(self.depth.get(&parent).copied().unwrap_or(0) + 1);
            base = Some(match base {
                Some(b) => deep_merge(b, resolved_parent),
                None => resolved_parent,
            });
        }
        stack.pop();
        if depth > MAX_NESTING {
            self.failed.insert(name.to_string());
            return Err(Some(CiError::ExtendsCycle {
                location: extends.at.clone(),
                job: name.to_string(),
                message: format!(
                    "extends nests {depth} levels deep; GitLab's limit is {MAX_NESTING}"
                ),
            }));
        }
        self.depth.insert(name.to_string(), depth);
        let at = node.at.clone();
        let mut merged = match base {
            Some(b) => deep_merge(b, node),
            None => node,
        };
        merged.at = at;
        if let Value::Map(m) = &mut merged.value {
            m.remove("extends");
        }
        let reported = self.budget.is_exhausted();
        if let Err(error) = self.budget.charge(deep_size(&merged), &merged.at) {
            self.failed.insert(name.to_string());
            return Err((!reported).then_some(error));
        }
        self.resolved.insert(name.to_string(), merged.clone());
        Ok(merged)
    }
}
