//! Shared helpers for the job engine's integration tests: real bash, real git, real files.
#![allow(dead_code)]

use flotilla_fleet::Secret;
use flotilla_job::model::{
    GitInfo, JobInfo, RunnerInfo, STEP_AFTER_SCRIPT, STEP_SCRIPT, Step, When,
};
use flotilla_job::{
    BufferSink, JobCancel, JobPayload, JobResult, JobRunner, LocalArtifactStore, LocalCacheStore,
    LocalEnvironment, RunOptions, Variable,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A builds directory and local stores in a temporary directory.
pub(crate) struct Harness {
    pub root: tempfile::TempDir,
    pub artifacts: LocalArtifactStore,
    pub cache: LocalCacheStore,
    /// Whether helper file work is done in the test's process
    /// (`LocalEnvironment::with_helper_files_here`).
    pub files_here: bool,
}

impl Harness {
    pub(crate) fn new() -> Harness {
        let root = tempfile::tempdir().unwrap();
        let artifacts = LocalArtifactStore::new(root.path().join("store/artifacts"));
        let cache = LocalCacheStore::new(root.path().join("store/cache"));
        std::fs::create_dir_all(root.path().join("builds")).unwrap();
        Harness {
            root,
            artifacts,
            cache,
            files_here: false,
        }
    }

    /// One harness whose helper file work runs as commands, one where it runs in the test's
    /// process: every check must hold for both.
    pub(crate) fn both() -> [Harness; 2] {
        let mut here = Harness::new();
        here.files_here = true;
        [Harness::new(), here]
    }

    pub(crate) fn builds(&self) -> PathBuf {
        self.root.path().join("builds")
    }

    /// The project directory of the environment named `name`.
    pub(crate) fn project(&self, name: &str) -> PathBuf {
        self.builds().join(name)
    }

    pub(crate) fn env(&self, name: &str) -> LocalEnvironment {
        LocalEnvironment::new(self.builds(), self.project(name))
            .with_kill_grace(Duration::from_secs(2))
            .with_helper_files_here(self.files_here)
    }

    /// Runs `job` in the environment `name`; returns the result and the trace.
    pub(crate) async fn run(&self, name: &str, job: &JobPayload) -> (JobResult, String) {
        self.run_with(name, job, &JobCancel::new(), RunOptions::default())
            .await
    }

    pub(crate) async fn run_with(
        &self,
        name: &str,
        job: &JobPayload,
        cancel: &JobCancel,
        options: RunOptions,
    ) -> (JobResult, String) {
        self.run_in(&self.env(name), job, cancel, options).await
    }

    /// Runs `job` in a given environment.
    pub(crate) async fn run_in(
        &self,
        env: &LocalEnvironment,
        job: &JobPayload,
        cancel: &JobCancel,
        options: RunOptions,
    ) -> (JobResult, String) {
        let runner = JobRunner::new(env, &self.artifacts, &self.cache).with_options(RunOptions {
            scratch_dir: Some(self.root.path().to_path_buf()),
            stop_grace: Duration::from_secs(5),
            ..options
        });
        let mut sink = BufferSink::new();
        let result = runner.run(job, &mut sink, cancel).await;
        (result, sink.text())
    }
}

/// A job with `script` (and no git: `GIT_STRATEGY=none`).
pub(crate) fn job(id: i64, script: &[&str]) -> JobPayload {
    JobPayload {
        id,
        token: Secret::new(format!("glcbt-64_jobtoken{id}")),
        job_info: JobInfo {
            name: format!("job-{id}"),
            stage: "test".into(),
            project_id: 7,
            project_name: "project".into(),
            project_full_path: "group/project".into(),
            ..Default::default()
        },
        git_info: GitInfo {
            git_ref: "main".into(),
            ref_type: "branch".into(),
            sha: "0000000000000000000000000000000000000000".into(),
            ..Default::default()
        },
        runner_info: RunnerInfo {
            timeout: 600,
            ..Default::default()
        },
        variables: vec![Variable::new("GIT_STRATEGY", "none")],
        steps: vec![Step {
            name: STEP_SCRIPT.into(),
            script: script.iter().map(|s| s.to_string()).collect(),
            when: When::OnSuccess,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Adds an after_script step.
pub(crate) fn with_after_script(mut job: JobPayload, script: &[&str]) -> JobPayload {
    job.steps.push(Step {
        name: STEP_AFTER_SCRIPT.into(),
        script: script.iter().map(|s| s.to_string()).collect(),
        when: When::Always,
        allow_failure: true,
        ..Default::default()
    });
    job
}

/// Runs git in `dir` and returns its stdout.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Whether the trace has a GitLab section named `name` (start and end markers).
pub(crate) fn has_section(trace: &str, name: &str) -> bool {
    let starts = trace.match_indices("section_start:").any(|(i, _)| {
        let rest = &trace[i + "section_start:".len()..];
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        digits > 0 && rest[digits..].starts_with(&format!(":{name}\r\x1b[0K"))
    });
    let ends = trace.match_indices("section_end:").any(|(i, _)| {
        let rest = &trace[i + "section_end:".len()..];
        let digits = rest.chars().take_while(|c| c.is_ascii_digit()).count();
        digits > 0 && rest[digits..].starts_with(&format!(":{name}\r\x1b[0K"))
    });
    starts && ends
}
