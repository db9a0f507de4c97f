//! Shell isolation's overhead: running a trivial job stage (the real generated `step_script`
//! of a job whose script is `true`, with every variable exported) against a bare `true`, over
//! the same SSH connection to a docker-provider instance, alternating. Target: ≤ 50 ms.
//! A whole trivial job (every stage) is timed too, for information.
//!
//! `cargo bench -p flotilla-isolate --bench shell_overhead` (needs Docker; prints figures).

use flotilla_connect::{Connector, ConnectorExt, ExecRequest};
use flotilla_fleet::Secret;
use flotilla_isolate::{Isolation, PrepareRequest, ShellIsolation};
use flotilla_job::model::{JobInfo, RunnerInfo, STEP_SCRIPT, Step, When};
use flotilla_job::script::ScriptContext;
use flotilla_job::vars::{PredefinedContext, RunnerIdentity, predefined_defaults, runner_provided};
use flotilla_job::{
    BufferSink, ExecCommand, ExecSpec, JobCancel, JobPayload, JobRunner, JobVariables,
    LocalArtifactStore, LocalCacheStore, Place, Variable,
};
use flotilla_testkit::docker_fleet::{DockerFleet, FleetIsolation, FleetOptions};
use flotilla_testkit::infra::{Infra, available};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const WARMUP: usize = 5;
const ROUNDS: usize = 60;
const JOBS: usize = 15;

fn job() -> JobPayload {
    JobPayload {
        id: 1,
        token: Secret::new("glcbt-bench".to_string()),
        job_info: JobInfo {
            name: "bench".into(),
            project_full_path: "bench/project".into(),
            ..Default::default()
        },
        runner_info: RunnerInfo {
            timeout: 600,
            ..Default::default()
        },
        variables: vec![
            Variable::new("GIT_STRATEGY", "none"),
            Variable::new("SOME_SETTING", "a value with 'quotes' and $dollars"),
            Variable::new("TOKEN", "s3cret").masked(),
        ],
        steps: vec![Step {
            name: STEP_SCRIPT.into(),
            script: vec!["true".into()],
            when: When::OnSuccess,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

async fn bare_true(c: &dyn Connector) -> Duration {
    let t = Instant::now();
    let s = c.exec(ExecRequest::new("true")).await.expect("true");
    assert!(s.success());
    t.elapsed()
}

#[tokio::main]
async fn main() {
    if !available(Infra::Docker) {
        eprintln!("SKIPPED: shell_overhead needs a Docker engine");
        return;
    }
    let fleet = DockerFleet::start(FleetOptions::new("bench-shell", FleetIsolation::Shell)).await;
    let instance = fleet.instances()[0].clone();
    let connector: Arc<dyn Connector> = fleet.ssh(&instance).await;
    let j = job();
    let env = ShellIsolation::new()
        .prepare(PrepareRequest {
            job: &j,
            instance_id: &instance,
            slot: 0,
            connector: connector.clone(),
            builds_dir: "/builds".into(),
            custom_build_dir: None,
        })
        .await
        .expect("prepare");
    let paths = env.paths().clone();
    connector
        .output(&format!("mkdir -p {}", paths.project_dir))
        .await
        .expect("mkdir");

    // The step_script the runner would send for this job.
    let runner = RunnerIdentity::default();
    let ctx = PredefinedContext {
        builds_dir: &paths.builds_dir,
        project_dir: &paths.project_dir,
        tmp_dir: &paths.tmp_dir,
        concurrent_id: 0,
        concurrent_project_id: 0,
        runner: &runner,
        job_status: "running",
        disposable: false,
    };
    let vars = JobVariables::new(
        predefined_defaults(&j, &ctx)
            .into_iter()
            .chain(j.variables.iter().cloned())
            .chain(runner_provided(&j, &ctx)),
        &paths.tmp_dir,
    );
    let script = ScriptContext {
        vars: &vars,
        builds_dir: &paths.builds_dir,
        project_dir: &paths.project_dir,
        debug_trace: false,
    }
    .user_script(&["true".to_string()]);

    let mut bare = Vec::new();
    let mut stage = Vec::new();
    for round in 0..WARMUP + ROUNDS {
        let b = bare_true(&*connector).await;
        let mut out = Vec::new();
        let t = Instant::now();
        let status = env
            .exec(ExecSpec {
                place: Place::Build,
                command: ExecCommand::Script(script.clone()),
                stdin: None,
                stdout: Box::new(&mut out),
                stderr: Box::new(tokio::io::sink()),
                cancel: CancellationToken::new(),
            })
            .await
            .expect("stage");
        let s = t.elapsed();
        assert!(status.success(), "{}", String::from_utf8_lossy(&out));
        if round >= WARMUP {
            bare.push(b);
            stage.push(s);
        }
    }

    let dir = tempfile::tempdir().expect("tempdir");
    let artifacts = LocalArtifactStore::new(dir.path().join("a"));
    let cache = LocalCacheStore::new(dir.path().join("c"));
    let mut jobs = Vec::new();
    let mut bare_for_jobs = Vec::new();
    for _ in 0..JOBS {
        bare_for_jobs.push(bare_true(&*connector).await);
        let mut sink = BufferSink::new();
        let t = Instant::now();
        let r = JobRunner::new(&*env, &artifacts, &cache)
            .run(&j, &mut sink, &JobCancel::new())
            .await;
        jobs.push(t.elapsed());
        assert!(r.outcome.is_success(), "{}", sink.text());
    }

    let (b, s) = (median(&mut bare), median(&mut stage));
    println!("shell isolation over one SSH connection ({ROUNDS} rounds, medians)");
    println!("  bare `true`:                            {}", ms(b));
    println!(
        "  trivial step_script ({} bytes, {} variables): {}",
        script.len(),
        vars.iter().count(),
        ms(s)
    );
    println!("  overhead: {} (target <= 50 ms)", ms(s.saturating_sub(b)));
    let (jb, jt) = (median(&mut bare_for_jobs), median(&mut jobs));
    println!(
        "  whole trivial job, all stages ({JOBS} runs): {} = {:.1} x bare `true`",
        ms(jt),
        jt.as_secs_f64() / jb.as_secs_f64()
    );
}
