//! `flotilla run` as a child process, for the tests that drive the real binary.

#![allow(dead_code)] // Each test binary uses part of it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// `flotilla run --config FILE` as a child process with its log in a file next to the
/// config; killed when dropped.
pub(crate) struct Manager {
    child: Child,
    stderr: PathBuf,
}

impl Manager {
    /// Starts `flotilla run --config <config> <extra...>` with `RUST_LOG=info`. A
    /// configuration without `state_dir` keeps its state beside it (`FLOTILLA_STATE_DIR`), not
    /// in this machine's `/var/lib/flotilla`.
    pub(crate) fn start(config: &Path, extra: &[&str]) -> Manager {
        let stderr = config.with_extension(format!("stderr-{}", now_nanos()));
        let child = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(["run", "--config"])
            .arg(config)
            .args(extra)
            .env("RUST_LOG", "info")
            .env("FLOTILLA_STATE_DIR", state_beside(config))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Manager { child, stderr }
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `sig` to the process.
    pub(crate) fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// The exit status, if it has exited.
    pub(crate) fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Waits up to `timeout` for the process to exit.
    pub(crate) async fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, and wait until the process is gone.
    pub(crate) async fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        self.wait(Duration::from_secs(10))
            .await
            .expect("a killed manager exits");
    }

    /// Everything it logged so far.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// The last 20 kB of its log (for failure messages).
    pub(crate) fn log_tail(&self) -> String {
        let log = self.log();
        let start = log.len().saturating_sub(20_000);
        let start = (start..log.len())
            .find(|i| log.is_char_boundary(*i))
            .unwrap_or(0);
        log[start..].to_string()
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Nanoseconds since the epoch: a suffix that keeps file names apart.
pub(crate) fn now_nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The state directory of a test's configuration that sets none: beside it.
pub(crate) fn state_beside(config: &Path) -> PathBuf {
    config
        .parent()
        .unwrap_or(Path::new("."))
        .join("state-by-default")
}

/// Writes `config.toml` in `dir` for one runner on the local provider with shell isolation,
/// taking jobs from `url` with `token`, its state under `dir/state`.
pub(crate) fn write_local_config(dir: &Path, url: &str, token: &str, concurrent: u32) -> PathBuf {
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        format!(
            r#"concurrent = {concurrent}
check_interval = 1
shutdown_timeout = 30

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "local-shell"
  url = "{url}"
  token = "{token}"
  executor = "shell"
  environment = ["RUNNER_GREETING=hello from config.toml"]
"#,
            state = dir.join("state").display(),
        ),
    )
    .unwrap();
    path
}

/// A job's service (as GitLab's payload names it): a busybox web server on port 6379
/// answering `OUT|services|<word>`, reachable as `alias`. Two of them share the port only
/// where each service has a network namespace of its own.
pub(crate) fn web_service(alias: &str, word: &str) -> serde_json::Value {
    serde_json::json!({
        "name": flotilla_testkit::images::busybox_image(),
        "alias": alias,
        "command": ["sh", "-c", format!("mkdir -p /www && echo 'OUT|services|{word}' > /www/index.html && exec httpd -f -p 6379 -h /www")],
        "ports": [{"number": 6379}],
    })
}

/// The fake GitLab the `flotilla run` tests talk to: `tokens` registered, jobs handed out after
/// at most `poll` of long polling, and every trace update kept (interval 1 s).
pub(crate) async fn fake_gitlab(
    tokens: &[&str],
    poll: Duration,
) -> flotilla_testkit::fake_gitlab::FakeGitLab {
    let mut builder = flotilla_testkit::fake_gitlab::FakeGitLab::builder();
    for token in tokens {
        builder = builder.runner_token(*token);
    }
    builder
        .poll_duration(poll)
        .trace_update_interval(1)
        .start()
        .await
        .expect("starting the fake GitLab")
}

/// A job with the two [`web_service`]s on one port (`svc-a` answering `alpha`, `svc-b`
/// answering `beta`) in the busybox image, whose script reads both, then runs `more`. It
/// passes only where each service has a network namespace of its own.
pub(crate) fn services_pair_job(
    name: &str,
    more: &[&str],
) -> flotilla_testkit::fake_gitlab::JobBuilder {
    let mut script = vec![
        "wget -qO- http://svc-a:6379/",
        "wget -qO- http://svc-b:6379/",
    ];
    script.extend_from_slice(more);
    flotilla_testkit::fake_gitlab::JobBuilder::new(name)
        .field(
            "image",
            serde_json::json!({"name": flotilla_testkit::images::busybox_image()}),
        )
        .field(
            "services",
            serde_json::json!([web_service("svc-a", "alpha"), web_service("svc-b", "beta")]),
        )
        .script(script)
}

/// A conformance case as GitLab's job payload carries it: its steps (`before_script` and
/// `script` as one), its `after_script`, and the pipeline's global variables before its own.
fn conformance_job(case: &flotilla_conformance::Case) -> flotilla_testkit::fake_gitlab::JobBuilder {
    let mut job =
        flotilla_testkit::fake_gitlab::JobBuilder::new(case.name).script(case.step_script());
    for (k, v) in flotilla_conformance::GLOBAL_VARIABLES {
        job = job.variable(*k, *v);
    }
    if !case.after.is_empty() {
        job = job.after_script(case.after.iter().copied());
    }
    job
}

/// One conformance case run as a job of the fake GitLab.
pub(crate) struct CaseRun<'c> {
    /// The case.
    pub case: &'c flotilla_conformance::Case,
    /// The job's trace.
    pub trace: String,
    /// What in its final update or trace differs from GitLab.
    pub problems: Vec<String>,
}

/// Enqueues each case as a job (in `image`, when given), waits for every one to end, and
/// judges each final update and trace; `manager_log` explains a job that never ended.
pub(crate) async fn run_cases<'c>(
    gl: &flotilla_testkit::fake_gitlab::FakeGitLab,
    token: &str,
    cases: &[&'c flotilla_conformance::Case],
    image: Option<&str>,
    manager_log: impl Fn() -> String,
) -> Vec<CaseRun<'c>> {
    let ids: Vec<(i64, &flotilla_conformance::Case)> = cases
        .iter()
        .map(|c| {
            let mut job = conformance_job(c);
            if let Some(image) = image {
                job = job.field("image", serde_json::json!({ "name": image }));
            }
            (gl.enqueue(token, job), *c)
        })
        .collect();
    let all: Vec<i64> = ids.iter().map(|(id, _)| *id).collect();
    assert!(
        gl.wait_finished(&all, Duration::from_secs(300)).await,
        "jobs did not finish; manager log:\n{}",
        manager_log()
    );
    ids.into_iter()
        .map(|(id, case)| {
            let job = gl.job(id).expect("the job");
            let f = job.final_update.clone().expect("a final update");
            let trace = job.trace_text();
            let problems = case.final_update_problems(&f.state, f.exit_code, &trace);
            CaseRun {
                case,
                trace,
                problems,
            }
        })
        .collect()
}

/// Fails the test with every case of `runs` that differs from GitLab.
pub(crate) fn assert_conform(runs: &[CaseRun<'_>]) {
    let failures: Vec<String> = runs
        .iter()
        .filter(|r| !r.problems.is_empty())
        .map(|r| {
            format!(
                "{} ({}): {}\n--- trace ---\n{}",
                r.case.name,
                r.case.source,
                r.problems.join("; "),
                r.trace
            )
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} jobs differ from GitLab:\n\n{}",
        failures.len(),
        runs.len(),
        failures.join("\n\n")
    );
}
