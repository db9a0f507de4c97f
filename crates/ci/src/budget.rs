//! How much a compile may build: counted in bytes as it is built, so that a small file cannot
//! make the compiler hold gigabytes (an alias bomb, a `!reference` amplified at every level,
//! a large template extended by thousands of jobs, includes that are each a bomb).
//!
//! GitLab's own limits (gitlabhq `lib/gitlab/config/loader/yaml.rb`): a parsed file may be
//! 1 MB (`MAX_YAML_SIZE`, measured by `deep_size`) and 100 levels deep (`MAX_YAML_DEPTH`), and
//! a pipeline's configuration 150 MB in all (`ci_max_total_yaml_size_bytes`). Ours are set
//! above what real pipelines reach (the largest of the corpus counts 7 MiB in all) and low
//! enough that memory stays bounded: every byte counted is at most a few bytes held.

use super::error::{CiError, Location};
use super::yaml::{Node, Value};

/// What one value costs beyond its text: its node, location and place in its parent.
pub(crate) const NODE_COST: usize = 48;

/// The most one file may expand to, aliases at their expanded size.
pub(crate) const MAX_FILE_BYTES: usize = 16 << 20;

/// The most the whole configuration may take: every file loaded, every `!reference`
/// substituted, every `extends` copy, every job's copy of `default:` and `variables:`, and
/// every `parallel` instance.
pub(crate) const MAX_CONFIG_BYTES: usize = 64 << 20;

/// The size of `node` as counted against the budgets.
pub(crate) fn deep_size(node: &Node) -> usize {
    let mut total = 0usize;
    let mut pending: Vec<&Node> = vec![node];
    while let Some(n) = pending.pop() {
        total = total.saturating_add(NODE_COST);
        match &n.value {
            Value::Str(s) | Value::Symbol(s) => total = total.saturating_add(s.len()),
            Value::Seq(items) | Value::Reference(items) => pending.extend(items),
            Value::Map(m) => {
                for (k, v) in m.iter() {
                    total = total.saturating_add(NODE_COST + k.name.len());
                    pending.push(v);
                }
            }
            Value::Null | Value::Bool(_) | Value::Int(_) | Value::Float(_) => {}
        }
    }
    total
}

/// The configuration's budget, spent as the compile builds.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    used: usize,
    exhausted: bool,
}

impl Budget {
    /// Spends `bytes` for what is built at `at`, or the error saying the budget is spent.
    pub(crate) fn charge(&mut self, bytes: usize, at: &Location) -> Result<(), CiError> {
        self.used = self.used.saturating_add(bytes);
        if self.used <= MAX_CONFIG_BYTES {
            return Ok(());
        }
        self.exhausted = true;
        Err(CiError::TooBig {
            location: at.clone(),
            message: format!(
                "the configuration expands to more than {} MiB (includes, !reference, extends, \
                 defaults and parallel copies counted); GitLab refuses configurations this large",
                MAX_CONFIG_BYTES >> 20
            ),
        })
    }

    /// Whether the budget has run out (its error was given once already).
    pub(crate) fn is_exhausted(&self) -> bool {
        self.exhausted
    }

    /// What has been spent.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_once_then_stays_refused() {
        let at = Location::new("f", 1, 1);
        let mut b = Budget::default();
        assert!(b.charge(MAX_CONFIG_BYTES, &at).is_ok());
        assert_eq!(b.used(), MAX_CONFIG_BYTES);
        assert!(!b.is_exhausted());
        let error = b.charge(1, &at).unwrap_err();
        assert!(error.to_string().contains("more than 64 MiB"), "{error}");
        assert!(b.is_exhausted());
    }

    #[test]
    fn a_node_costs_its_text_and_its_children() {
        let at = Location::new("f", 1, 1);
        let s = Node::new(Value::Str("x".repeat(100)), at.clone());
        assert_eq!(deep_size(&s), NODE_COST + 100);
        let seq = Node::new(Value::Seq(vec![s.clone(), s]), at);
        assert_eq!(deep_size(&seq), NODE_COST + 2 * (NODE_COST + 100));
    }
}
