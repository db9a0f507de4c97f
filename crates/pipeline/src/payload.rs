//! A compiled job turned into GitLab's job payload, so a local run goes through the same
//! runner, isolation levels and dispatcher as a job from GitLab.

use flotilla_ci::{self as ci, AllowFailure, CompiledJob};
use flotilla_fleet::Secret;
use flotilla_job::model::{
    self, Artifact, ArtifactsFile, Cache, Dependency, Features, GitInfo, HOOK_PRE_GET_SOURCES,
    Hook, Image, JobInfo, RunnerInfo, STEP_AFTER_SCRIPT, STEP_SCRIPT, Step,
};
use flotilla_job::{JobPayload, Variable};

/// The fetch depth of a local job that sets no `GIT_DEPTH`: the default of a new GitLab
/// project (docs.gitlab.com/ci/pipelines/settings/, "Limit the number of changes fetched
/// during clone").
pub const DEFAULT_GIT_DEPTH: u32 = 20;

/// The job timeout when the pipeline sets none (GitLab's default project timeout).
pub const DEFAULT_TIMEOUT_SECS: u64 = 3600;

/// What a payload needs beyond the compiled job.
#[derive(Debug, Clone)]
pub struct PayloadContext<'a> {
    /// The job's id in this local pipeline (1, 2, …).
    pub job_id: i64,
    /// Which attempt this is (1 for the first; `CI_JOB_RETRY_COUNT` is one less).
    pub attempt: u32,
    /// When the job starts, in seconds since the epoch (`CI_JOB_STARTED_AT`).
    pub started_at: u64,
    /// The pipeline's id (`CI_PIPELINE_ID`).
    pub pipeline_id: i64,
    /// The predefined variables of the pipeline (`CI_COMMIT_SHA`, `CI_PROJECT_DIR`, …),
    /// overridden by the job's own.
    pub predefined: &'a [(String, String)],
    /// Project name and path (`CI_PROJECT_NAME`, `CI_PROJECT_PATH`).
    pub project_name: &'a str,
    /// The project path, used for the build directory.
    pub project_path: &'a str,
    /// The commit and ref the pipeline runs for.
    pub sha: &'a str,
    /// The branch or tag.
    pub git_ref: &'a str,
    /// The artifacts this job downloads and extracts before its script, in order:
    /// `(id in the artifact store, name, archive size)`: those of its dependencies, or one
    /// archive merging them.
    pub dependencies: Vec<(i64, String, u64)>,
    /// The variables the dotenv reports of its dependencies pass on: they outrank the job's
    /// own and are outranked by those given for the pipeline (GitLab's order of precedence,
    /// docs.gitlab.com/ci/variables/#cicd-variable-precedence).
    pub dotenv: &'a [Variable],
}

/// The value of `key` in a list of variables where later entries win.
pub(crate) fn var<'a>(vars: &'a [(String, String)], key: &str) -> Option<&'a str> {
    vars.iter()
        .rev()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// The variables every local job gets on top of the pipeline's.
fn job_variables(
    job: &CompiledJob,
    ctx: &PayloadContext<'_>,
    token: &Secret<String>,
) -> Vec<Variable> {
    let mut out: Vec<Variable> = ctx.predefined.iter().map(|(k, v)| public(k, v)).collect();
    out.push(public("CI_JOB_NAME", &job.name));
    out.push(public("CI_JOB_NAME_SLUG", &ci::slugify(&job.name)));
    out.push(public("CI_JOB_STAGE", &job.stage));
    out.push(public("CI_JOB_ID", &ctx.job_id.to_string()));
    out.push(public("CI_PIPELINE_ID", &ctx.pipeline_id.to_string()));
    out.push(public("CI_PIPELINE_IID", &ctx.pipeline_id.to_string()));
    // GitLab's job variables (docs.gitlab.com/ci/variables/predefined_variables/,
    // `app/models/ci/build.rb` `persisted_variables`, `lib/gitlab/ci/variables/builder.rb`).
    let project_url = var(ctx.predefined, "CI_PROJECT_URL").unwrap_or_default();
    out.push(public(
        "CI_PIPELINE_URL",
        &format!("{project_url}/-/pipelines/{}", ctx.pipeline_id),
    ));
    out.push(public(
        "CI_JOB_URL",
        &format!("{project_url}/-/jobs/{}", ctx.job_id),
    ));
    out.push(public("CI_JOB_GROUP_NAME", &job.base_name));
    let started = ci::utc_timestamp(ctx.started_at);
    out.push(public("CI_JOB_STARTED_AT_SLUG", &ci::slugify(&started)));
    out.push(public("CI_JOB_STARTED_AT", &started));
    out.push(public(
        "CI_JOB_RETRY_COUNT",
        &ctx.attempt.saturating_sub(1).to_string(),
    ));
    let tags: Vec<String> = job.tags.iter().map(|t| format!("{t:?}")).collect();
    out.push(public("CI_JOB_TAGS", &format!("[{}]", tags.join(", "))));
    out.push(public(
        "CI_TRACEPARENT",
        &format!("00-{:032x}-{:016x}-01", ctx.pipeline_id, ctx.job_id),
    ));
    out.push(public(
        "CI_TRACESTATE",
        &format!("gitlab=pipeline:{};job:{}", ctx.pipeline_id, ctx.job_id),
    ));
    out.push(public("CI_REGISTRY_USER", "gitlab-ci-token"));
    out.push(Variable {
        masked: true,
        public: false,
        ..public("CI_REGISTRY_PASSWORD", token.expose())
    });
    // Only a manual job has CI_JOB_MANUAL; CI_NODE_TOTAL is 1 without `parallel`, which alone
    // sets CI_NODE_INDEX (docs.gitlab.com/ci/variables/predefined_variables/).
    if job.when == ci::When::Manual {
        out.push(public("CI_JOB_MANUAL", "true"));
    }
    match &job.parallel {
        Some(p) => {
            out.push(public("CI_NODE_INDEX", &p.index.to_string()));
            out.push(public("CI_NODE_TOTAL", &p.total.to_string()));
        }
        None => out.push(public("CI_NODE_TOTAL", "1")),
    }
    // GitLab's order of precedence, the last definition winning: the job's own variables,
    // then what its dependencies' dotenv reports pass on, then those given for the pipeline.
    let compiled = |v: &ci::Variable| Variable {
        key: v.key.clone(),
        value: v.value.clone(),
        public: true,
        file: false,
        masked: false,
        raw: v.raw,
    };
    let (given, own): (Vec<_>, Vec<_>) = job
        .variables
        .iter()
        .partition(|v| v.source == ci::VariableSource::User);
    out.extend(own.into_iter().map(compiled));
    out.extend(ctx.dotenv.iter().cloned());
    out.extend(given.into_iter().map(compiled));
    out
}

/// Expands `variables` as GitLab's server does before it sends a job to the runner
/// ([`ci::runner_variables`]): to any depth in dependency order, references it cannot resolve
/// kept for the runner. File variables keep their values (GitLab does not expand references to
/// them either). With a cycle, nothing changes, as on GitLab.
pub(crate) fn expand_as_gitlab_sends(variables: &mut [Variable]) {
    let list: Vec<(&str, &str, bool)> = variables
        .iter()
        .map(|v| (v.key.as_str(), v.value.as_str(), v.raw || v.file))
        .collect();
    let Some(expanded) = ci::runner_variables(&list) else {
        return;
    };
    for v in variables.iter_mut().filter(|v| !v.raw && !v.file) {
        if let Some(value) = expanded.get(&v.key) {
            v.value.clone_from(value);
        }
    }
}

fn public(key: &str, value: &str) -> Variable {
    Variable {
        key: key.into(),
        value: value.into(),
        public: true,
        file: false,
        masked: false,
        raw: true,
    }
}

fn image(i: &ci::Image) -> Image {
    Image {
        name: i.name.clone(),
        entrypoint: i.entrypoint.clone().unwrap_or_default(),
        pull_policy: i.pull_policy.clone(),
        ..Image::default()
    }
}

fn service(s: &ci::Service) -> Image {
    Image {
        name: s.name.clone(),
        alias: s.alias.clone().unwrap_or_default(),
        entrypoint: s.entrypoint.clone().unwrap_or_default(),
        command: s.command.clone().unwrap_or_default(),
        pull_policy: s.pull_policy.clone(),
        variables: s
            .variables
            .iter()
            .map(|v| Variable::new(v.key.clone(), v.value.clone()))
            .collect(),
        ..Image::default()
    }
}

fn artifact(a: &ci::Artifacts) -> Artifact {
    Artifact {
        name: a.name.clone().unwrap_or_else(|| "artifacts".into()),
        untracked: a.untracked,
        paths: a.paths.clone(),
        exclude: a.exclude.clone(),
        when: match a.when {
            ci::ArtifactsWhen::OnSuccess => model::When::OnSuccess,
            ci::ArtifactsWhen::OnFailure => model::When::OnFailure,
            ci::ArtifactsWhen::Always => model::When::Always,
        },
        artifact_type: "archive".into(),
        artifact_format: "zip".into(),
        expire_in: a.expire_in.clone().unwrap_or_default(),
    }
}

fn cache(c: &ci::Cache) -> Cache {
    Cache {
        key: c.key.clone(),
        untracked: c.untracked,
        policy: match c.policy {
            ci::CachePolicy::PullPush => model::CachePolicy::PullPush,
            ci::CachePolicy::Pull => model::CachePolicy::Pull,
            ci::CachePolicy::Push => model::CachePolicy::Push,
        },
        paths: c.paths.clone(),
        when: match c.when {
            ci::CacheWhen::OnSuccess => model::When::OnSuccess,
            ci::CacheWhen::OnFailure => model::When::OnFailure,
            ci::CacheWhen::Always => model::When::Always,
        },
        fallback_keys: c.fallback_keys.clone(),
    }
}

/// Builds the payload GitLab would send for `job`.
pub fn to_payload(job: &CompiledJob, ctx: &PayloadContext<'_>) -> JobPayload {
    let timeout = job.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS);
    let token = Secret::new(format!("local-{}-{}", ctx.pipeline_id, ctx.job_id));
    let mut script = job.before_script.clone();
    script.extend(job.script.iter().cloned());
    let mut steps = vec![Step {
        name: STEP_SCRIPT.into(),
        script,
        timeout,
        when: model::When::OnSuccess,
        allow_failure: false,
    }];
    if !job.after_script.is_empty() {
        steps.push(Step {
            name: STEP_AFTER_SCRIPT.into(),
            script: job.after_script.clone(),
            timeout,
            when: model::When::Always,
            allow_failure: true,
        });
    }
    let dependencies = ctx
        .dependencies
        .iter()
        .map(|(id, name, size)| Dependency {
            id: *id,
            name: name.clone(),
            token: token.clone(),
            artifacts_file: Some(ArtifactsFile {
                filename: "artifacts.zip".into(),
                size: *size,
            }),
        })
        .collect();
    let hooks = if job.pre_get_sources_script.is_empty() {
        Vec::new()
    } else {
        vec![Hook {
            name: HOOK_PRE_GET_SOURCES.into(),
            script: job.pre_get_sources_script.clone(),
        }]
    };
    let variables = job_variables(job, ctx, &token);
    JobPayload {
        id: ctx.job_id,
        token,
        // GitLab's default strategy for a new project (a local job's directory is fresh
        // either way).
        allow_git_fetch: true,
        hooks,
        job_info: JobInfo {
            id: ctx.job_id,
            name: job.name.clone(),
            stage: job.stage.clone(),
            pipeline_id: ctx.pipeline_id,
            project_name: ctx.project_name.into(),
            project_full_path: ctx.project_path.into(),
            ..JobInfo::default()
        },
        git_info: GitInfo {
            repo_url: Secret::new(String::new()),
            git_ref: ctx.git_ref.into(),
            sha: ctx.sha.into(),
            ref_type: "branch".into(),
            depth: DEFAULT_GIT_DEPTH,
            ..GitInfo::default()
        },
        runner_info: RunnerInfo {
            timeout,
            ..RunnerInfo::default()
        },
        variables,
        steps,
        image: job.image.as_ref().map(image),
        services: job.services.iter().map(service).collect(),
        artifacts: job.artifacts.iter().map(artifact).collect(),
        cache: job.cache.iter().map(cache).collect(),
        dependencies,
        features: Features {
            trace_sections: true,
            ..Features::default()
        },
        ..JobPayload::default()
    }
}

/// Whether a failure with this exit code is allowed by the job.
pub fn failure_allowed(job: &CompiledJob, exit_code: Option<i32>) -> bool {
    match &job.allow_failure {
        AllowFailure::No => false,
        other => other.allows(exit_code),
    }
}
