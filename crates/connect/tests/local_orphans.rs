//! A local job does not outlive flotilla: when the process that started it dies (even by
//! SIGKILL), the job's shell is killed too (parent-death signal).

use flotilla_connect::local::LocalConnector;
use flotilla_connect::{Connector, ExecRequest};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PID_FILE: &str = "FLOTILLA_ORPHAN_PID_FILE";
/// Set: the child's commands get a parent-death signal instead of the watchdog.
const FORK: &str = "FLOTILLA_ORPHAN_FORK";

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
    let _ = c.exec(ExecRequest::new(line)).await;
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

fn dies_with_its_manager(fork: bool) {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    if fork {
        cmd.env(FORK, "1");
    }
    let mut child = cmd
        .args(["orphan_child", "--exact", "--ignored", "--nocapture"])
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
