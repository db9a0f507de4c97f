//! `flotilla install`, `uninstall`, `start`, `stop`, `restart`: the unit judged by
//! `systemd-analyze verify`, the `systemctl` calls seen by a stand-in on PATH (no systemd runs
//! as PID 1 here), and register → install → the service's own command line taking a job from
//! the fake GitLab and stopping on SIGTERM as systemd stops it.

use crate::run_support;
use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn flotilla_with_path(args: &[&str], path_prefix: Option<&Path>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
    cmd.args(args)
        .env_remove("RUST_LOG")
        .env_remove("FLOTILLA_CONFIG")
        // Relative to each configuration: the tests' state stays in their directories.
        .env("FLOTILLA_STATE_DIR", "state-by-default");
    if let Some(p) = path_prefix {
        let path = std::env::var("PATH").unwrap_or_default();
        cmd.env("PATH", format!("{}:{path}", p.display()));
    }
    cmd.output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// A `systemctl` that records its arguments in `log` and exits with `status`.
fn fake_systemctl(dir: &Path, log: &Path, status: i32) -> PathBuf {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let script = bin.join("systemctl");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexit {status}\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `systemd-analyze verify` accepts the unit: status 0 and not a word on stderr (it reports
/// settings it ignores there, with status 0).
fn assert_systemd_accepts(unit: &Path) {
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(unit)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "", "systemd-analyze complained");
}

#[test]
fn install_writes_a_unit_systemd_accepts_and_the_verbs_ask_systemctl() {
    let dir = tempfile::tempdir().unwrap();
    let config =
        run_support::write_local_config(dir.path(), "https://gitlab.example.com", "glrt-svc", 1);
    let units = dir.path().join("units");
    let log = dir.path().join("systemctl.log");
    let bin = fake_systemctl(dir.path(), &log, 0);
    let (c, u) = (config.to_str().unwrap(), units.to_str().unwrap());

    let out = flotilla_with_path(&["install", "-c", c, "--unit-dir", u], Some(&bin));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let unit = units.join("flotilla.service");
    let written = std::fs::read_to_string(&unit).unwrap();
    assert!(
        written.contains(&format!("run --config \"{c}\"")),
        "{written}"
    );
    // shutdown_timeout = 30 in the configuration, and two minutes to report and shut down.
    assert!(
        written.contains("TimeoutStopSec=150s") && written.contains("KillMode=mixed"),
        "{written}"
    );
    assert_systemd_accepts(&unit);
    assert_eq!(lines(&log), ["daemon-reload", "enable flotilla.service"]);

    let again = flotilla_with_path(&["install", "-c", c, "--unit-dir", u], Some(&bin));
    assert!(!again.status.success());
    assert!(
        text(&again.stderr).contains("exists"),
        "{}",
        text(&again.stderr)
    );

    // The verbs take only the service's name: a unit directory would be ignored, so it is refused.
    let odd = flotilla_with_path(&["start", "--unit-dir", u], Some(&bin));
    assert_eq!(odd.status.code(), Some(2), "{}", text(&odd.stderr));
    for verb in ["start", "stop", "restart"] {
        let out = flotilla_with_path(&[verb], Some(&bin));
        assert!(out.status.success(), "{verb}: {}", text(&out.stderr));
    }
    let out = flotilla_with_path(&["uninstall", "--unit-dir", u], Some(&bin));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!unit.exists());
    assert_eq!(
        lines(&log)[2..],
        [
            "start flotilla.service",
            "stop flotilla.service",
            "restart flotilla.service",
            "disable --now flotilla.service",
            "daemon-reload"
        ]
    );

    // systemctl failing is said, with the command.
    let failing_log = dir.path().join("failing.log");
    let failing = fake_systemctl(&dir.path().join("f"), &failing_log, 1);
    let out = flotilla_with_path(&["install", "-c", c, "--unit-dir", u], Some(&failing));
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("`systemctl daemon-reload` failed"),
        "{}",
        text(&out.stderr)
    );
    // A configuration that does not load is not installed.
    std::fs::write(dir.path().join("bad.toml"), "concurrent = \"many\"\n").unwrap();
    let out = flotilla_with_path(
        &[
            "install",
            "-c",
            dir.path().join("bad.toml").to_str().unwrap(),
            "--unit-dir",
            u,
            "--service",
            "bad",
        ],
        Some(&bin),
    );
    assert!(!out.status.success());
    assert!(!units.join("bad.service").exists());
    let out = flotilla_with_path(&["install", "-c", c, "--service", "no/slash"], Some(&bin));
    assert!(!out.status.success());
    // A user who cannot read the configuration (register writes it 0600) is warned of.
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = flotilla_with_path(
        &[
            "install",
            "-c",
            c,
            "--unit-dir",
            u,
            "--service",
            "as-nobody",
            "--user",
            "nobody",
            "--no-systemctl",
        ],
        Some(&bin),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("the service runs as nobody, who cannot read"),
        "{}",
        text(&out.stderr)
    );
    let out = flotilla_with_path(
        &[
            "install",
            "-c",
            c,
            "--unit-dir",
            u,
            "--service",
            "as-root",
            "--user",
            "root",
            "--no-systemctl",
        ],
        Some(&bin),
    );
    assert!(
        !text(&out.stderr).contains("cannot read"),
        "{}",
        text(&out.stderr)
    );
}

/// Splits a unit's `ExecStart=` as systemd does for what `install` writes: double-quoted
/// words with `\"`/`\\` escapes, `%%` and `$$` for a literal `%` and `$`.
fn exec_start(unit: &str) -> Vec<String> {
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("an ExecStart");
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c == ' ' {
            chars.next();
            continue;
        }
        let mut word = String::new();
        if c == '"' {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '"' => break,
                    '\\' => word.extend(chars.next()),
                    c => word.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ' ' {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        words.push(word.replace("%%", "%").replace("$$", "$"));
    }
    words
}

/// From nothing to a service taking jobs: `register` writes the configuration, `install` the
/// unit, and the unit's own command line (run as systemd runs it: the journal as stderr)
/// takes a job, then stops on SIGTERM within the unit's stop timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_install_and_the_service_takes_a_job() {
    let token = "glrt-service-0123456789abcdef";
    let gl = run_support::fake_gitlab(&[token], Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("etc/flotilla/config.toml");
    let template = dir.path().join("template.toml");
    std::fs::write(
        &template,
        "[[runners]]\n  executor = \"flotilla\"\n  [runners.autoscaler]\n    plugin = \"local\"\n    capacity_per_instance = 1\n    max_instances = 1\n",
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let out = flotilla_with_path(
        &[
            "register",
            "-c",
            c,
            "--url",
            gl.url(),
            "--token",
            token,
            "--name",
            "svc",
            "--template-config",
            template.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let units = dir.path().join("units");
    let out = flotilla_with_path(
        &[
            "install",
            "-c",
            c,
            "--unit-dir",
            units.to_str().unwrap(),
            "--no-systemctl",
        ],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let unit = units.join("flotilla.service");
    assert_systemd_accepts(&unit);
    let unit_text = std::fs::read_to_string(&unit).unwrap();
    let argv = exec_start(&unit_text);
    assert_eq!(argv[1..], ["run", "--config", c]);

    let log = dir.path().join("journal.log");
    let journal_file = std::fs::File::create(&log).unwrap();
    // systemd's JOURNAL_STREAM names the journal stream's device and inode: here, the file's.
    let stream = {
        use std::os::unix::fs::MetadataExt;
        let meta = journal_file.metadata().unwrap();
        format!("{}:{}", meta.dev(), meta.ino())
    };
    let mut service = tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env_remove("RUST_LOG")
        .env("FLOTILLA_STATE_DIR", "state-by-default")
        .env("JOURNAL_STREAM", &stream)
        .stdout(Stdio::null())
        .stderr(journal_file)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let id = gl.enqueue(
        token,
        JobBuilder::new("as-a-service").script(["echo served"]),
    );
    let journal = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        gl.wait_finished(&[id], Duration::from_secs(90)).await,
        "{}",
        journal()
    );
    assert_eq!(
        gl.job(id).unwrap().state,
        FakeJobState::Success,
        "{}",
        journal()
    );

    // systemd's stop: SIGTERM to the main process, then the stop timeout.
    let pid = i32::try_from(service.id().unwrap()).unwrap();
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let stopped = tokio::time::timeout(Duration::from_secs(90), service.wait()).await;
    let status = stopped.expect("stopped within TimeoutStopSec").unwrap();
    assert!(status.success(), "{status:?}\n{}", journal());
    // Lines for the journal: no timestamp of our own (journald stamps them), no colours.
    let written = journal();
    let first = written
        .lines()
        .find(|l| l.contains("INFO"))
        .expect("log lines");
    assert!(first.trim_start().starts_with("INFO"), "{first}");
    assert!(!written.contains('\x1b'), "{written}");
}
