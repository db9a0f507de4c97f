//! The predefined variables a job expects: `CI_*` values derived from the payload (used only
//! when the job source did not send them) and the values only the runner knows (paths,
//! concurrency ids, job status), which always win.

use crate::model::{JobPayload, Variable};

/// Who runs the job, for the `CI_RUNNER_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerIdentity {
    /// The runner's id at GitLab (0 when not registered).
    pub id: i64,
    /// The first characters of the runner's token (`CI_RUNNER_SHORT_TOKEN`), never the token.
    pub short_token: String,
    /// The runner's description.
    pub description: String,
    /// The runner's tags.
    pub tags: Vec<String>,
    /// The runner's version.
    pub version: String,
    /// The runner's revision.
    pub revision: String,
    /// The executor (isolation level) name, e.g. `shell`, `docker`.
    pub executor: String,
    /// The GOARCH-style architecture of the machine running the job.
    pub arch: String,
}

impl Default for RunnerIdentity {
    fn default() -> Self {
        RunnerIdentity {
            id: 0,
            short_token: String::new(),
            description: "flotilla".into(),
            tags: Vec::new(),
            version: env!("CARGO_PKG_VERSION").into(),
            revision: String::new(),
            executor: "shell".into(),
            arch: go_arch().into(),
        }
    }
}

fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// What the predefined variables are computed from besides the payload.
#[derive(Debug, Clone)]
pub struct PredefinedContext<'a> {
    /// `CI_BUILDS_DIR` as scripts see it.
    pub builds_dir: &'a str,
    /// `CI_PROJECT_DIR` as scripts see it.
    pub project_dir: &'a str,
    /// The per-job temporary directory (`RUNNER_TEMP_PROJECT_DIR`).
    pub tmp_dir: &'a str,
    /// `CI_CONCURRENT_ID`: the slot's index on its instance.
    pub concurrent_id: u32,
    /// `CI_CONCURRENT_PROJECT_ID`: the index among this project's jobs on the instance.
    pub concurrent_project_id: u32,
    /// The runner.
    pub runner: &'a RunnerIdentity,
    /// `CI_JOB_STATUS`: `running`, or `success` / `failed` / `canceled` for after_script.
    pub job_status: &'a str,
    /// Whether the environment is the job's alone and thrown away after it
    /// ([`crate::Environment::disposable`]).
    pub disposable: bool,
}

/// Variables derived from the payload, for a source that did not send them. Put them
/// *before* the payload's variables so those win.
pub fn predefined_defaults(job: &JobPayload, ctx: &PredefinedContext<'_>) -> Vec<Variable> {
    let info = &job.job_info;
    let git = &job.git_info;
    let mut v = vec![
        Variable::new("CI", "true"),
        Variable::new("GITLAB_CI", "true"),
        Variable::new("CI_JOB_ID", job.id.to_string()),
        Variable::new("CI_JOB_NAME", info.name.clone()),
        Variable::new("CI_JOB_STAGE", info.stage.clone()),
        Variable::new("CI_JOB_TOKEN", job.token.expose().clone()).masked(),
        Variable::new("CI_PIPELINE_ID", info.pipeline_id.to_string()),
        Variable::new("CI_PROJECT_ID", info.project_id.to_string()),
        Variable::new("CI_PROJECT_NAME", project_name(job)),
        Variable::new("CI_PROJECT_PATH", info.project_full_path.clone()),
        Variable::new(
            "CI_PROJECT_NAMESPACE",
            info.project_full_path
                .rsplit_once('/')
                .map(|(ns, _)| ns.to_owned())
                .unwrap_or_default(),
        ),
        Variable::new("CI_COMMIT_SHA", git.sha.clone()),
        Variable::new(
            "CI_COMMIT_SHORT_SHA",
            git.sha.chars().take(8).collect::<String>(),
        ),
        Variable::new("CI_COMMIT_BEFORE_SHA", git.before_sha.clone()),
        Variable::new("CI_COMMIT_REF_NAME", git.git_ref.clone()),
        Variable::new("CI_COMMIT_REF_SLUG", slug(&git.git_ref)),
        Variable {
            public: false,
            ..Variable::new("CI_REPOSITORY_URL", git.repo_url.expose().clone())
        },
        Variable::new("CI_RUNNER_ID", ctx.runner.id.to_string()),
        Variable::new("CI_RUNNER_DESCRIPTION", ctx.runner.description.clone()),
        Variable::new("CI_RUNNER_TAGS", runner_tags(&ctx.runner.tags)),
        Variable::new("CI_RUNNER_SHORT_TOKEN", ctx.runner.short_token.clone()),
    ];
    if git.ref_type == "tag" {
        v.push(Variable::new("CI_COMMIT_TAG", git.git_ref.clone()));
    } else if !git.git_ref.is_empty() {
        v.push(Variable::new("CI_COMMIT_BRANCH", git.git_ref.clone()));
    }
    if let Some(image) = job.image.as_ref().filter(|i| !i.name.is_empty()) {
        v.push(Variable::new("CI_JOB_IMAGE", image.name.clone()));
    }
    v
}

/// Variables only the runner knows; put them *after* the payload's variables so they win.
pub fn runner_provided(job: &JobPayload, ctx: &PredefinedContext<'_>) -> Vec<Variable> {
    // Exactly one of the two, `true` (gitlab-runner `common/build.go` GetSharedEnvVariable).
    let environment = if ctx.disposable {
        "CI_DISPOSABLE_ENVIRONMENT"
    } else {
        "CI_SHARED_ENVIRONMENT"
    };
    vec![
        Variable::new(environment, "true"),
        Variable::new("CI_BUILDS_DIR", ctx.builds_dir),
        Variable::new("CI_PROJECT_DIR", ctx.project_dir),
        Variable::new("RUNNER_TEMP_PROJECT_DIR", ctx.tmp_dir),
        Variable::new("CI_CONCURRENT_ID", ctx.concurrent_id.to_string()),
        Variable::new(
            "CI_CONCURRENT_PROJECT_ID",
            ctx.concurrent_project_id.to_string(),
        ),
        Variable::new("CI_SERVER", "yes"),
        Variable::new("CI_JOB_STATUS", ctx.job_status),
        Variable::new("CI_JOB_TIMEOUT", job.runner_info.timeout_secs().to_string()),
        Variable::new("CI_RUNNER_VERSION", ctx.runner.version.clone()),
        Variable::new("CI_RUNNER_REVISION", ctx.runner.revision.clone()),
        Variable::new(
            "CI_RUNNER_EXECUTABLE_ARCH",
            format!("linux/{}", ctx.runner.arch),
        ),
    ]
}

fn project_name(job: &JobPayload) -> String {
    if !job.job_info.project_name.is_empty() {
        return job.job_info.project_name.clone();
    }
    job.job_info
        .project_full_path
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// GitLab's `CI_COMMIT_REF_SLUG`: lowercased, every character outside `[a-z0-9]` replaced by
/// `-`, at most 63 bytes, no leading or trailing `-`.
fn slug(s: &str) -> String {
    let mapped: String = s
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
    mapped.trim_matches('-').to_owned()
}

fn runner_tags(tags: &[String]) -> String {
    let quoted: Vec<String> = tags
        .iter()
        .map(|t| serde_json::Value::String(t.clone()).to_string())
        .collect();
    format!("[{}]", quoted.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vars::JobVariables;

    #[test]
    fn payload_variables_override_defaults_but_not_runner_values() {
        let mut job = JobPayload::from_json(
            br#"{"id":42,"token":"tok-123","job_info":{"name":"build","stage":"test",
                "project_full_path":"group/sub/proj"},
                "git_info":{"ref":"Feature/ABC_1","sha":"0123456789abcdef","ref_type":"branch"},
                "variables":[{"key":"CI_JOB_NAME","value":"from-gitlab","public":true},
                             {"key":"CI_PROJECT_DIR","value":"/elsewhere","public":true}]}"#,
        )
        .unwrap();
        job.runner_info.timeout = 0;
        let runner = RunnerIdentity::default();
        let ctx = PredefinedContext {
            builds_dir: "/builds",
            project_dir: "/builds/0/group/sub/proj",
            tmp_dir: "/builds/0/group/sub/proj.tmp",
            concurrent_id: 3,
            concurrent_project_id: 1,
            runner: &runner,
            job_status: "running",
            disposable: false,
        };
        let all = predefined_defaults(&job, &ctx)
            .into_iter()
            .chain(job.variables.clone())
            .chain(runner_provided(&job, &ctx));
        let vars = JobVariables::new(all, ctx.tmp_dir);
        assert_eq!(vars.value("CI_JOB_NAME"), Some("from-gitlab"));
        assert_eq!(
            vars.value("CI_PROJECT_DIR"),
            Some("/builds/0/group/sub/proj")
        );
        assert_eq!(vars.value("CI_JOB_ID"), Some("42"));
        assert_eq!(vars.value("CI_PROJECT_NAME"), Some("proj"));
        assert_eq!(vars.value("CI_PROJECT_NAMESPACE"), Some("group/sub"));
        assert_eq!(vars.value("CI_COMMIT_SHORT_SHA"), Some("01234567"));
        assert_eq!(vars.value("CI_COMMIT_BRANCH"), Some("Feature/ABC_1"));
        assert_eq!(vars.value("CI_COMMIT_REF_SLUG"), Some("feature-abc-1"));
        assert_eq!(vars.value("CI_JOB_TIMEOUT"), Some("7200"));
        assert_eq!(vars.value("CI_CONCURRENT_ID"), Some("3"));
        assert_eq!(vars.value("CI_SERVER"), Some("yes"));
        assert_eq!(vars.value("CI_SHARED_ENVIRONMENT"), Some("true"));
        assert_eq!(vars.value("CI_DISPOSABLE_ENVIRONMENT"), None);
        assert!(vars.masked_values().iter().any(|m| m == "tok-123"));
        assert_eq!(vars.value("CI_COMMIT_TAG"), None);
    }
}
