//! The `info` object a runner sends with verify, job requests and job updates, with the
//! `features` that decide which jobs GitLab hands out.

use serde::Serialize;
use std::collections::BTreeMap;

/// `info.features` (GitLab Runner's `FeaturesInfo`). GitLab only assigns a job whose needs
/// are advertised here, and a job given to a runner that cannot do what it advertised fails:
/// advertise only what is implemented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct FeaturesInfo {
    /// Job variables are passed to the script.
    pub variables: bool,
    /// The job's `image` is used.
    pub image: bool,
    /// The job's `services` are started.
    pub services: bool,
    /// Artifacts are uploaded.
    pub artifacts: bool,
    /// Caches are restored and saved.
    pub cache: bool,
    /// `cache:fallback_keys` are tried.
    pub fallback_cache_keys: bool,
    /// The executor shares the host between jobs.
    pub shared: bool,
    /// Several artifacts (reports) per job, gzip-formatted.
    pub upload_multiple_artifacts: bool,
    /// `raw` artifact format.
    pub upload_raw_artifacts: bool,
    /// Interactive web terminal sessions.
    pub session: bool,
    /// Interactive terminals.
    pub terminal: bool,
    /// Checkout by refspecs (required for merge-request pipelines).
    pub refspecs: bool,
    /// Masked variables are hidden in the log.
    pub masking: bool,
    /// Session proxying.
    pub proxy: bool,
    /// `variables[].raw` (no expansion).
    pub raw_variables: bool,
    /// `artifacts:exclude`.
    pub artifacts_exclude: bool,
    /// Steps besides `script` and `after_script` (e.g. `release`).
    pub multi_build_steps: bool,
    /// The trace can be resent from the start after a 412.
    pub trace_reset: bool,
    /// The final update carries the trace checksum.
    pub trace_checksum: bool,
    /// The final update carries the trace size.
    pub trace_size: bool,
    /// `secrets:` from Vault.
    pub vault_secrets: bool,
    /// The job can be canceled.
    pub cancelable: bool,
    /// The final update carries the exit code (`allow_failure:exit_codes`).
    pub return_exit_code: bool,
    /// Variables for services.
    pub service_variables: bool,
    /// Several aliases per service.
    pub service_multiple_aliases: bool,
    /// `image:docker` executor options.
    pub image_executor_opts: bool,
    /// Service executor options.
    pub service_executor_opts: bool,
    /// `canceling` runs `after_script` before the job ends.
    pub cancel_gracefully: bool,
    /// GitLab Steps run natively.
    pub native_steps_integration: bool,
    /// The runner accepts each job with `PUT state=running` (GitLab Runner's network client
    /// always says so, `network/gitlab.go` `getFeatures`). Only while Rails' feature flag
    /// `allow_runner_job_acknowledgement` is on does GitLab then wait for that accept.
    pub two_phase_job_commit: bool,
    /// Job inputs.
    pub job_inputs: bool,
}

impl FeaturesInfo {
    /// What flotilla's job engine implements. `image` and `services` only with an isolation
    /// level that runs containers (`docker`).
    ///
    /// `upload_multiple_artifacts` and `upload_raw_artifacts` are advertised: reports are
    /// uploaded each with its type and format (zip, gzip, raw). Without the first, GitLab
    /// drops every job with `artifacts:reports` as `runner_unsupported`
    /// (`Ci::Build::RUNNER_FEATURES` in `app/models/ci/build.rb`).
    ///
    /// Not advertised: sessions, terminals, proxying, Vault secrets, service variables and
    /// executor options, native steps, job inputs.
    pub fn flotilla(containers: bool) -> FeaturesInfo {
        FeaturesInfo {
            variables: true,
            image: containers,
            services: containers,
            artifacts: true,
            cache: true,
            fallback_cache_keys: true,
            shared: true,
            upload_multiple_artifacts: true,
            upload_raw_artifacts: true,
            refspecs: true,
            masking: true,
            raw_variables: true,
            artifacts_exclude: true,
            multi_build_steps: true,
            trace_reset: true,
            trace_checksum: true,
            trace_size: true,
            cancelable: true,
            return_exit_code: true,
            cancel_gracefully: true,
            two_phase_job_commit: true,
            ..FeaturesInfo::default()
        }
    }
}

/// `info.config`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ConfigInfo {
    /// The `gpus` setting (empty when unset).
    pub gpus: String,
}

/// `info`: who this runner is and what it can do (GitLab Runner's `VersionInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Info {
    /// The runner's name (`gitlab-runner` for GitLab Runner).
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its revision.
    pub revision: String,
    /// `linux`, `darwin`, ...
    pub platform: String,
    /// `amd64`, `arm64`, ...
    pub architecture: String,
    /// The executor (`instance`, `docker-autoscaler`, ...).
    pub executor: String,
    /// The shell (`bash`).
    pub shell: String,
    /// What it can do.
    pub features: FeaturesInfo,
    /// Configuration details GitLab shows.
    pub config: ConfigInfo,
    /// Runner labels.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl Info {
    /// flotilla's info for `executor`, with [`FeaturesInfo::flotilla`].
    pub fn flotilla(executor: &str, containers: bool) -> Info {
        Info {
            name: "flotilla".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            revision: String::new(),
            platform: std::env::consts::OS.into(),
            architecture: go_arch(std::env::consts::ARCH).into(),
            executor: executor.into(),
            shell: "bash".into(),
            features: FeaturesInfo::flotilla(containers),
            config: ConfigInfo::default(),
            labels: BTreeMap::new(),
        }
    }
}

/// Go's name for an architecture (what GitLab shows for GitLab Runner).
fn go_arch(rust: &str) -> &str {
    match rust {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "arm" => "arm",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flotilla_advertises_only_what_it_implements() {
        let f = FeaturesInfo::flotilla(false);
        assert!(f.two_phase_job_commit && f.cancel_gracefully && f.trace_checksum);
        assert!(f.refspecs && f.return_exit_code && f.masking);
        assert!(!f.image && !f.services);
        assert!(f.upload_multiple_artifacts && f.upload_raw_artifacts);
        assert!(!f.vault_secrets && !f.session);
        let d = FeaturesInfo::flotilla(true);
        assert!(d.image && d.services);
        let json = serde_json::to_value(Info::flotilla("instance", false)).unwrap();
        assert_eq!(json["features"]["two_phase_job_commit"], true);
        assert_eq!(json["features"]["image"], false);
        assert_eq!(json["shell"], "bash");
        assert!(json.get("labels").is_none());
    }
}
