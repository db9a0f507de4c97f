//! The cgroup level, measured on this host with the local connector (needs root and writable
//! cgroups; prints figures, or says why it cannot):
//!
//! 1. **Overhead**: a whole trivial job (prepare, one stage, cleanup) at the `cgroup` level
//!    against the same job at the `shell` level, alternating. Target: ≤ 5 ms more per job.
//! 2. **Noisy neighbour**: a CPU-bound job's wall time alone, then next to a job that starts
//!    eight busy loops (the worst a job can do to a 2-core instance short of a fork bomb),
//!    first with both at the `shell` level, then with the neighbour at the `cgroup` level
//!    limited to half a CPU and 64 processes. Target: with cgroups the job's wall time changes
//!    by ≤ 20 %. The figures share the machine with whatever else runs: compare the ratios.
//!
//! `cargo bench -p flotilla-isolate --bench cgroup_isolation`

use flotilla_connect::Connector;
use flotilla_connect::local::LocalConnector;
use flotilla_isolate::cgroup::{CgroupConfig, CgroupIsolation, SlotLimits};
use flotilla_isolate::{IsolatedEnvironment, Isolation, PrepareRequest, ShellIsolation};
use flotilla_job::model::JobInfo;
use flotilla_job::{ExecCommand, ExecSpec, JobPayload, Place};
use flotilla_testkit::infra::{Infra, available};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const ROUNDS: usize = 40;
/// The CPU-bound job: a shell loop of about a second on this machine.
const WORK: &str = "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done";
/// The neighbour: eight busy loops until killed.
const HOG: &str = "for n in 1 2 3 4 5 6 7 8; do ( while :; do :; done ) & done; wait";

fn job(id: i64) -> JobPayload {
    JobPayload {
        id,
        job_info: JobInfo {
            project_full_path: "bench/project".into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

async fn prepared(
    level: &dyn Isolation,
    builds: &Path,
    id: i64,
    slot: usize,
) -> Box<dyn IsolatedEnvironment> {
    let j = job(id);
    let connector: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let env = level
        .prepare(PrepareRequest {
            job: &j,
            instance_id: "this-host",
            slot,
            connector,
            builds_dir: builds.to_str().unwrap().to_string(),
            custom_build_dir: None,
        })
        .await
        .expect("prepare");
    env.prepare(&mut tokio::io::sink(), CancellationToken::new())
        .await
        .expect("ready");
    env
}

async fn stage(env: &dyn IsolatedEnvironment, script: &str, cancel: CancellationToken) {
    let _ = env
        .exec(ExecSpec {
            place: Place::Build,
            command: ExecCommand::Script(script.to_string()),
            stdin: None,
            stdout: Box::new(tokio::io::sink()),
            stderr: Box::new(tokio::io::sink()),
            cancel,
        })
        .await;
}

/// One whole trivial job on `slot`.
async fn trivial_job(level: &dyn Isolation, builds: &Path, id: i64) -> Duration {
    let started = Instant::now();
    let env = prepared(level, builds, id, 0).await;
    stage(&*env, "true", CancellationToken::new()).await;
    env.cleanup().await.expect("cleanup");
    started.elapsed()
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The CPU-bound job's wall time on slot 0 at `level`, next to `neighbour` (a level and its
/// script on slot 1) when given.
async fn work_time(
    level: &dyn Isolation,
    builds: &Path,
    neighbour: Option<&dyn Isolation>,
) -> Duration {
    let hog = match neighbour {
        Some(n) => {
            let env = prepared(n, builds, 99, 1).await;
            let cancel = CancellationToken::new();
            let c = cancel.clone();
            let env: Arc<dyn IsolatedEnvironment> = Arc::from(env);
            let running = {
                let env = env.clone();
                tokio::spawn(async move { stage(&*env, HOG, c).await })
            };
            // Let the loops start.
            tokio::time::sleep(Duration::from_millis(300)).await;
            Some((env, cancel, running))
        }
        None => None,
    };
    let env = prepared(level, builds, 1, 0).await;
    let started = Instant::now();
    stage(&*env, WORK, CancellationToken::new()).await;
    let took = started.elapsed();
    env.cleanup().await.expect("cleanup");
    if let Some((env, cancel, running)) = hog {
        cancel.cancel();
        let _ = running.await;
        let _ = env.cleanup().await;
    }
    took
}

#[tokio::main]
async fn main() {
    if !available(Infra::Cgroups) {
        eprintln!(
            "cgroup_isolation: needs root and writable cgroups (cgroup v1 cpu/memory/pids or v2); not measured"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let builds = dir.path().join("builds");
    let template = format!("flotilla-bench-{}/slot-${{slot}}", std::process::id());
    let shell = ShellIsolation::new();
    let cgroup_of = |limits| {
        CgroupIsolation::new(CgroupConfig {
            template: template.clone(),
            limits,
            ..CgroupConfig::default()
        })
        .unwrap()
    };
    let cgroup = cgroup_of(SlotLimits {
        memory_bytes: Some(1 << 30),
        pids: Some(512),
        ..SlotLimits::default()
    });

    // 1. Overhead, alternating.
    let (mut plain, mut confined) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS + 5 {
        let a = trivial_job(&shell, &builds, round as i64).await;
        let b = trivial_job(&cgroup, &builds, round as i64).await;
        if round >= 5 {
            plain.push(a);
            confined.push(b);
        }
    }
    let (p, c) = (median(&mut plain), median(&mut confined));
    println!(
        "overhead: a trivial job at shell {:.1} ms, at cgroup {:.1} ms: +{:.1} ms per job (target <= 5 ms), medians of {ROUNDS}",
        ms(p),
        ms(c),
        ms(c.saturating_sub(p))
    );

    // 2. Noisy neighbour.
    let limited = cgroup_of(SlotLimits {
        cpu_millis: Some(500),
        pids: Some(64),
        ..SlotLimits::default()
    });
    let mut alone = Vec::new();
    let mut next_to_shell = Vec::new();
    let mut next_to_cgroup = Vec::new();
    for _ in 0..3 {
        alone.push(work_time(&shell, &builds, None).await);
        next_to_shell.push(work_time(&shell, &builds, Some(&shell)).await);
        next_to_cgroup.push(work_time(&shell, &builds, Some(&limited)).await);
    }
    let (a, s, c) = (
        median(&mut alone),
        median(&mut next_to_shell),
        median(&mut next_to_cgroup),
    );
    println!(
        "noisy neighbour (8 busy loops): the job alone {:.0} ms; next to it at shell {:.0} ms ({:.2}x); next to it at cgroup (0.5 CPU, 64 pids) {:.0} ms ({:.2}x; target <= 1.20x)",
        ms(a),
        ms(s),
        s.as_secs_f64() / a.as_secs_f64(),
        ms(c),
        c.as_secs_f64() / a.as_secs_f64()
    );
    for h in ["cpu", "memory", "pids"] {
        let _ = std::fs::remove_dir(
            Path::new("/sys/fs/cgroup")
                .join(h)
                .join(format!("flotilla-bench-{}", std::process::id())),
        );
    }
}
