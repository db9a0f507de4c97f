//! A local job does not outlive flotilla: when the process that started it dies (even by
//! SIGKILL), the job's whole process group is killed by the watchdog (or, without one, its
//! shell by the parent-death signal), also after the watchdog itself was killed and replaced.

use flotilla_connect::local::LocalConnector;
use flotilla_connect::{Connector, ExecRequest};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PID_FILE: &str = "FLOTILLA_ORPHAN_PID_FILE";
/// Set: the child's commands get a parent-death signal instead of the watchdog.
const FORK: &str = "FLOTILLA_ORPHAN_FORK";
/// Set: once its job runs, the child kills its watchdog, runs one more command (which starts
/// a new watchdog) and then writes `<pid file>.ready`.
const KILL_WATCHDOG: &str = "FLOTILLA_ORPHAN_KILL_WATCHDOG";

/// The pids of this process's watchdogs (children running its script).
fn my_watchdogs() -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.split_whitespace().nth(1).map(String::from));
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if ppid.as_deref() == Some(me.as_str())
            && String::from_utf8_lossy(&cmdline).contains("while read -r op id")
        {
            out.push(pid);
        }
    }
    out
}

/// The child half: starts a long command through the local connector and waits forever.
#[tokio::test]
#[ignore = "the child process of local_jobs_die_with_their_manager; run by it"]
async fn orphan_child() {
    let Ok(pid_file) = std::env::var(PID_FILE) else {
        return;
    };
    let c = if std::env::var_os(FORK).is_some() {
        LocalConnector::new().without_watchdog()
    } else {
        LocalConnector::new()
    };
    let line = format!(
        "sleep 1000 >/dev/null 2>&1 & echo $! > {pid_file}.bg; echo $$ > {pid_file}; exec sleep 1000"
    );
    let job = {
        let c = c.clone();
        tokio::spawn(async move { c.exec(ExecRequest::new(line)).await })
    };
    if std::env::var_os(KILL_WATCHDOG).is_some() {
        while !std::path::Path::new(&pid_file).exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let dogs = my_watchdogs();
        assert_eq!(dogs.len(), 1, "one watchdog: {dogs:?}");
        Command::new("kill")
            .args(["-9", &dogs[0].to_string()])
            .status()
            .unwrap();
        while alive(dogs[0]) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The next command finds the watchdog dead and starts another, which is told of
        // the job still running.
        let out = flotilla_connect::ConnectorExt::output(&c, "true")
            .await
            .unwrap();
        assert!(out.status.success());
        let now = my_watchdogs();
        assert!(
            now.len() == 1 && now[0] != dogs[0],
            "a new watchdog: {now:?}"
        );
        std::fs::write(format!("{pid_file}.ready"), "").unwrap();
    }
    let _ = job.await;
}

fn alive(pid: i32) -> bool {
    // A zombie counts as dead: it no longer runs.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

#[test]
fn local_jobs_die_with_their_manager() {
    dies_with_its_manager(false);
}

#[test]
fn local_jobs_die_with_their_manager_without_watchdog() {
    dies_with_its_manager(true);
}

#[test]
fn local_jobs_die_with_their_manager_after_the_watchdog_was_replaced() {
    dies_with_its_manager_mode(false, true);
}

fn dies_with_its_manager(fork: bool) {
    dies_with_its_manager_mode(fork, false);
}

fn dies_with_its_manager_mode(fork: bool, kill_watchdog: bool) {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    if fork {
        cmd.env(FORK, "1");
    }
    if kill_watchdog {
        cmd.env(KILL_WATCHDOG, "1");
    }
    let mut child = cmd
        .args([
            "local_orphans::orphan_child",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env(PID_FILE, &pid_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let job: i32 = loop {
        if let Ok(s) = std::fs::read_to_string(&pid_file)
            && let Ok(pid) = s.trim().parse()
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    if kill_watchdog {
        let ready = dir.path().join("pid.ready");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready.exists() {
            assert!(Instant::now() < deadline, "the watchdog was not replaced");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let background: i32 = std::fs::read_to_string(dir.path().join("pid.bg"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(job) && alive(background));
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    // The watchdog stops the command's whole group; a parent-death signal only its shell.
    let mut must_die = vec![job];
    if !fork {
        must_die.push(background);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for pid in must_die {
        while alive(pid) {
            assert!(
                Instant::now() < deadline,
                "process {pid} of the job outlived the process that started it"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    if fork {
        // Not ours to leave running.
        let _ = std::process::Command::new("kill")
            .args(["-9", &background.to_string()])
            .status();
    }
}
