//! `flotilla exec`: run the jobs of `.gitlab-ci.yml` on a local fleet, with live progress
//! and a summary.

use crate::cli::ExecArgs;
use crate::config::RunnerConfig;
use crate::fleet::{self, FleetParts};
use crate::progress::Progress;
use anyhow::{Context, Result, bail};
use flotilla_ci::{self as ci, CompileOptions, Pipeline};
use flotilla_dispatch::{ISOLATION_VARIABLE, level_index, requested_level_of};
use flotilla_job::{LocalArtifactStore, LocalCacheStore};
use flotilla_pipeline::{ExecConfig, ExecEvent, PipelineOutcome, run_pipeline};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Exit status when the pipeline cannot be compiled or the fleet cannot start.
const SETUP_FAILED: u8 = 2;

/// Exit status after Ctrl-C (128 + SIGINT, as a shell reports it).
const INTERRUPTED: u8 = 130;

/// Runs `flotilla exec`.
pub fn run(args: &ExecArgs, out: &mut dyn Write, err: &mut dyn Write) -> ExitCode {
    // `--isolation LEVEL` is the variable that picks a job's level, given to every job.
    let mut args = args.clone();
    if let Some(level) = args.isolation.clone() {
        args.variables.push((ISOLATION_VARIABLE.to_string(), level));
    }
    let args = &args;
    let dir = match project_dir(args) {
        Ok(d) => d,
        Err(e) => {
            let _ = writeln!(err, "error: {e:#}");
            return ExitCode::from(SETUP_FAILED);
        }
    };
    let Some((mut runner, host)) = runner(args, &dir, err) else {
        return ExitCode::from(SETUP_FAILED);
    };
    if let Some(n) = args.concurrency {
        at_most(&mut runner, n);
    }
    let predefined = predefined_variables(&dir);
    let Some(pipeline) = compile(args, &dir, &predefined, args.manual, err) else {
        return ExitCode::from(SETUP_FAILED);
    };
    // An image the run cannot honour is said on the terminal, not only in the job's log.
    for job in &pipeline.jobs {
        let Some(image) = job.image.as_ref().filter(|i| !i.name.trim().is_empty()) else {
            continue;
        };
        if job_level(job, &runner) == "shell" {
            let _ = writeln!(
                err,
                "warning: job {} names image {}, which runs at the shell level here: on this \
                 host, not in the image{}",
                job.name,
                image.name,
                match &host {
                    Some(h) if h.docker.is_err() =>
                        " (no Docker engine answers; see the first line)",
                    _ => "",
                }
            );
        }
    }
    if args.list || args.list_json {
        // Manual jobs are listed even when this run would leave them out: compiled again with
        // them (quietly; the warnings were printed once).
        let with_manual = (!args.manual)
            .then(|| compile(args, &dir, &predefined, true, &mut std::io::sink()))
            .flatten();
        list(&pipeline, with_manual.as_ref(), &runner, args, out);
        return ExitCode::SUCCESS;
    }
    if pipeline.jobs.is_empty() {
        let _ = writeln!(err, "nothing to run: the pipeline has no jobs");
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "error: cannot start the async runtime: {e}");
            return ExitCode::from(SETUP_FAILED);
        }
    };
    match runtime.block_on(execute(args, &runner, &dir, &pipeline, predefined, err)) {
        Ok((outcome, interrupted)) => {
            summary(&outcome, out);
            if interrupted {
                // As a shell reports a command ended by SIGINT.
                ExitCode::from(INTERRUPTED)
            } else if outcome.passed() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            let _ = writeln!(err, "error: {e:#}");
            ExitCode::from(SETUP_FAILED)
        }
    }
}

fn project_dir(args: &ExecArgs) -> Result<PathBuf> {
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("the current directory")?,
    };
    let dir = dir
        .canonicalize()
        .with_context(|| format!("project directory {}", dir.display()))?;
    if !dir.join(&args.file).is_file() {
        bail!("{} has no {}", dir.display(), args.file);
    }
    Ok(dir)
}

/// The pipeline's predefined variables, with a pipeline id no earlier run in this project
/// used (its logs go to `.flotilla/logs/<id>`).
fn predefined_variables(dir: &Path) -> Vec<(String, String)> {
    let mut vars = ci::predefined_variables(dir);
    let now = vars
        .iter()
        .find(|(k, _)| k == "CI_PIPELINE_ID")
        .and_then(|(_, v)| v.parse::<u64>().ok())
        .unwrap_or(1);
    let used = std::fs::read_dir(dir.join(".flotilla").join("logs"))
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().to_str()?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let id = next_pipeline_id(now, &used).to_string();
    for (k, v) in &mut vars {
        if k == "CI_PIPELINE_ID" || k == "CI_PIPELINE_IID" {
            v.clone_from(&id);
        }
    }
    vars
}

/// The clock's id (seconds since the epoch), or one more than the largest already used when
/// an earlier run in the same second (or a clock set back) took it.
fn next_pipeline_id(now: u64, used: &[u64]) -> u64 {
    match used.iter().max() {
        Some(&last) if last >= now => last + 1,
        _ => now,
    }
}

/// Compiles (with the manual jobs when `include_manual`) and selects; prints errors and
/// warnings.
fn compile(
    args: &ExecArgs,
    dir: &Path,
    predefined: &[(String, String)],
    include_manual: bool,
    err: &mut dyn Write,
) -> Option<Pipeline> {
    // `rules:changes` compare against the default branch, as a merge request pipeline would.
    let default_branch = predefined
        .iter()
        .find(|(k, _)| k == "CI_DEFAULT_BRANCH")
        .map_or("main", |(_, v)| v.as_str());
    let changes = ci::local_changes(dir, default_branch);
    let options = CompileOptions {
        project_dir: dir.to_path_buf(),
        ci_file: args.file.clone(),
        variables: predefined.to_vec(),
        user_variables: args.variables.clone(),
        include_manual,
        changed_files: changes.as_ref().map(|c| c.files.clone()),
        inputs: args.inputs.clone(),
        component_paths: args
            .component_paths
            .iter()
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .collect(),
    };
    let pipeline = match ci::compile(&options) {
        Ok(p) => p,
        Err(e) => {
            // The warnings first: a skipped include often explains the errors.
            for w in &e.warnings {
                let _ = writeln!(err, "warning: {w}");
            }
            for e in e.errors() {
                let _ = writeln!(err, "error: {e}");
            }
            return None;
        }
    };
    for w in &pipeline.warnings {
        let _ = writeln!(err, "warning: {w}");
    }
    for n in &pipeline.notes {
        let _ = writeln!(err, "note: {n}");
    }
    if pipeline.uses_changes {
        let _ = match &changes {
            Some(c) => writeln!(
                err,
                "note: rules:changes compare against the merge base of {} and HEAD, uncommitted \
                 and untracked files included: {} changed file{}",
                c.base,
                c.files.len(),
                if c.files.len() == 1 { "" } else { "s" }
            ),
            None => writeln!(
                err,
                "note: git cannot tell what changed (no repository, no commit, or no branch \
                 {default_branch}): rules:changes hold, with a warning"
            ),
        };
    }
    if let Some(why) = &pipeline.workflow_excluded {
        let _ = writeln!(err, "the pipeline does not run: {why}");
    }
    if args.jobs.is_empty() && args.stage.is_none() {
        return Some(pipeline);
    }
    let names: Vec<&str> = args.jobs.iter().map(String::as_str).collect();
    match pipeline.select(&names, args.stage.as_deref(), args.needs) {
        Ok(p) => {
            // What a job alone runs without (its needs were not selected) is said once.
            for n in p.notes.iter().skip(pipeline.notes.len()) {
                let _ = writeln!(err, "note: {n}");
            }
            Some(p)
        }
        Err(e) => {
            for e in e.errors() {
                let _ = writeln!(err, "error: {e}");
            }
            None
        }
    }
}

/// Creates `.flotilla` with a `.gitignore` that ignores everything in it (itself included), so
/// that exec's logs and cache stay out of `git status` without touching the project's files.
fn keep_out_of_git(state: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(state)?;
    // Logs, caches and snapshots may hold what jobs held: for this user only.
    std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o700))?;
    let ignore = state.join(".gitignore");
    if !ignore.exists() {
        std::fs::write(
            &ignore,
            "# Written by flotilla exec: its logs and cache are not part of the project.\n*\n",
        )?;
    }
    Ok(())
}

/// Creates `logs/<id>` and points `logs/latest` at it (replaced in one rename), so the last
/// run's logs are always at `.flotilla/logs/latest`.
fn point_latest(logs: &Path, id: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(logs.join(id))?;
    let staging = logs.join(format!(".latest-{id}"));
    match std::fs::remove_file(&staging) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::os::unix::fs::symlink(id, &staging)?;
    std::fs::rename(&staging, logs.join("latest"))
}

/// `--list`: the compiled pipeline as a table. `with_manual` is the same pipeline with its
/// manual jobs, when this run leaves them out: they are listed too, marked as not run.
/// The runner jobs run on: the first of `--config`, or the embedded default. Errors and
/// warnings of the file are printed.
/// The runner of this run: the configured one (`--config`, else `.flotilla.toml`), or the
/// embedded default with the levels this host offers (`Some` of them).
fn runner(
    args: &ExecArgs,
    dir: &Path,
    err: &mut dyn Write,
) -> Option<(RunnerConfig, Option<crate::fleet::embedded::HostLevels>)> {
    let discovered = dir.join(".flotilla.toml");
    let path = match &args.config {
        Some(path) => path.clone(),
        None if discovered.is_file() => {
            let _ = writeln!(err, "using the fleet of {}", discovered.display());
            discovered
        }
        None => {
            let host = crate::fleet::embedded::HostLevels::probe();
            let _ = writeln!(err, "{}", host.describe());
            return Some((crate::fleet::embedded::runner(&host), Some(host)));
        }
    };
    let path = &path;
    let config = crate::cli::load_config(path, err)?;
    let concurrent = config.concurrent;
    let Some(mut first) = config.runners.into_iter().next() else {
        let _ = writeln!(err, "error: {} configures no [[runners]]", path.display());
        return None;
    };
    // As `flotilla run` sizes this host for a runner without an autoscaler: its `limit`, else
    // `concurrent`.
    if first.limit == 0 && first.autoscaler.is_none() {
        first.limit = concurrent;
    }
    Some((first, None))
}

/// At most `n` jobs at once: the slots of this host (or of each instance).
fn at_most(runner: &mut RunnerConfig, n: u32) {
    match &mut runner.autoscaler {
        Some(a) => a.capacity_per_instance = n,
        None => runner.limit = n,
    }
}

/// The isolation level `job` runs at on `runner`, as the dispatcher will choose it: the last
/// `FLOTILLA_ISOLATION` among the job's variables, then `--variable`s, else the runner's
/// level for jobs with an image when the job names one, else the runner's default. A level
/// the runner does not offer is shown as refused.
fn job_level(job: &ci::CompiledJob, runner: &RunnerConfig) -> String {
    let levels = runner.isolation_levels();
    let offered: Vec<&'static str> = levels.all().iter().map(|l| l.as_str()).collect();
    let for_images = runner
        .image_isolation()
        .and_then(|level| offered.iter().position(|o| *o == level.as_str()));
    // The compiled variables hold those given on the command line (`--variable`,
    // `--isolation`) in GitLab's order of precedence, the last winning, as the payload has them.
    let asked = requested_level_of(
        job.variables
            .iter()
            .map(|v| (v.key.as_str(), v.value.as_str())),
    );
    let has_image = job
        .image
        .as_ref()
        .is_some_and(|i| !i.name.trim().is_empty());
    match level_index(&offered, for_images, asked.as_deref(), has_image) {
        Ok(at) => offered[at].to_string(),
        Err(refused) => format!("{} (not offered: {levels})", refused.asked),
    }
}

fn list(
    p: &Pipeline,
    with_manual: Option<&Pipeline>,
    runner: &RunnerConfig,
    args: &ExecArgs,
    out: &mut dyn Write,
) {
    let in_run = |name: &str| p.job(name).is_some();
    let shown: Vec<&ci::CompiledJob> = match with_manual {
        Some(all) => all
            .jobs
            .iter()
            .filter(|j| in_run(&j.name) || j.when == ci::When::Manual)
            .collect(),
        None => p.jobs.iter().collect(),
    };
    if args.json || args.list_json {
        let jobs: Vec<serde_json::Value> = shown
            .iter()
            .map(|j| {
                serde_json::json!({
                    "name": j.name,
                    "stage": j.stage,
                    "when": j.when.as_str(),
                    "runs": in_run(&j.name),
                    "needs": j.needs.as_ref().map(|n| n.iter().map(|n| n.job.clone()).collect::<Vec<_>>()),
                    "allow_failure": !matches!(j.allow_failure, ci::AllowFailure::No),
                    "isolation": job_level(j, runner),
                    "incomplete": j.incomplete,
                })
            })
            .collect();
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&jobs).unwrap_or_default()
        );
        return;
    }
    let mut hidden_manual = false;
    let any_incomplete = shown.iter().any(|j| j.incomplete);
    let rows: Vec<[String; 6]> = shown
        .iter()
        .map(|j| {
            let when = if in_run(&j.name) {
                j.when.as_str().to_string()
            } else {
                hidden_manual = true;
                "manual (not run)".to_string()
            };
            [
                if j.incomplete {
                    format!("{}*", j.name)
                } else {
                    j.name.clone()
                },
                j.stage.clone(),
                when,
                match &j.needs {
                    None => "(stages before)".into(),
                    Some(n) if n.is_empty() => "-".into(),
                    Some(n) => n
                        .iter()
                        .map(|n| n.job.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                },
                match &j.allow_failure {
                    ci::AllowFailure::No => "no".into(),
                    ci::AllowFailure::Yes => "yes".into(),
                    ci::AllowFailure::ExitCodes(c) => format!(
                        "exit codes {}",
                        c.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
                    ),
                },
                job_level(j, runner),
            ]
        })
        .collect();
    table(
        out,
        [
            "JOB",
            "STAGE",
            "WHEN",
            "NEEDS",
            "ALLOW FAILURE",
            "ISOLATION",
        ],
        &rows,
    );
    if hidden_manual {
        let _ = writeln!(
            out,
            "manual (not run): a manual job; `flotilla exec --manual` runs the manual jobs"
        );
    }
    if any_incomplete {
        let _ = writeln!(
            out,
            "*: the job's definition may be incomplete: it uses what an include local runs skip \
             may define (the warnings say what)"
        );
    }
    for x in &p.excluded {
        if shown.iter().any(|j| j.name == x.name) {
            continue;
        }
        let _ = writeln!(out, "not in this pipeline: {} ({})", x.name, x.reason);
    }
}

fn table<const N: usize>(out: &mut dyn Write, head: [&str; N], rows: &[[String; N]]) {
    let _ = out.write_all(crate::table::render("", &head, rows).as_bytes());
}

fn summary(outcome: &PipelineOutcome, out: &mut dyn Write) {
    let rows: Vec<[String; 4]> = outcome
        .jobs
        .iter()
        .map(|j| {
            [
                j.name.clone(),
                j.stage.clone(),
                if j.attempts > 1 {
                    format!("{} ({} attempts)", j.status.label(), j.attempts)
                } else {
                    j.status.label().to_string()
                },
                format!("{:.1}s", j.duration.as_secs_f64()),
            ]
        })
        .collect();
    let _ = writeln!(out);
    table(out, ["JOB", "STAGE", "STATUS", "DURATION"], &rows);
    let _ = writeln!(
        out,
        "\npipeline {} in {:.1}s",
        if outcome.passed() { "passed" } else { "failed" },
        outcome.duration.as_secs_f64()
    );
    if let Some(dir) = outcome
        .jobs
        .iter()
        .find_map(|j| j.log.as_ref())
        .and_then(|log| log.parent())
    {
        let _ = writeln!(
            out,
            "logs: {} (the last run's are also in .flotilla/logs/latest)",
            dir.display()
        );
    }
    // Why each job failed, in the words of its log's last error.
    for job in outcome
        .jobs
        .iter()
        .filter(|j| j.status.label().starts_with("failed"))
    {
        let why = job
            .log
            .as_deref()
            .and_then(last_error)
            .unwrap_or_else(|| "no error line in its log".to_string());
        let _ = writeln!(out, "{} failed: {why}", job.name);
    }
    if let Some(log) = outcome
        .jobs
        .iter()
        .find(|j| j.status.fails_pipeline())
        .and_then(|j| j.log.as_ref())
    {
        let _ = writeln!(out, "log of the first failed job: {}", log.display());
    }
}

/// Each job's artifacts unpacked into `kept/<job>/` (what an earlier run left there replaced),
/// and into the working tree `source` when given, in job order (a later job's file wins),
/// as gitlab-ci-local's `--artifacts-to-source` does.
fn keep_artifacts(
    outcome: &PipelineOutcome,
    store: &LocalArtifactStore,
    kept: &Path,
    source: Option<&Path>,
    err: &mut dyn Write,
) {
    let mut count = 0;
    let mut used = std::collections::HashSet::new();
    for job in &outcome.jobs {
        let archive = store.archive_path(job.job_id, "archive");
        if !archive.is_file() {
            continue;
        }
        // The job's name made a file name; two jobs never share a directory.
        let mut name = fleet::file_name(&job.name);
        if name.is_empty() || name.starts_with('.') || !used.insert(name.clone()) {
            name = format!("{name}-{}", job.job_id);
            used.insert(name.clone());
        }
        let dest = kept.join(name);
        if dest.exists()
            && let Err(e) = std::fs::remove_dir_all(&dest)
        {
            let _ = writeln!(err, "warning: cannot clear {}: {e}", dest.display());
            continue;
        }
        match flotilla_pipeline::kept::unpack(&archive, &dest) {
            Ok(_) => count += 1,
            Err(e) => {
                let _ = writeln!(err, "warning: the artifacts of {}: {e}", job.name);
                continue;
            }
        }
        if let Some(source) = source {
            match flotilla_pipeline::kept::unpack_into_source(&archive, source) {
                Ok((_, skipped)) if !skipped.is_empty() => {
                    let _ = writeln!(
                        err,
                        "warning: the artifacts of {} hold {} that a working tree does not take \
                         from a job (git's and flotilla's own files); left out",
                        job.name,
                        skipped.join(", ")
                    );
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = writeln!(
                        err,
                        "warning: copying the artifacts of {} into the working tree: {e}",
                        job.name
                    );
                }
            }
        }
    }
    if count > 0 {
        let _ = writeln!(
            err,
            "artifacts of {count} job(s) in {}{}",
            kept.display(),
            if source.is_some() {
                ", and copied into the working tree"
            } else {
                ""
            }
        );
    }
}

/// The last `ERROR:` line of a job log (its reason), rendered as plain text.
fn last_error(log: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    const TAIL: u64 = 64 * 1024;
    let mut file = std::fs::File::open(log).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(TAIL))).ok()?;
    let mut bytes = Vec::new();
    file.take(TAIL).read_to_end(&mut bytes).ok()?;
    let mut renderer = flotilla_job::LineRenderer::new("", false);
    let mut text = renderer.push(&bytes);
    text.extend(renderer.flush());
    let text = String::from_utf8_lossy(&text);
    let line = text.lines().rev().find(|l| l.contains("ERROR: "))?;
    let reason = line[line.find("ERROR: ")? + "ERROR: ".len()..].trim();
    let reason = reason.strip_prefix("Job failed: ").unwrap_or(reason);
    Some(
        crate::printable::printable(reason)
            .chars()
            .take(300)
            .collect(),
    )
}

async fn execute(
    args: &ExecArgs,
    runner: &RunnerConfig,
    dir: &Path,
    pipeline: &Pipeline,
    mut predefined: Vec<(String, String)>,
    err: &mut dyn Write,
) -> Result<(PipelineOutcome, bool)> {
    let state = dir.join(".flotilla");
    keep_out_of_git(&state).context("creating .flotilla")?;
    let pipeline_id = predefined
        .iter()
        .find(|(k, _)| k == "CI_PIPELINE_ID")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "0".into());
    let logs_dir = state.join("logs");
    point_latest(&logs_dir, &pipeline_id).context("creating the log directory")?;
    let scratch = tempfile::Builder::new()
        .prefix("flotilla-exec-")
        .tempdir()
        .context("creating a temporary directory for builds")?;
    let builds = scratch.path().join("builds");
    let artifacts_dir = scratch.path().join("artifacts");
    std::fs::create_dir_all(&builds).context("creating the builds directory")?;
    std::fs::create_dir_all(scratch.path().join("scratch"))
        .context("creating the scratch directory")?;
    let parts = FleetParts {
        artifacts: Arc::new(LocalArtifactStore::new(&artifacts_dir)),
        cache: Arc::new(LocalCacheStore::new(state.join("cache"))),
        snapshots: Some(Arc::new(LocalCacheStore::new(state.join("snapshots")))),
        local_builds_dir: builds.to_string_lossy().into_owned(),
        run_options: fleet::run_options(runner, scratch.path().join("scratch")),
        durable: None,
        // `--concurrency` (or a configured `limit`) bounds this host's slots; else one per core.
        local_slots: (runner.limit > 0).then_some(runner.limit as usize),
        // Runs side by side share this host's instance; a configured fleet elsewhere names
        // VMs per runner, as `flotilla run` does (process ids of this host mean nothing there).
        shared_instances: runner
            .autoscaler
            .as_ref()
            .is_none_or(|a| a.plugin.is_empty() || a.plugin == crate::registry::DEFAULT_PLUGIN),
    };
    let provider = fleet::provider(runner, Some(&state)).await?;
    let fleet = fleet::from_runner(runner, provider, parts).await?;
    let _ = writeln!(
        err,
        "running {} job(s) on {}",
        pipeline.jobs.len(),
        fleet.description
    );
    predefined.extend(args.variables.iter().cloned());
    let config = ExecConfig {
        project_dir: dir.to_path_buf(),
        logs_dir,
        artifacts_dir,
        predefined,
        follow: args.follow.iter().cloned().collect(),
        // Every job's lines as they come, unless one job is followed or --quiet asks for
        // the progress display.
        live: !args.quiet && args.follow.is_none(),
        color: std::io::stdout().is_terminal(),
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<ExecEvent>();
    let cancel = CancellationToken::new();
    let interrupted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let cancel = cancel.clone();
        let interrupted = interrupted.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                interrupted.store(true, std::sync::atomic::Ordering::SeqCst);
                cancel.cancel();
            }
        });
    }
    // Redrawn spinners and streamed lines would fight for the screen: progress in plain lines
    // whenever output streams.
    let plain = !args.quiet || args.follow.is_some() || !std::io::stderr().is_terminal();
    let mut progress = Progress::new(pipeline.jobs.len(), plain);
    let run = run_pipeline(
        pipeline,
        fleet.dispatcher.clone(),
        &config,
        tx,
        cancel.clone(),
    );
    tokio::pin!(run);
    let mut ticker = tokio::time::interval(std::time::Duration::from_millis(200));
    // A fleet that cannot make its first instance would leave the run waiting for one: when
    // the provider's failure has stood this long with nothing started (its retries back off,
    // the second one a minute later), the run stops and says why.
    const GIVE_UP_AFTER: std::time::Duration = std::time::Duration::from_secs(20);
    let mut started_any = false;
    let mut gave_up: Option<String> = None;
    let mut trouble_since: Option<std::time::Instant> = None;
    let outcome = loop {
        tokio::select! {
            result = &mut run => break result?,
            Some(event) = rx.recv() => {
                started_any |= matches!(event, ExecEvent::Started { .. });
                progress.event(&event);
            }
            _ = ticker.tick() => {
                progress.tick();
                // Only until the first job starts: then the fleet can make instances.
                let trouble = (!started_any && gave_up.is_none())
                    .then(|| fleet.scaler.creation_trouble())
                    .flatten();
                if trouble.is_none() {
                    trouble_since = None;
                }
                if let Some(trouble) = trouble
                    && trouble_since
                        .get_or_insert_with(std::time::Instant::now)
                        .elapsed()
                        >= GIVE_UP_AFTER
                {
                    gave_up = Some(format!(
                        "the fleet cannot make an instance: the provider failed ({} time(s) in \
                         {} s, nothing started), last with: {}",
                        trouble.failures,
                        GIVE_UP_AFTER.as_secs(),
                        trouble.error
                    ));
                    cancel.cancel();
                }
            }
        }
    };
    while let Ok(event) = rx.try_recv() {
        progress.event(&event);
    }
    progress.finish();
    let report = fleet
        .scaler
        .shutdown(std::time::Duration::from_secs(30))
        .await;
    tracing::debug!(?report, "fleet shut down");
    if runner.slot_cgroup_template.starts_with("flotilla-exec-") {
        crate::fleet::embedded::remove_exec_cgroups(Some(std::process::id()));
    }
    keep_artifacts(
        &outcome,
        &LocalArtifactStore::new(scratch.path().join("artifacts")),
        &state.join("artifacts"),
        args.artifacts_to_source.then_some(dir),
        err,
    );
    drop(scratch);
    if let Some(why) = gave_up {
        anyhow::bail!(why);
    }
    Ok((
        outcome,
        interrupted.load(std::sync::atomic::Ordering::SeqCst),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipeline_ids_never_repeat() {
        assert_eq!(next_pipeline_id(100, &[]), 100);
        assert_eq!(next_pipeline_id(100, &[50, 99]), 100);
        assert_eq!(next_pipeline_id(100, &[100]), 101);
        assert_eq!(next_pipeline_id(100, &[7, 103, 101]), 104);
    }
}
