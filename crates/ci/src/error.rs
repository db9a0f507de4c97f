//! What can be wrong with a pipeline definition, and where.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Serialize, Serializer};

/// A position in a pipeline file: the file (relative to the project root), a 1-based line and a
/// 1-based column.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    /// The file, relative to the project root (`.gitlab-ci.yml`, `ci/build.yml`).
    pub file: Arc<str>,
    /// The line, counted from 1.
    pub line: usize,
    /// The column, counted from 1.
    pub column: usize,
}

impl Location {
    /// A location in `file` at `line`:`column` (both 1-based).
    pub fn new(file: impl Into<Arc<str>>, line: usize, column: usize) -> Self {
        Self {
            file: file.into(),
            line,
            column,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

impl Serialize for Location {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Something in the pipeline definition that flotilla accepted but does not honour (an
/// unsupported keyword, a deprecated form, a GitLab-server feature a local run cannot have).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Warning {
    /// Where the keyword is, when it comes from a file.
    pub location: Option<Location>,
    /// What was accepted and what flotilla does with it.
    pub message: String,
}

impl Warning {
    /// A warning at `location`.
    pub fn at(location: &Location, message: impl Into<String>) -> Self {
        Self {
            location: Some(location.clone()),
            message: message.into(),
        }
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Some(location) => write!(f, "{location}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

impl Serialize for Warning {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Why a pipeline definition could not be compiled. Every variant but [`CiError::Read`] and
/// [`CiError::Many`] names the file, line and column of the offending text.
#[derive(Debug, thiserror::Error)]
pub enum CiError {
    /// A pipeline file could not be read.
    #[error("{}: cannot read the file: {source}", file.display())]
    Read {
        /// The file that could not be read.
        file: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The file is not valid YAML.
    #[error("{location}: YAML syntax error: {message}")]
    Syntax {
        /// Where the parser stopped.
        location: Location,
        /// What the parser expected.
        message: String,
    },
    /// An `include` entry is wrong: a missing file, a cycle, a bad form.
    #[error("{location}: include: {message}")]
    Include {
        /// The include entry.
        location: Location,
        /// What is wrong with it.
        message: String,
    },
    /// A job names a stage that `stages` does not list.
    #[error(
        "{location}: jobs:{job} chosen stage `{stage}` does not exist; available stages are {available}"
    )]
    UnknownStage {
        /// The `stage:` value.
        location: Location,
        /// The job.
        job: String,
        /// The stage it asked for.
        stage: String,
        /// The stages that exist, comma-separated.
        available: String,
    },
    /// A job `needs` a job that is not in the pipeline.
    #[error("{location}: jobs:{job} needs `{need}`, {reason}")]
    MissingNeed {
        /// The `needs` entry.
        location: Location,
        /// The job with the need.
        job: String,
        /// The job it needs.
        need: String,
        /// Why it is missing (not defined, excluded by rules, in a later stage).
        reason: String,
    },
    /// The `needs` of some jobs form a cycle.
    #[error("{location}: a cycle in `needs`: {cycle}")]
    NeedsCycle {
        /// A `needs` entry on the cycle.
        location: Location,
        /// The jobs on the cycle, `a -> b -> a`.
        cycle: String,
    },
    /// A job lists a dependency that is not in an earlier stage.
    #[error("{location}: jobs:{job} dependency `{dependency}` {reason}")]
    MissingDependency {
        /// The `dependencies` entry.
        location: Location,
        /// The job.
        job: String,
        /// The job it depends on.
        dependency: String,
        /// Why it cannot be a dependency.
        reason: String,
    },
    /// `extends` names a template (job or hidden job) that does not exist.
    #[error("{location}: jobs:{job} extends `{parent}`, which is not defined")]
    MissingExtends {
        /// The `extends` value.
        location: Location,
        /// The job.
        job: String,
        /// The missing template.
        parent: String,
    },
    /// `extends` chains loop back on themselves, or nest deeper than GitLab allows.
    #[error("{location}: jobs:{job} {message}")]
    ExtendsCycle {
        /// The `extends` value where the loop closes.
        location: Location,
        /// The job.
        job: String,
        /// The chain, or the depth exceeded.
        message: String,
    },
    /// A script keyword holds something other than a string or a (nested) list of strings.
    #[error(
        "{location}: jobs:{job} {key} config should be a string or a nested array of strings up to 10 levels deep, found {found}"
    )]
    BadScript {
        /// The offending value.
        location: Location,
        /// The job (or `default`).
        job: String,
        /// `script`, `before_script` or `after_script`.
        key: String,
        /// What it holds instead.
        found: String,
    },
    /// A job has no `script` (and no `trigger`).
    #[error("{location}: jobs:{job} config should implement the script: or trigger: keyword")]
    MissingScript {
        /// The job's name.
        location: Location,
        /// The job.
        job: String,
    },
    /// A `when` value is not one GitLab knows in that place.
    #[error("{location}: {context} when is unknown value: `{value}`; allowed: {allowed}")]
    BadWhen {
        /// The value.
        location: Location,
        /// Which `when` (job, rule, artifacts, cache, ...).
        context: String,
        /// What was written.
        value: String,
        /// What is allowed there.
        allowed: String,
    },
    /// A regular expression (in `rules:if`, `only`/`except`) does not compile.
    #[error("{location}: invalid regular expression `{pattern}`: {message}")]
    BadRegex {
        /// The expression or ref pattern.
        location: Location,
        /// The pattern as written.
        pattern: String,
        /// What the regex engine said.
        message: String,
    },
    /// A `rules:if` (or `only:variables`) expression does not parse.
    #[error("{location}: invalid expression syntax `{expression}`: {message}")]
    BadExpression {
        /// The expression.
        location: Location,
        /// The expression as written.
        expression: String,
        /// What is wrong with it.
        message: String,
    },
    /// A `!reference` tag points at a key that does not exist.
    #[error("{location}: !reference {path}: {message}")]
    MissingReference {
        /// The `!reference` tag.
        location: Location,
        /// The path, `[job, key, ...]`.
        path: String,
        /// Which part is missing or why it cannot be followed.
        message: String,
    },
    /// A job (or `default`, an entry) holds keys GitLab does not know.
    #[error("{location}: {context} config contains unknown keys: {keys}")]
    UnknownKeys {
        /// The first unknown key.
        location: Location,
        /// `jobs:name`, `default`, `jobs:name:artifacts`, ...
        context: String,
        /// The unknown keys, comma-separated.
        keys: String,
    },
    /// A value has the wrong type or shape (`timeout` that does not parse, `retry: 5`, ...).
    #[error("{location}: {message}")]
    Invalid {
        /// The value.
        location: Location,
        /// What is wrong, in GitLab's words where it has some.
        message: String,
    },
    /// A job or stage asked for by name is not in the pipeline.
    #[error("{message}")]
    Selection {
        /// What was asked for and what exists.
        message: String,
    },
    /// An error that may be caused by an include a local run skips (remote, project, template,
    /// component): the job or template it misses may be defined there.
    #[error("{error} (this may come from an include that local runs skip: {includes})")]
    FromSkippedInclude {
        /// The error as found.
        error: Box<CiError>,
        /// The skipped includes, with their positions.
        includes: String,
    },
    /// The configuration is larger than a compile may build ([`crate::budget`]'s limits).
    #[error("{location}: {message}")]
    TooBig {
        /// Where the limit was passed.
        location: Location,
        /// Which limit.
        message: String,
    },
    /// Several of the above, in file order.
    #[error("{} errors in the pipeline:\n{}", errors.len(), errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Many {
        /// The errors.
        errors: Vec<CiError>,
    },
}

impl CiError {
    /// Where the error is, when it is in a file.
    pub fn location(&self) -> Option<&Location> {
        match self {
            CiError::Read { .. } | CiError::Selection { .. } | CiError::Many { .. } => None,
            CiError::FromSkippedInclude { error, .. } => error.location(),
            CiError::Syntax { location, .. }
            | CiError::TooBig { location, .. }
            | CiError::Include { location, .. }
            | CiError::UnknownStage { location, .. }
            | CiError::MissingNeed { location, .. }
            | CiError::NeedsCycle { location, .. }
            | CiError::MissingDependency { location, .. }
            | CiError::MissingExtends { location, .. }
            | CiError::ExtendsCycle { location, .. }
            | CiError::BadScript { location, .. }
            | CiError::MissingScript { location, .. }
            | CiError::BadWhen { location, .. }
            | CiError::BadRegex { location, .. }
            | CiError::BadExpression { location, .. }
            | CiError::MissingReference { location, .. }
            | CiError::UnknownKeys { location, .. }
            | CiError::Invalid { location, .. } => Some(location),
        }
    }

    /// The single errors this error stands for (itself, or the members of [`CiError::Many`]).
    pub fn errors(&self) -> Vec<&CiError> {
        match self {
            CiError::Many { errors } => errors.iter().flat_map(CiError::errors).collect(),
            other => vec![other],
        }
    }

    /// A generic "this value is wrong" error.
    pub(crate) fn invalid(location: &Location, message: impl Into<String>) -> Self {
        CiError::Invalid {
            location: location.clone(),
            message: message.into(),
        }
    }

    /// One error from many: none is not allowed, one stays itself, more become [`CiError::Many`]
    /// sorted by location.
    pub(crate) fn from_list(mut errors: Vec<CiError>) -> Option<CiError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => {
                errors.sort_by(|a, b| a.location().cmp(&b.location()));
                Some(CiError::Many { errors })
            }
        }
    }
}

/// A pipeline that cannot be compiled: the errors, and the warnings found before them (which
/// often explain them, like an include that was skipped).
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct CompileError {
    /// What is wrong (one error, or [`CiError::Many`]).
    pub error: Box<CiError>,
    /// The warnings collected until the compilation stopped, in file order.
    pub warnings: Vec<Warning>,
}

impl CompileError {
    /// The single errors (see [`CiError::errors`]).
    pub fn errors(&self) -> Vec<&CiError> {
        self.error.errors()
    }
}

/// Errors collected while compiling, so that one run reports as many problems as it can.
#[derive(Debug, Default)]
pub(crate) struct Diagnostics {
    /// What the compile has built so far, against its limit.
    pub budget: super::budget::Budget,
    /// Errors found so far.
    pub errors: Vec<CiError>,
    /// Warnings found so far.
    pub warnings: Vec<Warning>,
    /// Notes: what a local run decided, said (not a problem).
    pub notes: Vec<Warning>,
    /// Whether a `changes` clause was evaluated.
    pub changes_evaluated: bool,
    /// Jobs whose definition may miss what a skipped include holds, each with what was
    /// missing (`extends .x`, `needs y`).
    pub incomplete: std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    /// Warnings about a job's keyword, by position and text, with the jobs they were found in:
    /// jobs sharing a template share its warnings, which are reported once.
    pub by_jobs: std::collections::BTreeMap<(Location, String), Vec<String>>,
    /// The warnings recorded so far, to keep each once.
    seen: std::collections::HashSet<Warning>,
}

impl Diagnostics {
    /// Spends `bytes` of the budget for what is built at `at`; false when it is spent (the
    /// error is recorded once).
    pub(crate) fn charge(&mut self, bytes: usize, at: &Location) -> bool {
        let reported = self.budget.is_exhausted();
        match self.budget.charge(bytes, at) {
            Ok(()) => true,
            Err(error) => {
                if !reported {
                    self.errors.push(error);
                }
                false
            }
        }
    }

    /// Record an error.
    pub(crate) fn error(&mut self, error: CiError) {
        self.errors.push(error);
    }

    /// Record a warning at `location`.
    pub(crate) fn warn(&mut self, location: &Location, message: impl Into<String>) {
        let warning = Warning::at(location, message);
        if self.seen.insert(warning.clone()) {
            self.warnings.push(warning);
        }
    }

    /// Record a warning about what `context` (`jobs:build`, `jobs:build:artifacts`) holds at
    /// `location`; the same warning at the same place for several jobs is reported once.
    pub(crate) fn warn_in(
        &mut self,
        context: &str,
        location: &Location,
        message: impl Into<String>,
    ) {
        let contexts = self
            .by_jobs
            .entry((location.clone(), message.into()))
            .or_default();
        if !contexts.iter().any(|c| c == context) {
            contexts.push(context.to_string());
        }
    }

    /// Record that `job` may miss a definition from an include local runs skip: `what` says
    /// which, briefly (`extends `.x``), `message` what is missing and what the compiler did
    /// about it. The warning is one line for every job with the same gap at the same place.
    pub(crate) fn incomplete(&mut self, job: &str, at: &Location, what: &str, message: &str) {
        self.warn_in(&format!("jobs:{job}"), at, message);
        self.incomplete
            .entry(job.to_string())
            .or_default()
            .insert(what.to_string());
    }

    /// Record a note at `location`: a decision a local run made that its user may want to
    /// know.
    pub(crate) fn note(&mut self, location: &Location, message: impl Into<String>) {
        let note = Warning::at(location, message);
        if !self.notes.contains(&note) {
            self.notes.push(note);
        }
    }

    /// Record a warning with no position.
    pub(crate) fn warn_global(&mut self, message: impl Into<String>) {
        let warning = Warning {
            location: None,
            message: message.into(),
        };
        if !self.warnings.contains(&warning) {
            self.warnings.push(warning);
        }
    }

    /// The warnings in file order (those without a position last), taken out.
    pub(crate) fn sorted_warnings(&mut self) -> Vec<Warning> {
        let mut warnings = std::mem::take(&mut self.warnings);
        for ((location, message), contexts) in std::mem::take(&mut self.by_jobs) {
            let who = match contexts.len() {
                1 => contexts[0].clone(),
                n if n <= 3 => contexts.join(", "),
                n => format!("{} and {} more", contexts[..2].join(", "), n - 2),
            };
            let warning = Warning::at(&location, format!("{who} {message}"));
            if !warnings.contains(&warning) {
                warnings.push(warning);
            }
        }
        warnings.sort_by(|a, b| match (&a.location, &b.location) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        });
        warnings
    }

    /// Turn the errors collected so far into a result (the same error reported twice, through
    /// two paths, counts once).
    pub(crate) fn check(&mut self) -> Result<(), CiError> {
        let mut seen = std::collections::HashSet::new();
        let errors: Vec<CiError> = std::mem::take(&mut self.errors)
            .into_iter()
            .filter(|e| seen.insert(e.to_string()))
            .collect();
        match CiError::from_list(errors) {
            None => Ok(()),
            Some(error) => Err(error),
        }
    }
}
