//! A compiled job: everything a runner needs to run one job of the pipeline.

use serde::{Serialize, Serializer};

use super::artifacts::Artifacts;
use super::cache::Cache;
use super::error::{CiError, Location};
use super::image::{Image, Service};
use super::reader::Reader;
use super::variables::Variable;
use super::yaml::{Node, Value};

/// One job of a compiled pipeline (a `parallel` job becomes one of these per instance).
#[derive(Clone, Debug, Serialize)]
pub struct CompiledJob {
    /// The job's name as GitLab shows it (`rspec 2/3`, `build: [aws, monitoring]`).
    pub name: String,
    /// The name in the file, before `parallel` expansion.
    pub base_name: String,
    /// Where the job is defined.
    pub location: Location,
    /// Whether the job's definition may miss something an include local runs skip holds (a
    /// template it extends, a job it needs); the warnings say what.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub incomplete: bool,
    /// The stage.
    pub stage: String,
    /// The stage's position in [`super::Pipeline::stages`].
    pub stage_index: usize,
    /// `needs`, resolved to job names: `None` means the job follows stage order, `Some(empty)`
    /// that it starts at once.
    pub needs: Option<Vec<Need>>,
    /// The jobs whose artifacts this job downloads (from `dependencies`, else the `needs` with
    /// `artifacts: true`, else every job of the earlier stages).
    pub dependencies: Vec<String>,
    /// When the job runs.
    pub when: When,
    /// Whether a failure fails the pipeline.
    pub allow_failure: AllowFailure,
    /// The job's variables in precedence order, each key once: predefined, job-predefined,
    /// global, job, matrix, rule, user. Values as written (see the
    /// [module documentation](super) for what is expanded when).
    pub variables: Vec<Variable>,
    /// `before_script` lines (the job's, or `default:`'s).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub before_script: Vec<String>,
    /// `script` lines.
    pub script: Vec<String>,
    /// `after_script` lines.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after_script: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    /// `hooks:pre_get_sources_script` lines (the job's, or `default:`'s): run before the
    /// sources are fetched.
    pub pre_get_sources_script: Vec<String>,
    /// The image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<Image>,
    /// Services.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<Service>,
    /// Artifacts to upload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Artifacts>,
    /// Caches (GitLab allows up to four).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cache: Vec<Cache>,
    /// Which instance of a `parallel` job this is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<ParallelInstance>,
    /// The job's timeout in seconds, when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// Automatic retries.
    #[serde(skip_serializing_if = "Retry::is_default")]
    pub retry: Retry,
    /// Runner tags.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// The environment (kept; no deployment is recorded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,
    /// Whether a newer pipeline may cancel the job.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    /// The resource group (kept; a local run does not serialise on it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_group: Option<String>,
}

impl CompiledJob {
    /// The value of a variable of this job, as written.
    pub fn variable(&self, key: &str) -> Option<&str> {
        self.variables
            .iter()
            .find(|v| v.key == key)
            .map(|v| v.value.as_str())
    }
}

/// A resolved `needs` entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Need {
    /// The job needed.
    pub job: String,
    /// Whether its artifacts are downloaded.
    pub artifacts: bool,
    /// Whether the need was `optional: true`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// When a job runs, relative to the jobs before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// When everything it waits for succeeded (or was allowed to fail).
    OnSuccess,
    /// When something it waits for failed.
    OnFailure,
    /// Whatever happened before.
    Always,
    /// Only when started by hand.
    Manual,
    /// Not at all (only reachable through `rules`).
    Never,
}

impl When {
    /// GitLab's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            When::OnSuccess => "on_success",
            When::OnFailure => "on_failure",
            When::Always => "always",
            When::Manual => "manual",
            When::Never => "never",
        }
    }
}

/// Read a `when:` value. `delayed` becomes `on_success` with a warning.
pub(crate) fn read_when(reader: &mut Reader<'_>, node: &Node, allow_never: bool) -> Option<When> {
    let Some(text) = node.as_str() else {
        reader.wrong(node, "when", "a string");
        return None;
    };
    let when = match text {
        "on_success" => When::OnSuccess,
        "on_failure" => When::OnFailure,
        "always" => When::Always,
        "manual" => When::Manual,
        "never" if allow_never => When::Never,
        "delayed" => {
            reader.warn(
                &node.at,
                "when: delayed is not supported by local runs; the job runs as on_success without the delay",
            );
            When::OnSuccess
        }
        other => {
            let allowed = if allow_never {
                "on_success, on_failure, always, manual, delayed, never"
            } else {
                "on_success, on_failure, always, manual, delayed"
            };
            reader.diag.error(CiError::BadWhen {
                location: node.at.clone(),
                context: reader.context.clone(),
                value: other.to_string(),
                allowed: allowed.to_string(),
            });
            return None;
        }
    };
    Some(when)
}

/// Whether a failure of the job fails the pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AllowFailure {
    /// A failure fails the pipeline.
    No,
    /// A failure is a warning.
    Yes,
    /// A failure with one of these exit codes is a warning; others fail the pipeline.
    ExitCodes(Vec<i32>),
}

impl AllowFailure {
    /// Whether a failure with `exit_code` (`None` for a failure that is not a script exit) is
    /// allowed.
    pub fn allows(&self, exit_code: Option<i32>) -> bool {
        match self {
            AllowFailure::No => false,
            AllowFailure::Yes => true,
            AllowFailure::ExitCodes(codes) => exit_code.is_some_and(|c| codes.contains(&c)),
        }
    }
}

impl Serialize for AllowFailure {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            AllowFailure::No => serializer.serialize_bool(false),
            AllowFailure::Yes => serializer.serialize_bool(true),
            AllowFailure::ExitCodes(codes) => {
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry("exit_codes", codes)?;
                map.end()
            }
        }
    }
}

/// Read `allow_failure: bool` or `allow_failure: {exit_codes: N | [N...]}`.
pub(crate) fn read_allow_failure(reader: &mut Reader<'_>, node: &Node) -> Option<AllowFailure> {
    match &node.value {
        Value::Bool(true) => Some(AllowFailure::Yes),
        Value::Bool(false) => Some(AllowFailure::No),
        Value::Map(map) => {
            let mut nested = reader.nested("allow_failure");
            if !nested.check_keys(map, &["exit_codes"]) {
                return None;
            }
            let Some(codes_node) = map.get("exit_codes") else {
                nested.fail(&node.at, "should have exit_codes");
                return None;
            };
            let codes = nested.integers(codes_node, "exit_codes")?;
            let codes = exit_codes(&mut nested, codes_node, codes)?;
            Some(AllowFailure::ExitCodes(codes))
        }
        _ => {
            reader.wrong(
                node,
                "allow_failure",
                "a boolean value or a hash with exit_codes",
            );
            None
        }
    }
}

fn exit_codes(reader: &mut Reader<'_>, node: &Node, codes: Vec<i64>) -> Option<Vec<i32>> {
    let converted: Option<Vec<i32>> = codes.iter().map(|c| i32::try_from(*c).ok()).collect();
    if converted.is_none() {
        reader.fail(&node.at, "exit_codes must be 32-bit integers");
    }
    converted
}

/// Automatic retries of a failed job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Retry {
    /// How many times to retry (0 to 2).
    pub max: u8,
    /// The failure kinds that are retried (`always`, `script_failure`, ...).
    pub when: Vec<String>,
    /// Retry only failures with these exit codes (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exit_codes: Vec<i32>,
}

impl Retry {
    /// Whether this is "no retries" (nothing to show).
    pub fn is_default(&self) -> bool {
        *self == Retry::default()
    }
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            max: 0,
            when: vec!["always".into()],
            exit_codes: Vec::new(),
        }
    }
}

/// `retry:when` values: `always` and every build failure reason
/// (`FullRetry.possible_retry_when_values` in gitlabhq/gitlabhq lib/gitlab/ci/config/entry/retry.rb,
/// the reasons of app/models/concerns/enums/ci/commit_status.rb).
const RETRY_WHEN: &[&str] = &[
    "always",
    "unknown_failure",
    "script_failure",
    "api_failure",
    "stuck_or_timeout_failure",
    "runner_system_failure",
    "missing_dependency_failure",
    "runner_unsupported",
    "stale_schedule",
    "job_execution_timeout",
    "archived_failure",
    "unmet_prerequisites",
    "scheduler_failure",
    "data_integrity_failure",
    "forward_deployment_failure",
    "user_blocked",
    "project_deleted",
    "ci_quota_exceeded",
    "pipeline_loop_detected",
    "no_matching_runner",
    "trace_size_exceeded",
    "builds_disabled",
    "environment_creation_failure",
    "deployment_rejected",
    "failed_outdated_deployment_job",
    "job_execution_server_timeout",
    "stuck_pending_with_matching_runners",
    "stuck_pending_no_matching_runners",
    "no_updates_running",
    "no_updates_canceling",
    "server_timeout_running",
    "server_timeout_canceling",
    "runner_configuration_error",
    "runner_external_dependency_failure",
    "runner_interrupted",
    "protected_environment_failure",
    "insufficient_bridge_permissions",
    "downstream_bridge_project_not_found",
    "invalid_bridge_trigger",
    "upstream_bridge_project_not_found",
    "insufficient_upstream_permissions",
    "bridge_pipeline_is_child_pipeline",
    "downstream_pipeline_creation_failed",
    "secrets_provider_not_found",
    "reached_max_descendant_pipelines_depth",
    "ip_restriction_failure",
    "reached_max_pipeline_hierarchy_size",
    "reached_downstream_pipeline_trigger_rate_limit",
    "duo_workflow_not_allowed",
    "job_router_failure",
    "job_token_expired",
    "id_token_burned_project_path",
    "downstream_project_trigger_resolved_to_empty",
];

/// Read `retry: N` or `retry: {max, when, exit_codes}`.
pub(crate) fn read_retry(reader: &mut Reader<'_>, node: &Node) -> Option<Retry> {
    let max_of = |reader: &mut Reader<'_>, n: &Node| -> Option<u8> {
        let value = reader.integer(n, "retry max")?;
        if !(0..=2).contains(&value) {
            reader.fail(&n.at, "retry max must be between 0 and 2");
            return None;
        }
        u8::try_from(value).ok()
    };
    match &node.value {
        Value::Int(_) => Some(Retry {
            max: max_of(reader, node)?,
            ..Retry::default()
        }),
        Value::Map(map) => {
            let mut nested = reader.nested("retry");
            if !nested.check_keys(map, &["max", "when", "exit_codes"]) {
                return None;
            }
            let mut retry = Retry::default();
            if let Some(n) = map.get("max") {
                retry.max = max_of(&mut nested, n)?;
            }
            if let Some(n) = map.get("when") {
                let when = nested.string_or_strings(n, "when")?;
                if let Some(bad) = when.iter().find(|w| !RETRY_WHEN.contains(&w.as_str())) {
                    nested.fail(
                        &n.at,
                        format!(
                            "when has an unknown failure type `{bad}`; known: {}",
                            RETRY_WHEN.join(", ")
                        ),
                    );
                    return None;
                }
                retry.when = when;
            }
            if let Some(n) = map.get("exit_codes") {
                let codes = nested.integers(n, "exit_codes")?;
                retry.exit_codes = exit_codes(&mut nested, n, codes)?;
            }
            Some(retry)
        }
        _ => {
            reader.wrong(node, "retry", "an integer or a hash");
            None
        }
    }
}

/// A job's `environment` (kept; flotilla records no deployments).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Environment {
    /// The environment's name, expanded.
    pub name: String,
    /// Its URL, expanded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// `start`, `prepare`, `stop`, `verify` or `access`.
    pub action: String,
    /// The whole keyword as written.
    pub config: serde_json::Value,
}

/// Read `environment: name` or `environment: {name, url, action, ...}` (unexpanded).
pub(crate) fn read_environment(reader: &mut Reader<'_>, node: &Node) -> Option<Environment> {
    let environment = match &node.value {
        Value::Str(name) => Environment {
            name: name.clone(),
            url: None,
            action: "start".into(),
            config: node.to_json(),
        },
        Value::Map(map) => {
            let mut nested = reader.nested("environment");
            if !nested.check_keys(
                map,
                &[
                    "name",
                    "url",
                    "action",
                    "on_stop",
                    "auto_stop_in",
                    "kubernetes",
                    "deployment_tier",
                ],
            ) {
                return None;
            }
            let Some(name_node) = map.get("name") else {
                nested.fail(&node.at, "name can't be blank");
                return None;
            };
            let name = nested.string(name_node, "name")?;
            let url = match map.get("url") {
                Some(n) => Some(nested.string(n, "url")?),
                None => None,
            };
            let action = match map.get("action") {
                Some(n) => {
                    let action = nested.string(n, "action")?;
                    if !["start", "prepare", "stop", "verify", "access"].contains(&action.as_str())
                    {
                        nested.fail(
                            &n.at,
                            "action should be start, prepare, stop, verify, or access",
                        );
                        return None;
                    }
                    action
                }
                None => "start".into(),
            };
            Environment {
                name,
                url,
                action,
                config: node.to_json(),
            }
        }
        _ => {
            reader.wrong(node, "environment", "a string or a hash");
            return None;
        }
    };
    reader.warn(
        &node.at,
        "environment is kept for the job's variables, but a local run records no deployment",
    );
    Some(environment)
}

/// Which instance of a `parallel` job a job is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParallelInstance {
    /// 1-based index (`CI_NODE_INDEX`).
    pub index: usize,
    /// How many instances (`CI_NODE_TOTAL`).
    pub total: usize,
    /// For `parallel: matrix`, this instance's variables in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub matrix: Vec<(String, String)>,
}
