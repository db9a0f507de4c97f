//! `flotilla run` (the real binary, built with the bench profile) on a warm docker fleet,
//! against the fake GitLab running in this process:
//!
//! - **latency**: the time from a job being queued to its first trace byte arriving at the
//!   fake GitLab, one job at a time, with where it goes (hand-out, accept, first PATCH);
//! - **throughput**: how many trivial jobs per second one manager takes and finishes, and
//!   the manager's CPU time per job (utime + stime of the child `flotilla run` process, from
//!   `/proc/<pid>/stat`, before and after; the fake GitLab's CPU is not counted).
//!
//! The fleet: the docker provider, shell isolation, `INSTANCES` instances with `SLOTS` slots
//! each, every slot idle and every instance reached once before anything is measured.
//! Targets: p50 latency ≤ 250 ms; ≥ 50 jobs/s.
//!
//! `cargo bench -p flotilla --bench run_throughput` (needs Docker; skips with a message
//! without it). `RUN_BENCH_JOBS` sets the throughput batch (default 500); `RUN_BENCH_LOG`
//! the manager's `RUST_LOG` (default `info`); `RUN_BENCH_KEEP=1` keeps the manager's log.

use flotilla_provider_docker::GROUP_LABEL;
use flotilla_testkit::fake_gitlab::{
    FakeGitLab, FakeJobState, JobBuilder, RecordedBody, RecordedRequest,
};
use flotilla_testkit::images::instance_image;
use flotilla_testkit::infra::{Infra, available};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "glrt-run-throughput-bench";
const INSTANCES: usize = 4;
const SLOTS: usize = 8;
const LATENCY_JOBS: usize = 60;
/// The file the instance-ready command leaves on every instance once its slots are offered.
const READY_FILE: &str = "/tmp/flotilla-bench-ready";

/// Removes every container of the group when dropped.
struct GroupGuard(String);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        for id in containers(&self.0) {
            let _ = Command::new("docker")
                .args(["rm", "-f", "-v", &id])
                .output();
        }
    }
}

fn containers(group: &str) -> Vec<String> {
    Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label={GROUP_LABEL}={group}"))
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The child manager; killed when dropped.
struct Manager {
    child: Child,
    log: PathBuf,
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Manager {
    /// utime + stime of the manager process (all its threads).
    fn cpu(&self) -> Duration {
        proc_cpu(self.child.id()).unwrap_or_default()
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

/// CPU time used by the group's containers (sshd and the jobs' shells), from their cgroups
/// (v1 `cpuacct`, or v2 `cpu.stat`); `None` when neither is readable.
fn instances_cpu(group: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    for id in containers(group) {
        let full = Command::new("docker")
            .args(["inspect", "--format", "{{.Id}}", &id])
            .output()
            .ok()?;
        let full = String::from_utf8_lossy(&full.stdout).trim().to_string();
        let v1 = format!("/sys/fs/cgroup/cpuacct/docker/{full}/cpuacct.usage");
        let v2 = format!("/sys/fs/cgroup/system.slice/docker-{full}.scope/cpu.stat");
        if let Ok(ns) = std::fs::read_to_string(&v1) {
            total += Duration::from_nanos(ns.trim().parse().ok()?);
        } else if let Ok(stat) = std::fs::read_to_string(&v2) {
            let usec = stat
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))?
                .trim()
                .parse()
                .ok()?;
            total += Duration::from_micros(usec);
        } else {
            return None;
        }
    }
    Some(total)
}

/// utime + stime of the Docker engine (the pid in `/var/run/docker.pid`), if readable.
fn engine_cpu() -> Option<Duration> {
    let pid = std::fs::read_to_string("/var/run/docker.pid").ok()?;
    proc_cpu(pid.trim().parse().ok()?)
}

/// utime + stime of process `pid`, from `/proc/<pid>/stat`.
fn proc_cpu(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')').map(|(_, r)| r)?;
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields 14 and 15 of proc(5); after the command name, indices 11 and 12.
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(Duration::from_micros(ticks * 1_000_000 / hz))
}

/// (busy, total) jiffies of the whole host, from `/proc/stat`.
fn host_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return (0, 0);
    };
    let v: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    // idle + iowait are not busy.
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// utime + stime of this process (the fake GitLab and the bench itself).
fn own_cpu() -> Duration {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage fills the struct it is given.
    let usage = unsafe {
        libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr());
        usage.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

fn write_config(dir: &Path, url: &str, group: &str) -> PathBuf {
    let path = dir.join("config.toml");
    let slots = INSTANCES * SLOTS;
    std::fs::write(
        &path,
        format!(
            r#"concurrent = {slots}
check_interval = "100ms"
shutdown_timeout = 30

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "bench"
  url = "{url}"
  token = "{TOKEN}"
  executor = "instance"
  request_concurrency = {slots}

  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = {SLOTS}
    max_instances = {INSTANCES}
    instance_ready_command = "touch {READY_FILE}"

    [runners.autoscaler.plugin_config]
      name = "{group}"
      image = "{image}"

    [[runners.autoscaler.policy]]
      idle_count = {slots}
      idle_time = "1h"
"#,
            state = dir.join("state").display(),
            image = instance_image(),
        ),
    )
    .expect("writing the configuration");
    path
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

/// Waits until every instance of the group ran the ready command.
async fn wait_ready(group: &str, m: &Manager) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let ready = containers(group)
            .iter()
            .filter(|id| {
                Command::new("docker")
                    .args(["exec", id, "test", "-e", READY_FILE])
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .count();
        if ready >= INSTANCES {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {ready} of {INSTANCES} instances got ready; manager log:\n{}",
            m.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The first request of `method` to exactly `path` (optionally with a non-empty body).
fn first(
    requests: &[RecordedRequest],
    method: &str,
    path: &str,
    with_body: bool,
) -> Option<tokio::time::Instant> {
    requests
        .iter()
        .filter(|r| r.method == method && r.path == path)
        .filter(|r| !with_body || matches!(&r.body, RecordedBody::Bytes(b) if !b.is_empty()))
        .map(|r| r.at)
        .min()
}

#[tokio::main]
async fn main() {
    if !available(Infra::Docker) {
        println!("run_throughput: skipped, no Docker engine here (run scripts/setup.sh)");
        return;
    }
    let throughput_jobs: usize = std::env::var("RUN_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500);
    let group = format!("bench-run-{}", std::process::id());
    let _guard = GroupGuard(group.clone());
    let gl = FakeGitLab::builder()
        .runner_token(TOKEN)
        .poll_duration(Duration::from_secs(50))
        .trace_update_interval(3)
        .start()
        .await
        .expect("starting the fake GitLab");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let config = write_config(dir.path(), gl.url(), &group);
    let log = dir.path().join("manager.log");
    let child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["run", "--config"])
        .arg(&config)
        .env(
            "RUST_LOG",
            std::env::var("RUN_BENCH_LOG").unwrap_or_else(|_| "info".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("the log file"))
        .spawn()
        .expect("starting flotilla run");
    let m = Manager { child, log };

    // Warm: every instance ready, then every slot used once (SSH connections made, leftovers
    // swept) by jobs that overlap.
    let t0 = Instant::now();
    wait_ready(&group, &m).await;
    println!(
        "fleet: {INSTANCES} instances x {SLOTS} slots ready in {:.1?}",
        t0.elapsed()
    );
    let warm: Vec<i64> = (0..INSTANCES * SLOTS * 2)
        .map(|i| {
            gl.enqueue(
                TOKEN,
                JobBuilder::new(format!("warm-{i}")).script(["sleep 1"]),
            )
        })
        .collect();
    assert!(
        gl.wait_finished(&warm, Duration::from_secs(300)).await,
        "warm-up jobs did not finish; manager log:\n{}",
        m.log_tail()
    );
    assert!(
        gl.jobs().iter().all(|j| j.state == FakeJobState::Success),
        "a warm-up job failed"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;

    // (a) queued -> first trace byte, one job at a time.
    let mut first_byte = Vec::new();
    let mut handout = Vec::new();
    let mut accept = Vec::new();
    let mut trace_after_accept = Vec::new();
    let mut finished = Vec::new();
    for i in 0..LATENCY_JOBS {
        let queued = tokio::time::Instant::now();
        let id = gl.enqueue(
            TOKEN,
            JobBuilder::new(format!("lat-{i}")).script(["echo hi"]),
        );
        assert!(gl.wait_finished(&[id], Duration::from_secs(60)).await);
        let done = tokio::time::Instant::now();
        let requests: Vec<RecordedRequest> = gl
            .requests()
            .into_iter()
            .filter(|r| r.at >= queued)
            .collect();
        let handed = requests
            .iter()
            .filter(|r| r.path == "/api/v4/jobs/request" && r.status == 201)
            .map(|r| r.at)
            .min()
            .expect("the hand-out");
        let accepted =
            first(&requests, "PUT", &format!("/api/v4/jobs/{id}"), false).expect("the accept");
        let traced = first(
            &requests,
            "PATCH",
            &format!("/api/v4/jobs/{id}/trace"),
            true,
        )
        .expect("a trace PATCH");
        first_byte.push(traced - queued);
        handout.push(handed - queued);
        accept.push(accepted - handed);
        trace_after_accept.push(traced - accepted);
        finished.push(done - queued);
    }
    for v in [
        &mut first_byte,
        &mut handout,
        &mut accept,
        &mut trace_after_accept,
        &mut finished,
    ] {
        v.sort();
    }
    println!(
        "latency, queued -> first trace byte at GitLab (n={LATENCY_JOBS}): p50 {}  p95 {}  max {}",
        ms(percentile(&first_byte, 0.5)),
        ms(percentile(&first_byte, 0.95)),
        ms(first_byte[first_byte.len() - 1]),
    );
    println!(
        "  of which: queued -> handed out p50 {}; handed out -> accepted p50 {}; accepted -> first trace PATCH p50 {}",
        ms(percentile(&handout, 0.5)),
        ms(percentile(&accept, 0.5)),
        ms(percentile(&trace_after_accept, 0.5)),
    );
    println!(
        "  queued -> finished (seen by polling every 20 ms) p50 {}",
        ms(percentile(&finished, 0.5)),
    );

    // (b) throughput of trivial jobs.
    let cpu0 = m.cpu();
    let own0 = own_cpu();
    let instances0 = instances_cpu(&group);
    let engine0 = engine_cpu();
    let host0 = host_jiffies();
    let t0 = Instant::now();
    let ids: Vec<i64> = (0..throughput_jobs)
        .map(|i| gl.enqueue(TOKEN, JobBuilder::new(format!("tp-{i}")).script(["true"])))
        .collect();
    assert!(
        gl.wait_finished(&ids, Duration::from_secs(1200)).await,
        "throughput jobs did not finish; manager log:\n{}",
        m.log_tail()
    );
    let wall = t0.elapsed();
    let cpu = m.cpu().checked_sub(cpu0).unwrap();
    let own = own_cpu().checked_sub(own0).unwrap();
    let instances = instances_cpu(&group)
        .zip(instances0)
        .map(|(after, before)| after.saturating_sub(before));
    let engine = engine_cpu()
        .zip(engine0)
        .map(|(after, before)| after.saturating_sub(before));
    let host = host_jiffies();
    let host_busy = (host.0 - host0.0) as f64 / (host.1 - host0.1).max(1) as f64;
    let failed = ids
        .iter()
        .filter(|id| {
            gl.job(**id)
                .is_some_and(|j| j.state != FakeJobState::Success)
        })
        .count();
    println!(
        "throughput: {throughput_jobs} trivial jobs in {:.2?} = {:.1} jobs/s ({INSTANCES} instances x {SLOTS} slots, request_concurrency {}); {failed} failed",
        wall,
        throughput_jobs as f64 / wall.as_secs_f64(),
        INSTANCES * SLOTS,
    );
    println!(
        "manager CPU (utime+stime of the flotilla run process): {:.2?} in all, {} per job",
        cpu,
        ms(cpu / throughput_jobs as u32)
    );
    let per_job = |d: Duration| ms(d / throughput_jobs as u32);
    println!(
        "  elsewhere: instances (sshd + job shells, from their cgroups) {} per job; Docker engine {} per job; fake GitLab + bench {} per job; host CPU {:.0}% busy over {} cores (load from other processes included)",
        instances.map(per_job).unwrap_or_else(|| "n/a".into()),
        engine.map(per_job).unwrap_or_else(|| "n/a".into()),
        per_job(own),
        host_busy * 100.0,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
    );
    if std::env::var("RUN_BENCH_KEEP").is_ok() {
        let kept = std::env::temp_dir().join(format!("run_throughput-{}.log", std::process::id()));
        let _ = std::fs::copy(&m.log, &kept);
        println!("manager log kept in {}", kept.display());
    }
    unsafe {
        libc::kill(m.child.id() as i32, libc::SIGTERM);
    }
}
