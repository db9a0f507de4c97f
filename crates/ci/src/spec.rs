//! Reading the top level (`stages`, `variables`, `default`, `workflow`) and each job's keywords
//! into checked, typed specifications. Nothing here depends on the pipeline's variables; that
//! comes later, when rules are evaluated.

use super::artifacts::{Artifacts, read_artifacts};
use super::budget::deep_size;
use super::cache::{CacheSpec, read_cache};
use super::duration::parse_duration;
use super::error::{CiError, Diagnostics, Location};
use super::image::{Image, Service, read_image, read_services};
use super::interpolation::interpolate_matrix;
use super::job::{
    AllowFailure, Environment, Retry, When, read_allow_failure, read_environment, read_retry,
    read_when,
};
use super::needs::{NeedSpec, read_dependencies, read_needs};
use super::parallel::{ParallelSpec, instances, read_parallel};
use super::reader::Reader;
use super::rules::{Policy, Rule, RulesKind, read_policy, read_rules};
use super::script::flatten;
use super::variables::{Variable, VariableSource, read_variables};
use super::yaml::{Mapping, Node, Value};

/// Top-level keys that are not jobs.
pub(crate) const RESERVED: &[&str] = &[
    "default",
    "include",
    "stages",
    "types",
    "variables",
    "workflow",
    "image",
    "services",
    "cache",
    "before_script",
    "after_script",
    "spec",
];

/// Every key GitLab accepts in a job.
const JOB_KEYS: &[&str] = &[
    "after_script",
    "allow_failure",
    "artifacts",
    "before_script",
    "cache",
    "coverage",
    "dast_configuration",
    "dependencies",
    "environment",
    "except",
    "extends",
    "hooks",
    "id_tokens",
    "identity",
    "image",
    "inherit",
    "interruptible",
    "manual_confirmation",
    "needs",
    "only",
    "pages",
    "parallel",
    "publish",
    "release",
    "resource_group",
    "retry",
    "rules",
    "run",
    "script",
    "secrets",
    "services",
    "stage",
    "start_in",
    "tags",
    "timeout",
    "trigger",
    "type",
    "variables",
    "when",
];

/// Keys GitLab accepts in `default:`.
const DEFAULT_KEYS: &[&str] = &[
    "after_script",
    "artifacts",
    "before_script",
    "cache",
    "hooks",
    "id_tokens",
    "image",
    "interruptible",
    "retry",
    "services",
    "tags",
    "timeout",
];

/// Job keys flotilla accepts but does not honour, and what it says about each.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "coverage",
        "coverage is not extracted from the log by local runs; ignored",
    ),
    (
        "dast_configuration",
        "dast_configuration is a GitLab Ultimate feature; ignored",
    ),
    (
        "id_tokens",
        "id_tokens cannot be issued by a local run; the job gets no ID tokens",
    ),
    (
        "identity",
        "identity federation is not available to local runs; ignored",
    ),
    (
        "manual_confirmation",
        "manual_confirmation is not shown by local runs; ignored",
    ),
    (
        "pages",
        "pages: GitLab Pages are not deployed by local runs; the job runs as a normal job",
    ),
    (
        "publish",
        "publish (GitLab Pages) is not deployed by local runs; ignored",
    ),
    ("release", "release is not created by local runs; ignored"),
    (
        "secrets",
        "secrets from external providers are not fetched by local runs; the job runs without them",
    ),
    (
        "run",
        "run (CI/CD steps) is not supported by local runs; ignored",
    ),
    (
        "start_in",
        "start_in is not supported by local runs; a delayed job runs at once",
    ),
];

/// How a job inherits `default:` or global variables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Inherit {
    /// Everything (the default).
    All,
    /// Nothing.
    Nothing,
    /// Only the listed keys.
    Only(Vec<String>),
}

impl Inherit {
    /// Whether `key` is inherited.
    pub(crate) fn allows(&self, key: &str) -> bool {
        match self {
            Inherit::All => true,
            Inherit::Nothing => false,
            Inherit::Only(keys) => keys.iter().any(|k| k == key),
        }
    }
}

/// The keywords that `default:` can set and a job can override.
#[derive(Clone, Debug, Default)]
pub(crate) struct Defaultable {
    pub image: Option<Image>,
    pub services: Option<Vec<Service>>,
    pub before_script: Option<Vec<String>>,
    pub after_script: Option<Vec<String>>,
    /// `hooks:pre_get_sources_script`.
    pub pre_get_sources_script: Option<Vec<String>>,
    pub cache: Option<Vec<CacheSpec>>,
    pub artifacts: Option<Artifacts>,
    pub retry: Option<Retry>,
    pub timeout: Option<u64>,
    pub interruptible: Option<bool>,
    pub tags: Option<Vec<String>>,
}

impl Defaultable {
    /// Read the defaultable keys present in `map`.
    fn read(reader: &mut Reader<'_>, map: &Mapping, job: &str) -> Defaultable {
        let mut out = Defaultable::default();
        if let Some(n) = map.get("image") {
            out.image = read_image(reader, n);
        }
        if let Some(n) = map.get("services") {
            out.services = read_services(reader, n);
        }
        for (key, slot) in [
            ("before_script", &mut out.before_script),
            ("after_script", &mut out.after_script),
        ] {
            if let Some(n) = map.get(key) {
                match flatten(n, job, key) {
                    Ok(lines) => *slot = Some(lines),
                    Err(e) => reader.diag.error(e),
                }
            }
        }
        if let Some(n) = map.get("hooks") {
            out.pre_get_sources_script = read_hooks(reader, n, job);
        }
        if let Some(n) = map.get("cache") {
            out.cache = read_cache(reader, n);
        }
        if let Some(n) = map.get("artifacts") {
            out.artifacts = read_artifacts(reader, n);
        }
        if let Some(n) = map.get("retry") {
            out.retry = read_retry(reader, n);
        }
        if let Some(n) = map.get("timeout") {
            out.timeout = read_timeout(reader, n);
        }
        if let Some(n) = map.get("interruptible") {
            out.interruptible = reader.boolean(n, "interruptible");
        }
        if let Some(n) = map.get("tags") {
            out.tags = reader.strings(n, "tags");
        }
        out
    }

    /// Fill what is unset from `defaults`, for the keys `inherit` allows.
    pub(crate) fn inherit(&mut self, defaults: &Defaultable, inherit: &Inherit) {
        fn take<T: Clone>(slot: &mut Option<T>, from: &Option<T>, allowed: bool) {
            if slot.is_none() && allowed {
                slot.clone_from(from);
            }
        }
        take(&mut self.image, &defaults.image, inherit.allows("image"));
        take(
            &mut self.services,
            &defaults.services,
            inherit.allows("services"),
        );
        take(
            &mut self.before_script,
            &defaults.before_script,
            inherit.allows("before_script"),
        );
        take(
            &mut self.after_script,
            &defaults.after_script,
            inherit.allows("after_script"),
        );
        take(
            &mut self.pre_get_sources_script,
            &defaults.pre_get_sources_script,
            inherit.allows("hooks"),
        );
        take(&mut self.cache, &defaults.cache, inherit.allows("cache"));
        take(
            &mut self.artifacts,
            &defaults.artifacts,
            inherit.allows("artifacts"),
        );
        take(&mut self.retry, &defaults.retry, inherit.allows("retry"));
        take(
            &mut self.timeout,
            &defaults.timeout,
            inherit.allows("timeout"),
        );
        take(
            &mut self.interruptible,
            &defaults.interruptible,
            inherit.allows("interruptible"),
        );
        take(&mut self.tags, &defaults.tags, inherit.allows("tags"));
    }
}

/// `hooks:`: a hash whose only key is `pre_get_sources_script`, a script
/// (`lib/gitlab/ci/config/entry/hooks.rb`, `ALLOWED_HOOKS`).
fn read_hooks(reader: &mut Reader<'_>, node: &Node, job: &str) -> Option<Vec<String>> {
    let map = reader.map(node, "hooks")?;
    reader.check_keys(map, &["pre_get_sources_script"]);
    // A keyword with no value is unspecified (GitLab's entry factory; `allow_nil`).
    let map = &map.without_nulls();
    let script = map.get("pre_get_sources_script")?;
    match flatten(script, job, "hooks:pre_get_sources_script") {
        Ok(lines) => Some(lines),
        Err(e) => {
            reader.diag.error(e);
            None
        }
    }
}

fn read_timeout(reader: &mut Reader<'_>, node: &Node) -> Option<u64> {
    let text = reader.string(node, "timeout")?;
    let seconds = parse_duration(&text);
    if seconds.is_none() {
        reader.fail(
            &node.at,
            format!("timeout config should be a duration (`1h 30m`, `90 minutes`), found `{text}`"),
        );
    }
    seconds
}

/// `workflow:`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Workflow {
    /// `workflow:rules`, when present.
    pub rules: Option<Vec<Rule>>,
    /// `workflow:name`, unexpanded.
    pub name: Option<String>,
}

/// The top level of the configuration.
#[derive(Clone, Debug)]
pub(crate) struct Globals {
    /// Stages, with `.pre` first and `.post` last.
    pub stages: Vec<String>,
    /// Global `variables:`.
    pub variables: Vec<Variable>,
    /// `default:` (and the deprecated top-level `image`, `services`, ... under it).
    pub defaults: Defaultable,
    /// `workflow:`.
    pub workflow: Workflow,
}

/// Read the top level.
pub(crate) fn read_globals(config: &Mapping, diag: &mut Diagnostics) -> Globals {
    let present = config.without_nulls();
    let config = &present;
    let mut stages: Vec<String> = vec!["build".into(), "test".into(), "deploy".into()];
    let stages_entry = config.entry("stages").or_else(|| config.entry("types"));
    if let Some((key, node)) = stages_entry {
        let mut reader = Reader::new(diag, "root");
        if key.name == "types" {
            reader.warn(&key.at, "types is deprecated; use stages");
        }
        if let Some(list) = reader.strings(node, &key.name) {
            stages = Vec::new();
            for stage in list {
                if !stages.contains(&stage) {
                    stages.push(stage);
                }
            }
        }
    }
    stages.retain(|s| s != ".pre" && s != ".post");
    stages.insert(0, ".pre".into());
    stages.push(".post".into());

    let variables = match config.get("variables") {
        Some(n) => read_variables(&mut Reader::new(diag, ""), n, VariableSource::Global)
            .unwrap_or_default(),
        None => Vec::new(),
    };

    let mut defaults = Defaultable::default();
    if let Some(node) = config.get("default") {
        let mut reader = Reader::new(diag, "default");
        if let Some(map) = reader.map(node, "default") {
            reader.check_keys(map, DEFAULT_KEYS);
            let present = map.without_nulls();
            let map = &present;
            if let Some((k, _)) = map.entry("id_tokens") {
                reader.warn(&k.at, "id_tokens is not supported by local runs; ignored");
            }
            defaults = Defaultable::read(&mut reader, map, "default");
        }
    }
    // The deprecated top-level forms apply where `default:` says nothing.
    let mut legacy = Mapping::default();
    for key in [
        "image",
        "services",
        "cache",
        "before_script",
        "after_script",
    ] {
        if let Some((k, v)) = config.entry(key) {
            diag.warn(
                &k.at,
                format!("top-level {key} is deprecated; use default:{key}"),
            );
            legacy.insert(k.clone(), v.clone());
        }
    }
    if !legacy.is_empty() {
        let mut reader = Reader::new(diag, "root");
        let legacy = Defaultable::read(&mut reader, &legacy, "root");
        defaults.inherit(&legacy, &Inherit::All);
    }

    let mut workflow = Workflow::default();
    if let Some(node) = config.get("workflow") {
        let mut reader = Reader::new(diag, "workflow");
        if let Some(map) = reader.map(node, "workflow") {
            reader.check_keys(map, &["rules", "name", "auto_cancel"]);
            let present = map.without_nulls();
            let map = &present;
            if let Some(n) = map.get("rules") {
                workflow.rules = read_rules(&mut reader, n, RulesKind::Workflow);
            }
            if let Some(n) = map.get("name") {
                workflow.name = reader.string(n, "name");
            }
            if let Some((k, _)) = map.entry("auto_cancel") {
                reader.warn(&k.at, "auto_cancel does not apply to local runs; ignored");
            }
        }
    }

    Globals {
        stages,
        variables,
        defaults,
        workflow,
    }
}

/// A job as written, checked and typed.
#[derive(Clone, Debug)]
pub(crate) struct JobSpec {
    pub name: String,
    pub at: Location,
    pub stage: String,
    pub stage_index: usize,
    pub script: Vec<String>,
    pub keywords: Defaultable,
    pub variables: Vec<Variable>,
    pub inherit_default: Inherit,
    pub inherit_variables: Inherit,
    pub when: Option<When>,
    pub allow_failure: Option<AllowFailure>,
    pub needs: Option<Vec<NeedSpec>>,
    /// For a `parallel: matrix` job whose `needs` hold `$[[ matrix.NAME ]]`: each instance's
    /// own `needs`, in instance order (GitLab's `MatrixInterpolator`).
    pub needs_by_instance: Option<Vec<Option<Vec<NeedSpec>>>>,
    pub dependencies: Option<Vec<(String, Location)>>,
    pub rules: Option<Vec<Rule>>,
    pub only: Option<Policy>,
    pub except: Option<Policy>,
    pub parallel: Option<ParallelSpec>,
    pub environment: Option<Environment>,
    pub resource_group: Option<String>,
    pub trigger: bool,
    /// A job without a script in a pipeline whose includes were skipped: left out.
    pub incomplete: bool,
    /// What each instance of the job costs the compile's budget: its own keywords and its
    /// copy of `default:` and `variables:` ([`crate::budget`]).
    pub cost: usize,
}

fn read_inherit(reader: &mut Reader<'_>, node: &Node, key: &str) -> Option<Inherit> {
    match &node.value {
        Value::Bool(true) => Some(Inherit::All),
        Value::Bool(false) => Some(Inherit::Nothing),
        Value::Seq(_) => reader.strings(node, key).map(Inherit::Only),
        _ => {
            reader.wrong(node, key, "a boolean value or an array of strings");
            None
        }
    }
}

/// Read one visible job. `None` when it has errors (they are in `diag`).
/// When includes were skipped (`skipped` names them), a job without a script is left out with
/// a warning instead of failing the pipeline, and so is a job compiled without a template
/// (`partial`) whose stage does not exist or whose values are invalid without it (the
/// template would have set them), and a job whose stage does not exist when the stages
/// themselves may come from a skipped include (`stages_written` false: the files read here
/// set none).
#[allow(clippy::too_many_arguments)]
pub(crate) fn read_job(
    name: &str,
    key_at: &Location,
    node: &Node,
    stages: &[String],
    stages_written: bool,
    skipped: Option<&str>,
    partial: bool,
    diag: &mut Diagnostics,
) -> Option<JobSpec> {
    let context = format!("jobs:{name}");
    let mut reader = Reader::new(diag, context);
    let Some(map) = node.as_map() else {
        reader.diag.error(CiError::MissingScript {
            location: key_at.clone(),
            job: name.to_string(),
        });
        return None;
    };
    let errors_before = reader.diag.errors.len();
    reader.check_keys(map, JOB_KEYS);
    let errors_after_keys = reader.diag.errors.len();
    // `after_script:`, `dependencies:`, `rules: null`...: a keyword without a value is unspecified.
    let present = map.without_nulls();
    let map = &present;
    for (key, message) in UNSUPPORTED {
        if let Some((k, _)) = map.entry(key) {
            reader
                .diag
                .warn_in(&format!("jobs:{name}"), &k.at, *message);
        }
    }
    if name == "pages" && map.get("pages").is_none() {
        reader.diag.warn(
            key_at,
            "jobs:pages GitLab Pages are not deployed by local runs; the job runs as a normal job",
        );
    }
    let trigger = map.get("trigger").is_some();
    let mut incomplete = false;

    let script = match map.get("script") {
        Some(n) => match flatten(n, name, "script") {
            Ok(lines) => lines,
            Err(e) => {
                reader.diag.error(e);
                Vec::new()
            }
        },
        None => {
            match skipped {
                _ if trigger => {}
                // Most likely the job overrides one defined in the skipped include (`sast:`
                // with its own rules): GitLab would merge them; locally the job cannot run.
                Some(_) => {
                    reader.diag.incomplete(
                        name,
                        key_at,
                        "no script",
                        "has no script: it may add to a job of a skipped include; it is left out",
                    );
                    incomplete = true;
                }
                None => reader.diag.error(CiError::MissingScript {
                    location: key_at.clone(),
                    job: name.to_string(),
                }),
            }
            Vec::new()
        }
    };

    let (stage, stage_at) = match map.entry("stage").or_else(|| map.entry("type")) {
        Some((k, v)) => {
            if k.name == "type" {
                reader.warn(&k.at, "type is deprecated; use stage");
            }
            (reader.string(v, "stage").unwrap_or_default(), v.at.clone())
        }
        None => ("test".to_string(), key_at.clone()),
    };
    let stage_index = stages.iter().position(|s| *s == stage);
    if stage_index.is_none() && incomplete {
        // Left out already (no script); its stage does not matter.
    } else if stage_index.is_none() && partial && skipped.is_some() {
        reader.diag.incomplete(
            name,
            &stage_at,
            &format!("stage `{stage}`"),
            &format!(
                "stage `{stage}` does not exist; a template of a skipped include may set the \
                 stage; the job is left out"
            ),
        );
        incomplete = true;
    } else if stage_index.is_none() && !stages_written && skipped.is_some() {
        reader.diag.incomplete(
            name,
            &stage_at,
            &format!("stage `{stage}`"),
            &format!(
                "stage `{stage}` is not among the default stages, and the files read here set \
                 no `stages:` (a skipped include may); the job is left out"
            ),
        );
        incomplete = true;
    } else if stage_index.is_none() {
        reader.diag.error(CiError::UnknownStage {
            location: stage_at,
            job: name.to_string(),
            stage: stage.clone(),
            available: stages.join(", "),
        });
    }

    let keywords = Defaultable::read(&mut reader, map, name);

    let variables = match map.get("variables") {
        Some(n) => read_variables(&mut reader, n, VariableSource::JobYaml).unwrap_or_default(),
        None => Vec::new(),
    };

    let mut inherit_default = Inherit::All;
    let mut inherit_variables = Inherit::All;
    if let Some(n) = map.get("inherit") {
        let mut r = reader.nested("inherit");
        if let Some(inherit) = r.map(n, "inherit")
            && r.check_keys(inherit, &["default", "variables"])
        {
            if let Some(d) = inherit.get("default")
                && let Some(value) = read_inherit(&mut r, d, "default")
            {
                inherit_default = value;
            }
            if let Some(v) = inherit.get("variables")
                && let Some(value) = read_inherit(&mut r, v, "variables")
            {
                inherit_variables = value;
            }
        }
    }

    let when = map
        .get("when")
        .and_then(|n| read_when(&mut reader, n, false));
    let allow_failure = map
        .get("allow_failure")
        .and_then(|n| read_allow_failure(&mut reader, n));
    let needs = map.get("needs").and_then(|n| read_needs(&mut reader, n));
    let dependencies = map
        .get("dependencies")
        .and_then(|n| read_dependencies(&mut reader, n));
    let rules = map
        .get("rules")
        .and_then(|n| read_rules(&mut reader, n, RulesKind::Job));
    let only = map
        .get("only")
        .and_then(|n| read_policy(&mut reader, n, "only"));
    let except = map
        .get("except")
        .and_then(|n| read_policy(&mut reader, n, "except"));
    if map.get("rules").is_some() {
        let clashing: Vec<_> = ["only", "except"]
            .into_iter()
            .filter_map(|k| map.entry(k))
            .collect();
        if let Some((first, _)) = clashing.first() {
            let keys: Vec<&str> = clashing.iter().map(|(k, _)| k.name.as_str()).collect();
            reader.fail(
                &first.at,
                format!(
                    "config key may not be used with `rules`: {}",
                    keys.join(", ")
                ),
            );
        }
    }
    let parallel = map
        .get("parallel")
        .and_then(|n| read_parallel(&mut reader, n));
    let needs_by_instance = match (map.get("needs"), &parallel) {
        (Some(node), Some(p @ ParallelSpec::Matrix(_)))
            if node.to_json().to_string().contains("$[[") =>
        {
            let mut each = Vec::new();
            for (_, instance) in instances(name, p) {
                let mut errors = Vec::new();
                let interpolated = interpolate_matrix(node, &instance.matrix, &mut errors);
                for error in errors {
                    reader
                        .diag
                        .error(CiError::invalid(&node.at, format!("{name} job: {error}")));
                }
                each.push(read_needs(&mut reader, &interpolated));
            }
            Some(each)
        }
        _ => None,
    };
    let environment = map
        .get("environment")
        .and_then(|n| read_environment(&mut reader, n));
    let resource_group = map.get("resource_group").and_then(|n| {
        let group = reader.string(n, "resource_group");
        reader.warn(
            &n.at,
            "resource_group is kept, but local runs do not serialise jobs on it",
        );
        group
    });
    if let Some((k, _)) = map.entry("trigger") {
        reader.warn(
            &k.at,
            "trigger (downstream pipelines) is not supported by local runs; the job is not run",
        );
    }

    // A job that may miss what a skipped include defines is not judged on values that
    // include may supply: it is left out, said once, instead of failing the pipeline.
    if reader.diag.errors.len() > errors_after_keys
        && errors_after_keys == errors_before
        && skipped.is_some()
        && (incomplete || partial)
    {
        let first = reader.diag.errors[errors_after_keys].to_string();
        reader.diag.errors.truncate(errors_after_keys);
        if !incomplete {
            reader.diag.incomplete(
                name,
                key_at,
                "values a template may set",
                &format!(
                    "is not valid without the template a skipped include may define ({first}); \
                     it is left out"
                ),
            );
            incomplete = true;
        }
    }
    if reader.diag.errors.len() > errors_before {
        return None;
    }
    Some(JobSpec {
        name: name.to_string(),
        at: key_at.clone(),
        stage,
        stage_index: stage_index.unwrap_or_default(),
        script,
        keywords,
        variables,
        inherit_default,
        inherit_variables,
        when,
        allow_failure,
        needs,
        needs_by_instance,
        dependencies,
        rules,
        only,
        except,
        parallel,
        environment,
        resource_group,
        trigger,
        incomplete,
        cost: deep_size(node),
    })
}
