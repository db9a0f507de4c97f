//! Label and field selectors, as the API server reads `labelSelector` and `fieldSelector`.
//!
//! Label selectors follow `staging/src/k8s.io/apimachinery/pkg/labels/selector.go` (`Parse`):
//! comma-separated requirements `k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
//! `k notin (a,b)`; all must hold. Field selectors follow
//! `staging/src/k8s.io/apimachinery/pkg/fields/selector.go` (`=`, `==`, `!=`) over the fields
//! a resource supports (`pkg/registry/core/pod/strategy.go`, `PodToSelectableFields`:
//! `metadata.name`, `metadata.namespace`, `spec.nodeName`, `status.phase`, ...; for events,
//! `pkg/registry/core/event/strategy.go`: `involvedObject.*`, `reason`, `type`, ...).

use super::status::StatusError;
use serde_json::Value;
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector (empty: everything matches).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<Requirement>);

impl LabelSelector {
    /// Parses `text`; a malformed selector is a 400 `BadRequest`, as `labels.Parse` fails.
    pub(crate) fn parse(text: &str) -> Result<LabelSelector, StatusError> {
        let mut requirements = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            let bad = || StatusError::bad_request(format!("unable to parse requirement: {term}"));
            let requirement = if let Some(key) = term.strip_prefix('!') {
                Requirement::NotExists(key.trim().to_string())
            } else if let Some((k, v)) = term.split_once("!=") {
                Requirement::NotEquals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                Requirement::Equals(k.trim().into(), v.trim().into())
            } else if let Some((k, set)) = term.split_once(" notin ") {
                Requirement::NotIn(k.trim().into(), parse_set(set).ok_or_else(bad)?)
            } else if let Some((k, set)) = term.split_once(" in ") {
                Requirement::In(k.trim().into(), parse_set(set).ok_or_else(bad)?)
            } else if term
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Requirement::Exists(term.to_string())
            } else {
                return Err(bad());
            };
            requirements.push(requirement);
        }
        Ok(LabelSelector(requirements))
    }

    /// Whether `labels` (an object's `metadata.labels`) satisfies every requirement.
    pub(crate) fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::NotExists(k) => !labels.contains_key(k),
            Requirement::In(k, set) => labels.get(k).is_some_and(|v| set.contains(v)),
            Requirement::NotIn(k, set) => labels.get(k).is_none_or(|v| !set.contains(v)),
        })
    }
}

/// Splits at commas outside parentheses (`a in (x,y),b` is two terms).
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn parse_set(text: &str) -> Option<Vec<String>> {
    let inner = text.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).collect())
}

/// A parsed field selector over the fields a resource supports.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `text`, refusing fields not in `supported` with the API server's message
    /// (`field label not supported: <field>`, 400).
    pub(crate) fn parse(text: &str, supported: &[&str]) -> Result<FieldSelector, StatusError> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (field, equal, value) = if let Some((f, v)) = term.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = term.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = term.split_once('=') {
                (f, true, v)
            } else {
                return Err(StatusError::bad_request(format!(
                    "invalid selector: '{text}'; can't understand '{term}'"
                )));
            };
            let field = field.trim();
            if !supported.contains(&field) {
                return Err(StatusError::bad_request(format!(
                    "field label not supported: {field}"
                )));
            }
            terms.push((field.to_string(), equal, value.trim().to_string()));
        }
        Ok(FieldSelector(terms))
    }

    /// Whether `object` satisfies every term (a missing field reads as the empty string).
    pub(crate) fn matches(&self, object: &Value) -> bool {
        self.0.iter().all(|(field, equal, value)| {
            let mut at = object;
            for part in field.split('.') {
                at = at.get(part).unwrap_or(&Value::Null);
            }
            let actual = at.as_str().unwrap_or("");
            (actual == value) == *equal
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn label_selectors_follow_the_grammar_of_labels_parse() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let yes = [
            "app=web",
            "app==web",
            "app",
            "!missing",
            "tier in (front,back)",
            "app=web,tier!=back",
            "x notin (a)",
            "",
        ];
        for s in yes {
            assert!(LabelSelector::parse(s).unwrap().matches(&l), "{s}");
        }
        let no = [
            "app=db",
            "missing",
            "!app",
            "tier in (back)",
            "app notin (web, db)",
            "app=web,tier=back",
        ];
        for s in no {
            assert!(!LabelSelector::parse(s).unwrap().matches(&l), "{s}");
        }
        assert_eq!(LabelSelector::parse("a b c").unwrap_err().code, 400);
    }

    #[test]
    fn field_selectors_refuse_unsupported_fields() {
        let pod = serde_json::json!({"metadata": {"name": "p"}, "status": {"phase": "Running"}});
        let fields = ["metadata.name", "status.phase"];
        assert!(
            FieldSelector::parse("metadata.name=p", &fields)
                .unwrap()
                .matches(&pod)
        );
        assert!(
            !FieldSelector::parse("status.phase!=Running", &fields)
                .unwrap()
                .matches(&pod)
        );
        let err = FieldSelector::parse("spec.foo=1", &fields).unwrap_err();
        assert_eq!(err.body["message"], "field label not supported: spec.foo");
    }
}
