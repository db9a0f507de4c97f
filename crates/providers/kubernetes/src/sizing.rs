//! Per-job pod sizing (pure): a job's `KUBERNETES_CPU_REQUEST`, `KUBERNETES_CPU_LIMIT`,
//! `KUBERNETES_MEMORY_REQUEST` and `KUBERNETES_MEMORY_LIMIT`, bounded by the runner's
//! `*_overwrite_max_allowed`, over the runner's defaults (`cpu_request`, ...), as GitLab
//! Runner's Kubernetes executor reads them.
//!
//! The rules follow `executors/kubernetes/overwrites.go` of gitlab-runner
//! (`createOverwrites`, `evaluateMaxBuildResourcesOverwrite`,
//! `evaluateMaxResourceOverwrite`):
//! - the maximum unset (empty): the variable is ignored and the default kept (GitLab says so
//!   only at debug level; here the job's log says it);
//! - the variable unset or empty: the default;
//! - the variable not a quantity: the job fails, `parsing resource limit: "<reason>"`;
//! - the variable above the maximum (apimachinery's `Cmp`): the job fails,
//!   `the resource "CPURequest" requested "3" is higher than limit allowed "2"`;
//! - otherwise the variable's value, and the log says `"CPURequest" overwritten with "3"`.
//!
//! Errors are wrapped as GitLab wraps them (`invalid build requests specified: ...`,
//! `invalid build limits specified: ...`); the runner adds `couldn't prepare overwrites: `
//! as `executors/kubernetes/executor_kubernetes.go` (`Prepare`) does.
//!
//! Two checks GitLab leaves to the API server are made here, so the job fails at once with
//! the reason instead of waiting for a pod that is never created: a negative quantity, and
//! a request above its limit (`pkg/apis/core/validation/validation.go`,
//! `ValidateResourceRequirements`: "must be less than or equal to cpu limit").
//!
//! The maxima and defaults are checked when the provider is built: where GitLab fails every
//! job with `parsing resource limit` for a maximum that does not parse, flotilla does not
//! start.

use crate::quantity::{Quantity, QuantityError};
use crate::settings::KubernetesSettings;
use crate::shape::Shape;
use flotilla_fleet::FleetError;

/// The job variable asking for a CPU request (GitLab's `CPURequestOverwriteVariableValue`).
pub const CPU_REQUEST_VARIABLE: &str = "KUBERNETES_CPU_REQUEST";
/// The job variable asking for a CPU limit.
pub const CPU_LIMIT_VARIABLE: &str = "KUBERNETES_CPU_LIMIT";
/// The job variable asking for a memory request.
pub const MEMORY_REQUEST_VARIABLE: &str = "KUBERNETES_MEMORY_REQUEST";
/// The job variable asking for a memory limit.
pub const MEMORY_LIMIT_VARIABLE: &str = "KUBERNETES_MEMORY_LIMIT";

/// One resource: its default and the most a job may ask.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Bound {
    default: Option<Quantity>,
    max: Option<Quantity>,
}

/// The runner's sizing rules: defaults and maxima for the four resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sizing {
    cpu_request: Bound,
    cpu_limit: Bound,
    memory_request: Bound,
    memory_limit: Bound,
}

/// Why a job's resources cannot be given, in GitLab's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OverwriteError {
    /// A variable that is not a quantity.
    #[error("invalid build {kind} specified: parsing resource limit: {:?}", .error.to_string())]
    Parse {
        /// `requests` or `limits`.
        kind: &'static str,
        /// Why it does not parse.
        error: QuantityError,
    },
    /// A variable above the runner's maximum.
    #[error(
        "invalid build {kind} specified: the resource {field:?} requested {requested:?} is higher than limit allowed {max:?}"
    )]
    TooHigh {
        /// `requests` or `limits`.
        kind: &'static str,
        /// GitLab's field name: `CPURequest`, `MemoryLimit`, ...
        field: &'static str,
        /// What the job asked, as written.
        requested: String,
        /// The maximum, as configured.
        max: String,
    },
    /// A negative quantity (the API server refuses it).
    #[error(
        "invalid build {kind} specified: the resource {field:?} requested {requested:?} is negative"
    )]
    Negative {
        /// `requests` or `limits`.
        kind: &'static str,
        /// GitLab's field name.
        field: &'static str,
        /// What was asked.
        requested: String,
    },
    /// A request above its limit (the API server refuses it).
    #[error(
        "invalid build requests specified: {resource} request {request} must be less than or equal to {resource} limit {limit}"
    )]
    RequestAboveLimit {
        /// `cpu` or `memory`.
        resource: &'static str,
        /// The request.
        request: String,
        /// The limit.
        limit: String,
    },
}

/// What a job gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSizing {
    /// The container's resources: the defaults with the job's overwrites.
    pub shape: Shape,
    /// Whether the job changed anything of the defaults (else its pod is a default one).
    pub overwritten: bool,
    /// Lines for the job's log: what was overwritten, what was ignored and why.
    pub notes: Vec<String>,
}

impl Sizing {
    /// The rules in `settings` (GitLab's `[runners.kubernetes]` keys, in `plugin_config`);
    /// a default or maximum that is not a quantity is a configuration error.
    pub fn from_settings(settings: &KubernetesSettings) -> Result<Sizing, FleetError> {
        let parse = |key: &str, value: &Option<String>| -> Result<Option<Quantity>, FleetError> {
            match value.as_deref().map(str::trim) {
                None | Some("") => Ok(None),
                Some(text) => Quantity::parse(text).map(Some).map_err(|e| {
                    FleetError::Config(format!("kubernetes plugin_config: {key} = {text:?}: {e}"))
                }),
            }
        };
        let bound = |key: &str, default: &Option<String>, max: &Option<String>| {
            Ok::<_, FleetError>(Bound {
                default: parse(key, default)?,
                max: parse(&format!("{key}_overwrite_max_allowed"), max)?,
            })
        };
        let sizing = Sizing {
            cpu_request: bound(
                "cpu_request",
                &settings.cpu_request,
                &settings.cpu_request_overwrite_max_allowed,
            )?,
            cpu_limit: bound(
                "cpu_limit",
                &settings.cpu_limit,
                &settings.cpu_limit_overwrite_max_allowed,
            )?,
            memory_request: bound(
                "memory_request",
                &settings.memory_request,
                &settings.memory_request_overwrite_max_allowed,
            )?,
            memory_limit: bound(
                "memory_limit",
                &settings.memory_limit,
                &settings.memory_limit_overwrite_max_allowed,
            )?,
        };
        let defaults = sizing.defaults();
        check_request_within_limit(&defaults).map_err(|e| {
            FleetError::Config(format!(
                "kubernetes plugin_config: the defaults cannot be given: {e}"
            ))
        })?;
        Ok(sizing)
    }

    /// The shape every pod gets unless a job asks otherwise (the configured defaults).
    pub fn defaults(&self) -> Shape {
        Shape {
            cpu_request: self.cpu_request.default,
            cpu_limit: self.cpu_limit.default,
            memory_request: self.memory_request.default,
            memory_limit: self.memory_limit.default,
        }
    }

    /// Whether a job may change anything (some maximum is set).
    pub fn allows_overwrites(&self) -> bool {
        [
            &self.cpu_request,
            &self.cpu_limit,
            &self.memory_request,
            &self.memory_limit,
        ]
        .iter()
        .any(|b| b.max.is_some())
    }

    /// What a job whose (expanded) variables `lookup` reads gets.
    pub fn for_job(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<JobSizing, OverwriteError> {
        let mut notes = Vec::new();
        // GitLab evaluates requests, then limits (`evaluateMaxBuildResourcesOverwrite`),
        // CPU before memory in each.
        let mut resolve = |kind, field, variable, bound: &Bound| {
            evaluate(kind, field, variable, bound, lookup(variable), &mut notes)
        };
        let cpu_request = resolve(
            "requests",
            "CPURequest",
            CPU_REQUEST_VARIABLE,
            &self.cpu_request,
        )?;
        let memory_request = resolve(
            "requests",
            "MemoryRequest",
            MEMORY_REQUEST_VARIABLE,
            &self.memory_request,
        )?;
        let cpu_limit = resolve("limits", "CPULimit", CPU_LIMIT_VARIABLE, &self.cpu_limit)?;
        let memory_limit = resolve(
            "limits",
            "MemoryLimit",
            MEMORY_LIMIT_VARIABLE,
            &self.memory_limit,
        )?;
        let shape = Shape {
            cpu_request,
            cpu_limit,
            memory_request,
            memory_limit,
        };
        check_request_within_limit(&shape)?;
        let overwritten = shape.annotation() != self.defaults().annotation();
        Ok(JobSizing {
            shape,
            overwritten,
            notes,
        })
    }
}

/// `evaluateMaxResourceOverwrite`: one resource for one job.
fn evaluate(
    kind: &'static str,
    field: &'static str,
    variable: &str,
    bound: &Bound,
    asked: Option<String>,
    notes: &mut Vec<String>,
) -> Result<Option<Quantity>, OverwriteError> {
    let asked = asked
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty());
    let Some(max) = bound.max else {
        if let Some(text) = asked {
            notes.push(format!(
                "{variable}={text:?} is ignored: this runner does not allow overwriting {field} \
                 ({}_overwrite_max_allowed is not set)",
                config_key(field)
            ));
        }
        return Ok(bound.default);
    };
    let Some(text) = asked else {
        return Ok(bound.default);
    };
    let wanted = Quantity::parse(&text).map_err(|error| OverwriteError::Parse { kind, error })?;
    if wanted > max {
        return Err(OverwriteError::TooHigh {
            kind,
            field,
            requested: text,
            max: max.to_string(),
        });
    }
    if wanted.is_negative() {
        return Err(OverwriteError::Negative {
            kind,
            field,
            requested: text,
        });
    }
    notes.push(format!("{field:?} overwritten with {text:?}"));
    Ok(Some(wanted))
}

/// GitLab's field name as its configuration key's stem (`CPURequest`: `cpu_request`).
fn config_key(field: &str) -> &'static str {
    match field {
        "CPURequest" => "cpu_request",
        "CPULimit" => "cpu_limit",
        "MemoryRequest" => "memory_request",
        _ => "memory_limit",
    }
}

fn check_request_within_limit(shape: &Shape) -> Result<(), OverwriteError> {
    for (resource, request, limit) in [
        ("cpu", shape.cpu_request, shape.cpu_limit),
        ("memory", shape.memory_request, shape.memory_limit),
    ] {
        if let (Some(request), Some(limit)) = (request, limit)
            && request > limit
        {
            return Err(OverwriteError::RequestAboveLimit {
                resource,
                request: request.to_string(),
                limit: limit.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    fn sizing(extra: serde_json::Value) -> Result<Sizing, FleetError> {
        let mut config = json!({"name": "g", "pod_template": "spec: {}"});
        config
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        Sizing::from_settings(&KubernetesSettings::from_plugin_config(&config).unwrap())
    }

    fn job(s: &Sizing, vars: &[(&str, &str)]) -> Result<JobSizing, OverwriteError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        s.for_job(|k| vars.get(k).cloned())
    }

    fn bounded() -> Sizing {
        sizing(json!({
            "cpu_request": "100m",
            "cpu_request_overwrite_max_allowed": "2",
            "cpu_limit_overwrite_max_allowed": "4",
            "memory_request": "128Mi",
            "memory_request_overwrite_max_allowed": "4Gi",
            "memory_limit_overwrite_max_allowed": "8Gi",
        }))
        .unwrap()
    }

    #[test]
    fn a_job_within_the_maxima_gets_what_it_asks_over_the_defaults() {
        let s = bounded();
        let got = job(
            &s,
            &[
                (CPU_REQUEST_VARIABLE, "500m"),
                (MEMORY_LIMIT_VARIABLE, "1Gi"),
            ],
        )
        .unwrap();
        assert!(got.overwritten);
        assert_eq!(
            got.shape.annotation(),
            "cpu_request=500m,memory_request=128Mi,memory_limit=1Gi"
        );
        // GitLab's own log lines (`logger.Println` in `evaluateMaxResourceOverwrite`).
        assert_eq!(
            got.notes,
            vec![
                r#""CPURequest" overwritten with "500m""#,
                r#""MemoryLimit" overwritten with "1Gi""#
            ]
        );
        // Equal to the maximum is allowed (`Cmp` == 1 only is refused).
        assert!(job(&s, &[(CPU_REQUEST_VARIABLE, "2000m")]).is_ok());
    }

    #[test]
    fn a_job_without_variables_or_with_the_defaults_gets_a_default_pod() {
        let s = bounded();
        let none = job(&s, &[]).unwrap();
        assert!(!none.overwritten);
        assert_eq!(none.shape, s.defaults());
        assert!(none.notes.is_empty());
        let empty = job(&s, &[(CPU_REQUEST_VARIABLE, "")]).unwrap();
        assert!(!empty.overwritten);
        let same = job(&s, &[(CPU_REQUEST_VARIABLE, "0.1")]).unwrap();
        assert!(!same.overwritten, "0.1 is the default 100m");
    }

    #[test]
    fn above_the_maximum_fails_with_gitlabs_message() {
        let s = bounded();
        let err = job(&s, &[(CPU_REQUEST_VARIABLE, "3")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid build requests specified: the resource "CPURequest" requested "3" is higher than limit allowed "2""#
        );
        let err = job(&s, &[(MEMORY_LIMIT_VARIABLE, "9Gi")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid build limits specified: the resource "MemoryLimit" requested "9Gi" is higher than limit allowed "8Gi""#
        );
    }

    #[test]
    fn a_variable_that_is_not_a_quantity_fails_with_gitlabs_message() {
        let err = job(&bounded(), &[(CPU_LIMIT_VARIABLE, "two")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"invalid build limits specified: parsing resource limit: "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'""#
        );
    }

    #[test]
    fn without_a_maximum_the_variable_is_ignored_and_said_so() {
        let s =
            sizing(json!({"cpu_limit": "1", "cpu_request_overwrite_max_allowed": "2"})).unwrap();
        let got = job(
            &s,
            &[(CPU_LIMIT_VARIABLE, "500"), (MEMORY_LIMIT_VARIABLE, "x")],
        )
        .unwrap();
        assert!(!got.overwritten);
        assert_eq!(got.shape.annotation(), "cpu_limit=1");
        assert_eq!(got.notes.len(), 2, "{:?}", got.notes);
        assert!(
            got.notes[0].contains("cpu_limit_overwrite_max_allowed is not set"),
            "{:?}",
            got.notes
        );
        assert!(
            got.notes[1].contains("memory_limit_overwrite_max_allowed"),
            "{:?}",
            got.notes
        );
        assert!(!sizing(json!({})).unwrap().allows_overwrites());
        assert!(s.allows_overwrites());
    }

    #[test]
    fn what_the_api_server_would_refuse_fails_at_once() {
        let s = bounded();
        let err = job(
            &s,
            &[(CPU_REQUEST_VARIABLE, "2"), (CPU_LIMIT_VARIABLE, "1")],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid build requests specified: cpu request 2 must be less than or equal to cpu limit 1"
        );
        let err = job(&s, &[(CPU_REQUEST_VARIABLE, "-1")]).unwrap_err();
        assert!(matches!(err, OverwriteError::Negative { .. }), "{err}");
    }

    #[test]
    fn bad_configuration_is_refused_when_the_provider_is_built() {
        let err = sizing(json!({"cpu_request_overwrite_max_allowed": "lots"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("cpu_request_overwrite_max_allowed"), "{err}");
        let err = sizing(json!({"memory_request": "2Gi", "memory_limit": "1Gi"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("memory request 2Gi"), "{err}");
    }
}
