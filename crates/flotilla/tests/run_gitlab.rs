//! `flotilla run` as a process against the fake GitLab: jobs taken and finished, a graceful
//! and a forced stop, a token GitLab refuses and a verify that fails (both retried), a second
//! manager refused, and `kill -9` mid-job followed by a restart that reports the job failed
//! exactly once.

use crate::run_support;

use flotilla_testkit::fake_gitlab::{FakeGitLab, JobBuilder};
use run_support::{Manager, write_local_config};
use std::time::Duration;

const TOKEN: &str = "glrt-run-test-token";

async fn gitlab() -> FakeGitLab {
    run_support::fake_gitlab(&[TOKEN], Duration::from_millis(500)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_takes_jobs_and_stops_gracefully() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut m = Manager::start(&config, &[]);
    let ok = gl.enqueue(
        TOKEN,
        JobBuilder::new("ok")
            .masked_variable("SECRET", "s3cr3t-value-123")
            .script([
                "echo hello from $CI_JOB_NAME",
                "echo the secret is $SECRET",
                "echo runner says $RUNNER_GREETING",
            ]),
    );
    let bad = gl.enqueue(TOKEN, JobBuilder::new("bad").script(["exit 3"]));
    assert!(
        gl.wait_finished(&[ok, bad], Duration::from_secs(60)).await,
        "jobs did not finish; manager log:\n{}",
        m.log()
    );
    let okj = gl.job(ok).unwrap();
    let f = okj.final_update.clone().unwrap();
    assert_eq!(f.state, "success");
    assert!(okj.trace_text().contains("hello from ok"));
    assert!(okj.trace_text().contains("the secret is [MASKED]"));
    // `[[runners]] environment` reaches the job.
    assert!(
        okj.trace_text()
            .contains("runner says hello from config.toml"),
        "{}",
        okj.trace_text()
    );
    assert!(!okj.trace_text().contains("s3cr3t-value-123"));
    let badj = gl.job(bad).unwrap();
    let f = badj.final_update.clone().unwrap();
    assert_eq!(f.state, "failed");
    assert_eq!(f.failure_reason.as_deref(), Some("script_failure"));
    assert_eq!(f.exit_code, Some(3));
    // `flotilla status` sees this manager hold the fleet and its scaler's last decision.
    let mut seen = String::new();
    for _ in 0..50 {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(["status", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        seen = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() && seen.contains("last decision (") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        seen.contains("managed by the manager with pid") && seen.contains("last decision ("),
        "{seen}"
    );
    // A graceful stop with nothing running exits at once with success.
    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "exit {status:?}; log:\n{}", m.log());
    assert!(
        !m.log().contains(TOKEN),
        "the runner token leaked into the log"
    );
}

/// Issue 32 (5): a shell runner without `[runners.autoscaler]` runs as many jobs at once as
/// `limit`, else `concurrent`, says, as GitLab Runner does, whatever the cores. Before, it ran
/// one per core: here every job waits at a barrier for all the others, which only passes when
/// they all run at once, two more than this machine has cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_runner_runs_concurrent_jobs_whatever_the_cores() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get()) + 2;
    let config = write_local_config(dir.path(), gl.url(), TOKEN, jobs as u32);
    let barrier = dir.path().join("barrier");
    std::fs::create_dir_all(&barrier).unwrap();
    let mut m = Manager::start(&config, &[]);
    let ids: Vec<i64> = (0..jobs)
        .map(|i| {
            gl.enqueue(
                TOKEN,
                JobBuilder::new(format!("wait-{i}"))
                    .variable("BARRIER", barrier.display().to_string())
                    .variable("JOBS", jobs.to_string())
                    .script([
                        "touch \"$BARRIER/$CI_JOB_ID\"",
                        "for i in $(seq 1 300); do [ \"$(ls \"$BARRIER\" | wc -l)\" -ge \"$JOBS\" ] && exit 0; sleep 0.1; done; echo only $(ls \"$BARRIER\" | wc -l) of $JOBS ran at once; exit 1",
                    ]),
            )
        })
        .collect();
    assert!(
        gl.wait_finished(&ids, Duration::from_secs(90)).await,
        "jobs did not finish; manager log:\n{}",
        m.log_tail()
    );
    for id in ids {
        let j = gl.job(id).unwrap();
        assert_eq!(
            j.final_update.clone().unwrap().state,
            "success",
            "{}",
            j.trace_text()
        );
    }
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}

/// Issue 32: `limit` and `id` as GitLab Runner reads them: a runner with `limit = 1` runs one
/// job at a time though `concurrent` allows four (each job marks its start and end; the marks
/// do not interleave), and its jobs see the configured `id` as `CI_RUNNER_ID`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_and_id_as_gitlab_runner_reads_them() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("  id = 4711\n  limit = 1\n");
    std::fs::write(&config, text).unwrap();
    let marks = dir.path().join("marks");
    let mut m = Manager::start(&config, &[]);
    let ids: Vec<i64> = (0..2)
        .map(|i| {
            gl.enqueue(
                TOKEN,
                JobBuilder::new(format!("one-at-a-time-{i}"))
                    .variable("MARKS", marks.display().to_string())
                    .script([
                        "echo \"runner id=$CI_RUNNER_ID\"",
                        "echo start >> \"$MARKS\"",
                        "sleep 1",
                        "echo end >> \"$MARKS\"",
                    ]),
            )
        })
        .collect();
    assert!(
        gl.wait_finished(&ids, Duration::from_secs(60)).await,
        "jobs did not finish; manager log:\n{}",
        m.log_tail()
    );
    for id in &ids {
        let j = gl.job(*id).unwrap();
        assert_eq!(j.final_update.clone().unwrap().state, "success");
        assert!(
            j.trace_text().contains("runner id=4711"),
            "{}",
            j.trace_text()
        );
    }
    let written = std::fs::read_to_string(&marks).unwrap();
    assert_eq!(
        written.lines().collect::<Vec<_>>(),
        ["start", "end", "start", "end"],
        "the jobs overlapped"
    );
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}

/// Issue 32: `request_concurrency` bounds the job requests a runner has open at once: three,
/// though its four free slots would each ask (GitLab's long polls keep each request open for
/// two seconds here, so they overlap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_concurrency_bounds_the_job_requests_in_flight() {
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_secs(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("  request_concurrency = 3\n");
    std::fs::write(&config, text).unwrap();
    let mut m = Manager::start(&config, &[]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while gl.most_job_requests_at_once() < 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A while longer: a fourth request would have come by now.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        gl.most_job_requests_at_once(),
        3,
        "manager log:\n{}",
        m.log_tail()
    );
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}

/// Issue 32 (4): `log_level` and `log_format` of `config.toml` apply to `flotilla run`, in
/// the spellings GitLab Runner takes (`Debug`); before, they were parsed and never applied.
/// (`--log-level`, `--log-format` and `RUST_LOG` still win; this run sets none.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_logs_as_the_configuration_says() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 1);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("log_level = \"Debug\"\nlog_format = \"json\"\n{text}"),
    )
    .unwrap();
    let stderr = dir.path().join("stderr");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["run", "--config"])
        .arg(&config)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let read = || std::fs::read_to_string(&stderr).unwrap_or_default();
    for _ in 0..200 {
        if read().contains("\"level\":\"DEBUG\"") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let _ = child.wait();
    let log = read();
    assert!(log.contains("\"level\":\"DEBUG\""), "no debug line:\n{log}");
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        assert!(
            serde_json::from_str::<serde_json::Value>(line).is_ok(),
            "not a JSON line: {line}"
        );
    }
}

/// A token GitLab refuses does not stop `flotilla run` (GitLab Runner's `run` does not even
/// verify; GitLab may be fixed meanwhile): it says so clearly, without the token, keeps
/// trying, and stops cleanly when told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_an_invalid_token_says_so_and_keeps_trying() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), "glrt-not-a-known-token", 4);
    let mut m = Manager::start(&config, &[]);
    let mut said = false;
    for _ in 0..300 {
        if gl.requests_to("POST", "/api/v4/runners/verify").len() >= 2 {
            said = m.log().contains("refused the runner token");
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = m.log();
    assert!(said, "{log}");
    assert!(log.contains("retrying"), "{log}");
    assert!(m.exited().is_none(), "it gave up:\n{log}");
    assert!(
        !log.contains("glrt-not-a-known-token"),
        "token leaked: {log}"
    );
    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "{status:?}\n{}", m.log());
}

/// Verify failing at start (GitLab says the runner is orphaned, 422) is retried with a
/// backoff and logged; once GitLab answers, the runner starts and takes jobs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_keeps_verifying_until_gitlab_answers() {
    let gl = FakeGitLab::builder()
        .runner_token(TOKEN)
        .poll_duration(Duration::from_millis(500))
        .trace_update_interval(1)
        .orphaned(true)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut m = Manager::start(&config, &[]);
    for _ in 0..300 {
        if gl.requests_to("POST", "/api/v4/runners/verify").len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let verifies = gl.requests_to("POST", "/api/v4/runners/verify");
    assert!(verifies.len() >= 2, "{}", m.log());
    assert!(verifies.iter().all(|r| r.status == 422));
    assert!(verifies[1].at - verifies[0].at >= Duration::from_millis(900));
    assert!(m.log().contains("orphaned"), "{}", m.log());
    assert!(m.exited().is_none());
    gl.set_behaviour(|b| b.orphaned = false);
    let id = gl.enqueue(TOKEN, JobBuilder::new("after").script(["echo verified"]));
    assert!(
        gl.wait_finished(&[id], Duration::from_secs(60)).await,
        "{}",
        m.log()
    );
    assert_eq!(gl.job(id).unwrap().final_update.unwrap().state, "success");
    m.signal(libc::SIGTERM);
    let status = m.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(status.success(), "{}", m.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_manager_for_the_same_fleet_refuses_to_start() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut first = Manager::start(&config, &[]);
    // Wait until the first one holds the lease (it polls for jobs).
    let mut polled = false;
    for _ in 0..200 {
        if !gl.requests_to("POST", "/api/v4/jobs/request").is_empty() {
            polled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(polled, "first manager never polled:\n{}", first.log());
    let mut second = Manager::start(&config, &[]);
    let status = second.wait(Duration::from_secs(30)).await.expect("exits");
    assert!(!status.success());
    let log = second.log();
    assert!(log.contains("lease") || log.contains("held"), "{log}");
    first.signal(libc::SIGTERM);
    assert!(first.wait(Duration::from_secs(30)).await.is_some());
}

/// Enqueues a job that runs for ten minutes and waits until it has started on `m`.
async fn start_a_long_job(gl: &FakeGitLab, m: &Manager) -> i64 {
    let long = gl.enqueue(
        TOKEN,
        JobBuilder::new("long").script(["echo started", "sleep 600"]),
    );
    gl.wait_for_job(long, Duration::from_secs(60), |j| {
        j.trace_text().contains("started")
    })
    .await
    .unwrap_or_else(|| panic!("job never started:\n{}", m.log()));
    long
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigquit_stops_at_once_and_fails_running_jobs() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut m = Manager::start(&config, &[]);
    let long = start_a_long_job(&gl, &m).await;
    m.signal(libc::SIGQUIT);
    let status = m.wait(Duration::from_secs(60)).await.expect("exits");
    let _ = status;
    let j = gl.job(long).unwrap();
    let f = j
        .final_update
        .clone()
        .unwrap_or_else(|| panic!("not reported:\n{}", m.log()));
    assert_eq!(f.state, "failed");
    // `runner_interrupted` is not in this GitLab's `failure_reasons`, so GitLab Runner's
    // mapping sends `unknown_failure`.
    assert_eq!(f.failure_reason.as_deref(), Some("unknown_failure"));
    assert!(
        j.trace_text()
            .contains("the runner was stopped while the job ran"),
        "{}",
        j.trace_text()
    );
    assert_eq!(j.final_updates, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_within_seconds_while_gitlab_does_not_answer() {
    use flotilla_testkit::fake_gitlab::{FaultConfig, FaultKind};
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut m = Manager::start(&config, &[]);
    let long = start_a_long_job(&gl, &m).await;
    // GitLab stops answering: every request is a 502 from a proxy whose Rails is down.
    gl.set_faults(Some(FaultConfig {
        rate: 1.0,
        kinds: vec![FaultKind::BadGateway],
        exempt: Vec::new(),
        no_drop_after: Vec::new(),
        ..FaultConfig::chaos(1.0, 7)
    }));
    m.signal(libc::SIGTERM);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let forced = std::time::Instant::now();
    m.signal(libc::SIGTERM);
    let status = m
        .wait(Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("still running 30 s after the second signal:\n{}", m.log()));
    let took = forced.elapsed();
    assert!(took < Duration::from_secs(20), "{took:?}\n{}", m.log());
    assert!(!status.success(), "{}", m.log());
    assert!(gl.job(long).unwrap().final_update.is_none());
    // The record was kept: GitLab back, the next start reports the job, once.
    gl.set_faults(None);
    let mut again = Manager::start(&config, &[]);
    let j = gl
        .wait_for_job(long, Duration::from_secs(60), |j| j.final_update.is_some())
        .await
        .unwrap_or_else(|| panic!("never reported:\n{}", again.log()));
    assert_eq!(j.final_update.clone().unwrap().state, "failed");
    again.signal(libc::SIGTERM);
    assert!(again.wait(Duration::from_secs(30)).await.is_some());
    assert_eq!(gl.job(long).unwrap().final_updates, 1);
}

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(dir: &std::path::Path, size_mib: u32) -> Tmpfs {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success(), "mount tmpfs on {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .args(["-l"])
            .arg(&self.0)
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_taking_jobs_until_space_is_freed() {
    use flotilla_testkit::infra::{self, Infra};
    if !infra::require(Infra::Tmpfs) {
        return;
    }
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let _tmpfs = Tmpfs::mount(&state, 96);
    // The config's state_dir is `<dir>/state`: the tmpfs.
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut m = Manager::start(&config, &[]);
    let first = gl.enqueue(TOKEN, JobBuilder::new("first").script(["echo one"]));
    gl.wait_for_job(first, Duration::from_secs(60), |j| j.final_update.is_some())
        .await
        .unwrap_or_else(|| panic!("first job never ran:\n{}", m.log()));
    // Fill the state directory's disk to under 64 MiB free.
    let filler = state.join("filler");
    std::fs::write(&filler, vec![0u8; 60 << 20]).unwrap();
    // Requests already out (long polls) end; then none goes out while the disk is full.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = gl.requests_to("POST", "/api/v4/jobs/request").len();
    let second = gl.enqueue(TOKEN, JobBuilder::new("second").script(["echo two"]));
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = gl.requests_to("POST", "/api/v4/jobs/request").len();
    assert_eq!(
        before,
        after,
        "job requests went out on a full disk:\n{}",
        m.log()
    );
    assert!(gl.job(second).unwrap().final_update.is_none());
    assert!(m.log().contains("disk is full"), "{}", m.log());
    // Space again: the job is taken and runs.
    std::fs::remove_file(&filler).unwrap();
    gl.wait_for_job(second, Duration::from_secs(60), |j| {
        j.final_update.is_some()
    })
    .await
    .unwrap_or_else(|| panic!("second job never ran after space was freed:\n{}", m.log()));
    assert_eq!(
        gl.job(second).unwrap().final_update.unwrap().state,
        "success"
    );
    assert!(m.log().contains("has space again"), "{}", m.log());
    m.signal(libc::SIGTERM);
    assert!(m.wait(Duration::from_secs(30)).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_job_then_restart_reports_it_failed_once() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut m = Manager::start(&config, &[]);
    let long = start_a_long_job(&gl, &m).await;
    m.signal(libc::SIGKILL);
    m.wait(Duration::from_secs(10)).await.expect("killed");
    assert!(gl.job(long).unwrap().final_update.is_none());
    // The restarted manager reports the job it finds unfinished.
    let mut again = Manager::start(&config, &[]);
    let j = gl
        .wait_for_job(long, Duration::from_secs(60), |j| j.final_update.is_some())
        .await
        .unwrap_or_else(|| panic!("never reported:\n{}", again.log()));
    let f = j.final_update.clone().unwrap();
    assert_eq!(f.state, "failed");
    assert_eq!(f.failure_reason.as_deref(), Some("runner_system_failure"));
    // And only once, also across another restart.
    again.signal(libc::SIGTERM);
    assert!(again.wait(Duration::from_secs(30)).await.is_some());
    let mut third = Manager::start(&config, &[]);
    tokio::time::sleep(Duration::from_secs(3)).await;
    third.signal(libc::SIGTERM);
    assert!(third.wait(Duration::from_secs(30)).await.is_some());
    let j = gl.job(long).unwrap();
    assert_eq!(j.final_updates, 1, "reported more than once");
    assert_eq!(j.times_finished(), 1);
}

/// The manager's peak resident memory (`VmHWM`) in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/<pid>/status")
}

/// Issue 31 (4), end to end: a 1 MiB masked variable, printed whole by the job three times
/// (3 MiB of output that is all secret), drove the manager to 870 MiB. Its log reaches GitLab masked
/// and the manager's peak RSS stays under 256 MiB (the figure is printed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_mebibyte_masked_value_keeps_the_manager_small() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let mut m = Manager::start(&config, &[]);
    // A value GitLab would accept as masked: letters and digits, no repetition to shortcut.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let secret: String = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            alphabet[(x % alphabet.len() as u64) as usize] as char
        })
        .collect();
    let job = gl.enqueue(
        TOKEN,
        JobBuilder::new("big-secret")
            // A file variable: as an environment string, Linux refuses to start any program
            // with it (over MAX_ARG_STRLEN, 128 KiB), on GitLab as here.
            .masked_file_variable("BIG_SECRET", secret.clone())
            .script([
                "echo before",
                "cat \"$BIG_SECRET\"; echo",
                "cat \"$BIG_SECRET\" \"$BIG_SECRET\"; echo",
                "echo after",
            ]),
    );
    let j = gl
        .wait_for_job(job, Duration::from_secs(120), |j| j.final_update.is_some())
        .await
        .unwrap_or_else(|| panic!("never finished:\n{}", m.log()));
    let peak = peak_rss_kib(m.pid());
    eprintln!(
        "manager peak RSS with a 1 MiB masked value: {} MiB",
        peak / 1024
    );
    assert_eq!(
        j.final_update.clone().unwrap().state,
        "success",
        "{}",
        m.log()
    );
    let trace = j.trace_text();
    assert!(
        trace.contains("before") && trace.contains("after"),
        "{trace}"
    );
    // Two adjacent occurrences are one `[MASKED]` (see the masker).
    assert_eq!(
        trace.matches("[MASKED]").count(),
        2,
        "{}",
        &trace[..trace.len().min(2000)]
    );
    assert!(
        !trace.contains(&secret[..64]),
        "a piece of the secret reached GitLab"
    );
    assert!(
        !m.log().contains(&secret[..64]),
        "a piece of the secret reached the log"
    );
    assert!(peak < 256 * 1024, "peak RSS {} MiB", peak / 1024);
    m.signal(libc::SIGTERM);
    assert!(m.wait(Duration::from_secs(30)).await.is_some());
}

/// `tls-ca-file`: a GitLab whose certificate a private authority signed is reached when the
/// runner trusts that authority, and its jobs get the authority as `CI_SERVER_TLS_CA_FILE`, as
/// GitLab Runner gives it; without the file the certificate is refused, said in the log, and
/// no job is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitlab_behind_a_private_authority_is_trusted_through_tls_ca_file() {
    let gl = flotilla_testkit::fake_gitlab::FakeGitLab::builder()
        .runner_token(TOKEN)
        .poll_duration(Duration::from_millis(500))
        .trace_update_interval(1)
        .https(true)
        .start()
        .await
        .expect("the fake GitLab over HTTPS");
    assert!(gl.url().starts_with("https://"));
    let dir = tempfile::tempdir().unwrap();

    // Not trusted: refused, said, and nothing taken.
    let untrusted = dir.path().join("untrusted");
    std::fs::create_dir_all(&untrusted).unwrap();
    let config = write_local_config(&untrusted, gl.url(), TOKEN, 2);
    let mut m = Manager::start(&config, &[]);
    let waiting = gl.enqueue(TOKEN, JobBuilder::new("waits").script(["true"]));
    let mut said = false;
    for _ in 0..100 {
        let log = m.log().to_ascii_lowercase();
        if log.contains("certificate") || log.contains("unknownissuer") {
            said = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(said, "the refused certificate is said:\n{}", m.log());
    assert_eq!(
        gl.job(waiting).unwrap().state,
        flotilla_testkit::fake_gitlab::FakeJobState::Pending,
        "no job taken over a connection the runner does not trust"
    );
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;

    // Trusted through tls-ca-file.
    let ca = dir.path().join("gitlab-ca.pem");
    std::fs::write(&ca, gl.ca_pem().unwrap()).unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 2);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("  tls-ca-file = \"{}\"\n", ca.display()));
    std::fs::write(&config, text).unwrap();
    let mut m = Manager::start(&config, &[]);
    let job = gl.enqueue(
        TOKEN,
        JobBuilder::new("tls")
            .script([
                "head -n 1 \"$CI_SERVER_TLS_CA_FILE\"",
                "cmp \"$CI_SERVER_TLS_CA_FILE\" \"$EXPECTED_CA\" && echo the-runners-authority",
            ])
            .variable("EXPECTED_CA", ca.display().to_string()),
    );
    assert!(
        gl.wait_finished(&[waiting, job], Duration::from_secs(60))
            .await,
        "jobs did not finish; manager log:\n{}",
        m.log()
    );
    let trace = gl.job(job).unwrap().trace_text();
    assert_eq!(
        gl.job(job).unwrap().final_update.unwrap().state,
        "success",
        "{trace}"
    );
    assert!(trace.contains("-----BEGIN CERTIFICATE-----"), "{trace}");
    assert!(trace.contains("the-runners-authority"), "{trace}");
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}

/// `tls-cert-file` and `tls-key-file`: a GitLab that accepts only clients with a certificate
/// its authority signed takes jobs from a runner that presents one, and the job gets the
/// certificate and key as `CI_SERVER_TLS_CERT_FILE` and `CI_SERVER_TLS_KEY_FILE`; without them
/// the handshake is refused and no job is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gitlab_that_wants_a_client_certificate_gets_the_runners() {
    let gl = flotilla_testkit::fake_gitlab::FakeGitLab::builder()
        .runner_token(TOKEN)
        .poll_duration(Duration::from_millis(500))
        .trace_update_interval(1)
        .https_with_client_auth()
        .start()
        .await
        .expect("the fake GitLab over HTTPS with client authentication");
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("gitlab-ca.pem");
    std::fs::write(&ca, gl.ca_pem().unwrap()).unwrap();
    let (cert_pem, key_pem) = gl.client_identity().unwrap();
    let cert = dir.path().join("runner.pem");
    let key = dir.path().join("runner-key.pem");
    std::fs::write(&cert, cert_pem).unwrap();
    std::fs::write(&key, key_pem).unwrap();
    let with_files = |sub: &str, files: &str| {
        let d = dir.path().join(sub);
        std::fs::create_dir_all(&d).unwrap();
        let config = write_local_config(&d, gl.url(), TOKEN, 2);
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(files);
        std::fs::write(&config, text).unwrap();
        config
    };

    // The authority alone: refused, said, nothing taken.
    let config = with_files(
        "no-certificate",
        &format!("  tls-ca-file = \"{}\"\n", ca.display()),
    );
    let mut m = Manager::start(&config, &[]);
    let waiting = gl.enqueue(TOKEN, JobBuilder::new("waits").script(["true"]));
    let mut said = false;
    for _ in 0..100 {
        if m.log().to_ascii_lowercase().contains("certificate") {
            said = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(said, "the refused handshake is said:\n{}", m.log());
    assert_eq!(
        gl.job(waiting).unwrap().state,
        flotilla_testkit::fake_gitlab::FakeJobState::Pending
    );
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;

    let config = with_files(
        "with-certificate",
        &format!(
            "  tls-ca-file = \"{}\"\n  tls-cert-file = \"{}\"\n  tls-key-file = \"{}\"\n",
            ca.display(),
            cert.display(),
            key.display()
        ),
    );
    let mut m = Manager::start(&config, &[]);
    let job = gl.enqueue(
        TOKEN,
        JobBuilder::new("mtls").script([
            "cmp \"$CI_SERVER_TLS_CERT_FILE\" \"$EXPECTED_CERT\" && echo the-runners-certificate",
            "cmp \"$CI_SERVER_TLS_KEY_FILE\" \"$EXPECTED_KEY\" && echo the-runners-key",
        ])
        .variable("EXPECTED_CERT", cert.display().to_string())
        .variable("EXPECTED_KEY", key.display().to_string()),
    );
    assert!(
        gl.wait_finished(&[waiting, job], Duration::from_secs(60))
            .await,
        "jobs did not finish; manager log:\n{}",
        m.log()
    );
    let trace = gl.job(job).unwrap().trace_text();
    assert!(trace.contains("the-runners-certificate"), "{trace}");
    assert!(trace.contains("the-runners-key"), "{trace}");
    assert!(
        !trace.contains("PRIVATE KEY"),
        "the key is never printed: {trace}"
    );
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}
