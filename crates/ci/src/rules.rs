//! `rules`, `workflow:rules`, `include:rules` and `only`/`except`: reading them (expressions and
//! regexes are checked when the file is read) and deciding, for given variables, whether a job
//! (or the pipeline, or an include) is in.

use std::collections::HashMap;

use regex::Regex;

use super::error::{CiError, Diagnostics, Location};
use super::expr::{Expression, ExpressionError};
use super::job::{AllowFailure, When, read_allow_failure, read_when};
use super::needs::{NeedSpec, read_needs};
use super::project::{Project, glob_matcher};
use super::re2::{self, Re2Error};
use super::reader::Reader;
use super::variables::{Variable, VariableSource, expand, read_variables};
use super::yaml::{Node, Value};

/// Where a `rules:` list appears; each place allows different keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RulesKind {
    /// A job's `rules`.
    Job,
    /// `workflow:rules`.
    Workflow,
    /// `include:rules`.
    Include,
}

/// A file-path clause (`changes`, `exists`).
#[derive(Clone, Debug)]
pub(crate) struct PathClause {
    /// Globs, unexpanded.
    pub paths: Vec<String>,
    /// Where the clause is.
    pub at: Location,
    /// `changes:compare_to`, unexpanded: the ref whose merge base with the pipeline's commit
    /// the changes are counted from.
    pub compare_to: Option<(String, Location)>,
}

/// One rule.
#[derive(Clone, Debug)]
pub(crate) struct Rule {
    /// Where the rule is.
    pub at: Location,
    /// `if:`.
    pub condition: Option<(Expression, Location)>,
    /// `changes:`.
    pub changes: Option<PathClause>,
    /// `exists:`.
    pub exists: Option<PathClause>,
    /// `when:`.
    pub when: Option<When>,
    /// `allow_failure:`.
    pub allow_failure: Option<AllowFailure>,
    /// `variables:`.
    pub variables: Vec<Variable>,
    /// `needs:`.
    pub needs: Option<Vec<NeedSpec>>,
    /// `interruptible:`.
    pub interruptible: Option<bool>,
}

/// Parse an expression, turning failures into errors at `at`.
pub(crate) fn parse_expression(
    text: &str,
    at: &Location,
    diag: &mut Diagnostics,
) -> Option<Expression> {
    match Expression::parse(text) {
        Ok(e) => {
            for why in e.unsupported_patterns() {
                diag.warn(
                    at,
                    format!("`{text}`: a pattern is valid RE2 that flotilla cannot run ({why}); the expression is false wherever it is used"),
                );
            }
            Some(e)
        }
        Err(ExpressionError::Regex { pattern, message }) => {
            diag.error(CiError::BadRegex {
                location: at.clone(),
                pattern,
                message,
            });
            None
        }
        Err(ExpressionError::Syntax(message)) => {
            diag.error(CiError::BadExpression {
                location: at.clone(),
                expression: text.to_string(),
                message,
            });
            None
        }
    }
}

/// Read a path clause: a list of globs, or `{paths: [...], ...}`.
fn read_paths(
    reader: &mut Reader<'_>,
    node: &Node,
    key: &str,
    extra: &[&str],
) -> Option<PathClause> {
    let mut compare_to = None;
    let paths = match &node.value {
        Value::Map(map) => {
            let mut allowed = vec!["paths"];
            allowed.extend_from_slice(extra);
            let mut r = reader.nested(key);
            if !r.check_keys(map, &allowed) {
                return None;
            }
            for extra_key in extra {
                let Some((k, v)) = map.entry(extra_key) else {
                    continue;
                };
                if *extra_key == "compare_to" {
                    compare_to = Some((r.string(v, "compare_to")?, v.at.clone()));
                } else {
                    r.warn(
                        &k.at,
                        format!("{extra_key} is not supported by local runs; ignored"),
                    );
                }
            }
            match map.get("paths") {
                Some(p) => r.strings(p, "paths")?,
                None => {
                    r.fail(&node.at, "should have paths");
                    return None;
                }
            }
        }
        _ => reader.strings(node, key)?,
    };
    Some(PathClause {
        paths,
        at: node.at.clone(),
        compare_to,
    })
}

/// GitLab's limit on nested rule arrays (`Processable::MAX_NESTING_LEVEL`).
const MAX_RULES_NESTING: usize = 10;

/// Flatten nested arrays into `out`; false when they nest deeper than the limit.
fn flatten_nested<'n>(items: &'n [Node], level: usize, out: &mut Vec<&'n Node>) -> bool {
    for item in items {
        match &item.value {
            Value::Seq(nested) => {
                if level >= MAX_RULES_NESTING || !flatten_nested(nested, level + 1, out) {
                    return false;
                }
            }
            _ => out.push(item),
        }
    }
    true
}

/// Read a `rules:` list.
pub(crate) fn read_rules(
    reader: &mut Reader<'_>,
    node: &Node,
    kind: RulesKind,
) -> Option<Vec<Rule>> {
    let Some(items) = node.as_seq() else {
        reader.wrong(node, "rules", "an array of hashes");
        return None;
    };
    // Rules may nest in arrays up to ten levels (`!reference` of rules that are themselves
    // references): `validates :rules, nested_array_of_hashes_or_arrays: { max_level: 10 }` in
    // `lib/gitlab/ci/config/entry/processable.rb`.
    let mut flat: Vec<&Node> = Vec::new();
    if !flatten_nested(items, 1, &mut flat) {
        reader.fail(
            &node.at,
            format!("rules config should be an array containing hashes and arrays of hashes, nested at most {MAX_RULES_NESTING} levels deep"),
        );
        return None;
    }
    let allowed: &[&str] = match kind {
        RulesKind::Job => &[
            "if",
            "changes",
            "exists",
            "when",
            "allow_failure",
            "variables",
            "needs",
            "interruptible",
            "start_in",
        ],
        RulesKind::Workflow => &[
            "if",
            "changes",
            "exists",
            "when",
            "variables",
            "auto_cancel",
        ],
        RulesKind::Include => &["if", "changes", "exists", "when"],
    };
    let mut rules = Vec::new();
    let mut ok = true;
    for item in flat {
        let Some(map) = item.as_map() else {
            reader.wrong(item, "rules", "an array of hashes");
            ok = false;
            continue;
        };
        let mut r = reader.nested("rules");
        if !r.check_keys(map, allowed) {
            ok = false;
            continue;
        }
        // A keyword with no value is unspecified (GitLab's entry factory; `allow_nil`).
        let map = &map.without_nulls();
        let mut rule = Rule {
            at: item.at.clone(),
            condition: None,
            changes: None,
            exists: None,
            when: None,
            allow_failure: None,
            variables: Vec::new(),
            needs: None,
            interruptible: None,
        };
        if let Some(n) = map.get("if") {
            match n.as_str() {
                Some(text) => match parse_expression(text, &n.at, r.diag) {
                    Some(e) => rule.condition = Some((e, n.at.clone())),
                    None => ok = false,
                },
                None => {
                    r.wrong(n, "if", "a string");
                    ok = false;
                }
            }
        }
        if let Some(n) = map.get("changes") {
            rule.changes = read_paths(&mut r, n, "changes", &["compare_to"]);
            ok &= rule.changes.is_some();
        }
        if let Some(n) = map.get("exists") {
            rule.exists = read_paths(&mut r, n, "exists", &["project", "ref"]);
            ok &= rule.exists.is_some();
        }
        if let Some(n) = map.get("when") {
            match kind {
                RulesKind::Job => {
                    rule.when = read_when(&mut r, n, true);
                    ok &= rule.when.is_some();
                }
                RulesKind::Workflow | RulesKind::Include => match n.as_str() {
                    Some("always") => rule.when = Some(When::Always),
                    Some("never") => rule.when = Some(When::Never),
                    _ => {
                        r.diag.error(CiError::BadWhen {
                            location: n.at.clone(),
                            context: r.context.clone(),
                            value: n.scalar_text().unwrap_or_else(|| n.kind().to_string()),
                            allowed: "always, never".into(),
                        });
                        ok = false;
                    }
                },
            }
        }
        if let Some(n) = map.get("allow_failure") {
            rule.allow_failure = read_allow_failure(&mut r, n);
            ok &= rule.allow_failure.is_some();
        }
        if let Some(n) = map.get("variables") {
            let source = match kind {
                RulesKind::Workflow => VariableSource::Global,
                _ => VariableSource::Rule,
            };
            match read_variables(&mut r, n, source) {
                Some(v) => rule.variables = v,
                None => ok = false,
            }
        }
        if let Some(n) = map.get("needs") {
            rule.needs = read_needs(&mut r, n);
            ok &= rule.needs.is_some();
        }
        if let Some(n) = map.get("interruptible") {
            rule.interruptible = r.boolean(n, "interruptible");
            ok &= rule.interruptible.is_some();
        }
        for key in ["start_in", "auto_cancel"] {
            if let Some((k, _)) = map.entry(key) {
                r.warn(
                    &k.at,
                    format!("rules {key} is not supported by local runs; ignored"),
                );
            }
        }
        rules.push(rule);
    }
    ok.then_some(rules)
}

/// What rules and policies are evaluated against.
pub(crate) struct Context<'a> {
    /// The variables in scope, expanded.
    pub variables: &'a HashMap<String, String>,
    /// The project, for `exists`.
    pub project: &'a Project,
    /// The files changed by the pipeline's push; `None` when unknown.
    pub changed_files: Option<&'a [String]>,
}

impl Context<'_> {
    fn lookup(&self) -> impl Fn(&str) -> Option<String> + '_ {
        |name| self.variables.get(name).cloned()
    }

    /// Whether any changed file matches the clause.
    fn changed(&self, clause: &PathClause, diag: &mut Diagnostics) -> bool {
        diag.changes_evaluated = true;
        // With `compare_to`, GitLab counts the files changed since the merge base of that ref
        // and the pipeline's commit (`Ci::Pipeline#modified_paths_since`,
        // app/models/ci/pipeline.rb; the ref's variables expanded, as in
        // lib/gitlab/ci/build/rules/rule/clause/changes.rb). Locally, when git knows the ref,
        // the same is asked of git, the working tree's changes included.
        let since = clause.compare_to.as_ref().map(|(written, at)| {
            let reference = expand(written, &self.lookup(), false);
            match self.project.changed_since(&reference) {
                Some(files) => Some(files),
                None => {
                    diag.warn(
                        at,
                        format!("compare_to `{reference}` is not a commit of the local repository; changes is treated as true"),
                    );
                    None
                }
            }
        });
        let changed: &[String] = match (&since, self.changed_files) {
            (Some(Some(files)), _) => files,
            (Some(None), _) => return true,
            (None, Some(files)) => files,
            (None, None) => {
                diag.warn(
                    &clause.at,
                    "changes cannot be known for a local run and is treated as true (as GitLab does for a new branch)",
                );
                return true;
            }
        };
        clause.paths.iter().any(|pattern| {
            let pattern = expand(pattern, &self.lookup(), false);
            match glob_matcher(&pattern) {
                Some(m) => changed.iter().any(|f| m.is_match(f)),
                None => changed.contains(&pattern),
            }
        })
    }

    /// Whether any project file matches the clause.
    fn exists(&self, clause: &PathClause) -> bool {
        clause.paths.iter().any(|pattern| {
            let pattern = expand(pattern, &self.lookup(), false);
            if pattern.contains(['*', '?', '[', '{']) {
                !self.project.glob(&pattern).is_empty()
            } else {
                self.project
                    .is_file(pattern.trim_start_matches("./").trim_start_matches('/'))
            }
        })
    }

    /// Whether an expression holds; one that cannot be evaluated does not, with a warning.
    fn holds(&self, expression: &Expression, at: &Location, diag: &mut Diagnostics) -> bool {
        match expression.evaluate(self.variables) {
            Ok(holds) => holds,
            Err(why) => {
                // A literal pattern flotilla cannot run was named when the file was read.
                if expression.unsupported_patterns().is_empty() {
                    diag.warn(
                        at,
                        format!("`{expression}` cannot be evaluated ({why}); it is false here"),
                    );
                }
                false
            }
        }
    }

    /// Whether all clauses of `rule` hold.
    pub(crate) fn rule_matches(&self, rule: &Rule, diag: &mut Diagnostics) -> bool {
        if let Some((expression, at)) = &rule.condition
            && !self.holds(expression, at, diag)
        {
            return false;
        }
        if let Some(clause) = &rule.exists
            && !self.exists(clause)
        {
            return false;
        }
        if let Some(clause) = &rule.changes
            && !self.changed(clause, diag)
        {
            return false;
        }
        true
    }

    /// The first rule that matches.
    pub(crate) fn first_match<'r>(
        &self,
        rules: &'r [Rule],
        diag: &mut Diagnostics,
    ) -> Option<&'r Rule> {
        rules.iter().find(|rule| self.rule_matches(rule, diag))
    }
}

/// A ref pattern of `only`/`except`, split as `Policy::Refs#satisfied_by?` splits it
/// (`lib/gitlab/ci/build/policy/refs.rb`): `pattern@project/path` at the first `@`.
#[derive(Clone, Debug)]
struct RefPattern {
    /// The part before the first `@`: a keyword, a ref name or `/regex/flags`.
    pattern: String,
    /// The project path after the `@`, when there is one.
    project: Option<String>,
    /// When `pattern` is an RE2 pattern (`RubySyntax.fabricate` succeeds): the regex, or why
    /// flotilla cannot run it.
    regex: Option<Result<Regex, String>>,
}

impl RefPattern {
    fn keyword(name: &str) -> Self {
        RefPattern {
            pattern: name.to_string(),
            project: None,
            regex: None,
        }
    }
}

/// One `only` or `except`.
#[derive(Clone, Debug)]
pub(crate) struct Policy {
    /// Where it is.
    pub at: Location,
    refs: Option<Vec<RefPattern>>,
    variables: Option<Vec<Expression>>,
    changes: Option<PathClause>,
    kubernetes: bool,
}

impl Policy {
    /// GitLab's default `only`: `[branches, tags]`.
    pub(crate) fn default_only(at: &Location) -> Self {
        Policy {
            at: at.clone(),
            refs: Some(vec![
                RefPattern::keyword("branches"),
                RefPattern::keyword("tags"),
            ]),
            variables: None,
            changes: None,
            kubernetes: false,
        }
    }
}

/// `RubySyntax.matches_syntax?`: the whole text is `/…/flags`.
fn regex_syntax(text: &str) -> Option<(&str, &str)> {
    let rest = text.strip_prefix('/')?;
    let close = rest.rfind('/')?;
    let flags = &rest[close + 1..];
    flags
        .chars()
        .all(|c| "ismU".contains(c))
        .then(|| (&rest[..close], flags))
}

/// Read the refs of `only`/`except`. Each entry that looks like `/…/flags` must be valid RE2
/// (`ArrayOfStringsOrRegexpsValidator`, `lib/gitlab/config/entry/validators.rb`).
fn read_refs(reader: &mut Reader<'_>, node: &Node) -> Option<Vec<RefPattern>> {
    let items = reader.strings(node, "refs")?;
    let mut out = Vec::new();
    for item in items {
        if let Some((body, flags)) = regex_syntax(&item) {
            match re2::compile(body, flags) {
                Err(Re2Error::Invalid(message)) => {
                    reader.diag.error(CiError::BadRegex {
                        location: node.at.clone(),
                        pattern: item.clone(),
                        message: format!(
                            "{message} (refs should be strings or regular expressions using RE2 syntax)"
                        ),
                    });
                    return None;
                }
                Err(Re2Error::Unsupported(why)) => reader.warn(
                    &node.at,
                    format!("ref pattern {item} is valid RE2 that flotilla cannot run ({why}); it never matches"),
                ),
                Ok(_) => {}
            }
        }
        let (pattern, project) = match item.split_once('@') {
            Some((p, path)) => (p.to_string(), Some(path.to_string())),
            None => (item.clone(), None),
        };
        let regex =
            regex_syntax(&pattern).and_then(|(body, flags)| match re2::compile(body, flags) {
                Ok(r) => Some(Ok(r)),
                Err(Re2Error::Unsupported(why)) => Some(Err(why)),
                // `fabricate` returns nil: the pattern is compared as a ref name.
                Err(Re2Error::Invalid(_)) => None,
            });
        out.push(RefPattern {
            pattern,
            project,
            regex,
        });
    }
    Some(out)
}

/// Read `only:` or `except:` (an array of refs, or `{refs, variables, changes, kubernetes}`).
pub(crate) fn read_policy(reader: &mut Reader<'_>, node: &Node, key: &str) -> Option<Policy> {
    let mut policy = Policy {
        at: node.at.clone(),
        refs: None,
        variables: None,
        changes: None,
        kubernetes: false,
    };
    match &node.value {
        Value::Seq(_) => policy.refs = Some(read_refs(reader, node)?),
        Value::Map(map) => {
            let mut r = reader.nested(key);
            if !r.check_keys(map, &["refs", "variables", "changes", "kubernetes"]) {
                return None;
            }
            if let Some(n) = map.get("refs") {
                policy.refs = Some(read_refs(&mut r, n)?);
            }
            if let Some(n) = map.get("variables") {
                let texts = r.strings(n, "variables")?;
                let mut expressions = Vec::new();
                for text in texts {
                    expressions.push(parse_expression(&text, &n.at, r.diag)?);
                }
                policy.variables = Some(expressions);
            }
            if let Some(n) = map.get("changes") {
                policy.changes = Some(read_paths(&mut r, n, "changes", &["compare_to"])?);
            }
            if let Some(n) = map.get("kubernetes") {
                if n.as_str() != Some("active") {
                    r.wrong(n, "kubernetes", "`active`");
                    return None;
                }
                r.warn(
                    &n.at,
                    "kubernetes: active cannot be known by a local run; treated as true",
                );
                policy.kubernetes = true;
            }
        }
        _ => {
            reader.wrong(node, key, "an array of refs or a hash");
            return None;
        }
    }
    Some(policy)
}

impl Context<'_> {
    fn var(&self, name: &str) -> Option<&str> {
        self.variables
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// Whether a ref pattern matches this pipeline (`Policy::Refs#matches_pattern?`).
    fn ref_matches(&self, pattern: &RefPattern) -> bool {
        if let Some(path) = &pattern.project
            && self.var("CI_PROJECT_PATH") != Some(path.as_str())
        {
            return false;
        }
        let source = self.var("CI_PIPELINE_SOURCE").unwrap_or("push");
        let tag = self.var("CI_COMMIT_TAG").is_some();
        let merge_request = source == "merge_request_event";
        let branch = !tag && !merge_request;
        let git_ref = self.var("CI_COMMIT_REF_NAME").unwrap_or("");
        let name = pattern.pattern.as_str();
        if (name == "tags" && tag) || (name == "branches" && branch) {
            return true;
        }
        // The source's name, or its plural (`push` -> `pushes`, `schedule` -> `schedules`,
        // `merge_request_event` -> `merge_requests`).
        let sanitized = source.strip_suffix("_event").unwrap_or(source);
        let plural = if sanitized.ends_with(['s', 'h', 'x']) {
            format!("{sanitized}es")
        } else {
            format!("{sanitized}s")
        };
        if name == sanitized || name == plural {
            return true;
        }
        // Patterns and names match only branch and tag pipelines.
        if !(branch || tag) {
            return false;
        }
        match &pattern.regex {
            // `UntrustedRegexp#match?` is false for an empty text.
            Some(Ok(regex)) => !git_ref.is_empty() && regex.is_match(git_ref),
            Some(Err(_)) => false,
            None => name == git_ref,
        }
    }

    /// For each filter the policy defines, whether it is satisfied.
    fn policy_results(&self, policy: &Policy, diag: &mut Diagnostics) -> Vec<bool> {
        let mut results = Vec::new();
        if let Some(refs) = &policy.refs {
            results.push(refs.iter().any(|p| self.ref_matches(p)));
        }
        if let Some(expressions) = &policy.variables {
            results.push(expressions.iter().any(|e| self.holds(e, &policy.at, diag)));
        }
        if let Some(clause) = &policy.changes {
            results.push(self.changed(clause, diag));
        }
        if policy.kubernetes {
            results.push(true);
        }
        results
    }

    /// `only`: every filter it defines must be satisfied.
    pub(crate) fn only_allows(&self, policy: &Policy, diag: &mut Diagnostics) -> bool {
        self.policy_results(policy, diag).into_iter().all(|r| r)
    }

    /// `except`: the job is out if any filter it defines is satisfied.
    pub(crate) fn except_excludes(&self, policy: &Policy, diag: &mut Diagnostics) -> bool {
        self.policy_results(policy, diag).into_iter().any(|r| r)
    }
}
