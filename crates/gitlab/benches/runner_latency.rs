//! Job source figures against the fake GitLab with the real dispatcher (local provider,
//! shell isolation, 4 slots, preemptive): time from a job being queued to its first trace
//! byte arriving at GitLab, and trivial jobs per second with the manager's CPU time per job
//! (the fake GitLab runs in the same process and is included). Run with
//! `cargo bench -p flotilla-gitlab --bench runner_latency`.

use flotilla_dispatch::{Dispatcher, DispatcherConfig, LocalConnectors};
use flotilla_fleet::Secret;
use flotilla_gitlab::{Client, ClientConfig, Info, JobSource, SourceConfig, TraceOptions};
use flotilla_isolate::ShellIsolation;
use flotilla_job::{LocalArtifactStore, LocalCacheStore, RunOptions};
use flotilla_provider_local::LocalGroup;
use flotilla_scaler::{Policy, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_testkit::fake_gitlab::{FakeGitLab, JobBuilder};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "glrt-bench-token";

/// User + system CPU time of this process, from /proc/self/stat.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main]
async fn main() {
    let fake = FakeGitLab::builder()
        .runner_token(TOKEN)
        .poll_duration(Duration::from_secs(50))
        .trace_update_interval(3)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let scaler = ScalerBuilder::new(
        Arc::new(LocalGroup::new()),
        ScalerConfig {
            capacity_per_instance: 4,
            max_instances: 1,
            update_interval: Duration::from_millis(200),
            ..ScalerConfig::default()
        },
    )
    .schedule(Schedule::single(Policy {
        idle_count: 4,
        preemptive_mode: Some(true),
        ..Policy::default()
    }))
    .start()
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dispatcher = Dispatcher::new(
        scaler,
        DispatcherConfig {
            isolation: Arc::new(ShellIsolation::new()).into(),
            connectors: Arc::new(LocalConnectors),
            artifacts: Arc::new(LocalArtifactStore::new(dir.path().join("artifacts"))),
            cache: Arc::new(LocalCacheStore::new(dir.path().join("cache"))),
            run_options: RunOptions {
                scratch_dir: Some(dir.path().to_path_buf()),
                ..RunOptions::default()
            },
            builds_dir: dir.path().join("builds").to_string_lossy().into_owned(),
            custom_build_dir: None,
            log_addresses: flotilla_dispatch::LogAddresses::default(),
        },
    );
    let client = Arc::new(
        Client::new(ClientConfig::new(
            fake.url(),
            Secret::new(TOKEN.to_string()),
            "s_000000000000".into(),
            Info::flotilla("instance", false),
        ))
        .unwrap(),
    );
    let source = Arc::new(JobSource::new(
        client,
        Arc::new(dispatcher),
        SourceConfig {
            name: "bench".into(),
            request_concurrency: 4,
            check_interval: Duration::from_millis(200),
            trace: TraceOptions::default(),
            ..SourceConfig::default()
        },
    ));
    let s = source.clone();
    let run = tokio::spawn(async move { s.run().await });

    // Warm-up.
    let w = fake.enqueue(TOKEN, JobBuilder::new("warm").script(["true"]));
    fake.wait_finished(&[w], Duration::from_secs(30)).await;

    // Queue → first trace byte, one job at a time.
    let mut lat = Vec::new();
    for i in 0..30 {
        let queued = tokio::time::Instant::now();
        let id = fake.enqueue(
            TOKEN,
            JobBuilder::new(format!("lat-{i}")).script(["echo hi"]),
        );
        fake.wait_finished(&[id], Duration::from_secs(30)).await;
        let first = fake
            .requests_to("PATCH", &format!("/api/v4/jobs/{id}/trace"))
            .into_iter()
            .map(|r| r.at)
            .min()
            .expect("a trace PATCH");
        lat.push(first - queued);
    }
    lat.sort();
    println!(
        "queue -> first trace byte: p50 {:?}  p95 {:?}  max {:?}  (n={})",
        percentile(&lat, 0.5),
        percentile(&lat, 0.95),
        lat[lat.len() - 1],
        lat.len()
    );

    // Throughput of trivial jobs.
    let n = 200;
    let cpu0 = cpu_time();
    let t0 = Instant::now();
    let ids: Vec<i64> = (0..n)
        .map(|i| fake.enqueue(TOKEN, JobBuilder::new(format!("tp-{i}")).script(["true"])))
        .collect();
    assert!(fake.wait_finished(&ids, Duration::from_secs(600)).await);
    let wall = t0.elapsed();
    let cpu = cpu_time().checked_sub(cpu0).unwrap();
    println!(
        "throughput: {n} trivial jobs in {:.2?} = {:.1} jobs/s (4 slots, request_concurrency 4); manager CPU {:.2?} per job",
        wall,
        n as f64 / wall.as_secs_f64(),
        cpu / n
    );
    source.stop_handle().graceful();
    let _ = run.await;
}
