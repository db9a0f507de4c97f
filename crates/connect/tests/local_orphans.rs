//! A local job does not outlive flotilla: when the process that started it dies (even by
//! SIGKILL), the job's shell is killed too (parent-death signal).

use flotilla_connect::local::LocalConnector;
use flotilla_connect::{Connector, ExecRequest};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PID_FILE: &str = "FLOTILLA_ORPHAN_PID_FILE";
/// Set: the child sets the parent-death signal in a fork (`pre_exec`), not with `setpriv`.
const FORK: &str = "FLOTILLA_ORPHAN_FORK";

/// The child half: starts a long command through the local connector and waits forever.
#[tokio::test]
#[ignore = "the child process of local_jobs_die_with_their_manager; run by it"]
async fn orphan_child() {
    let Ok(pid_file) = std::env::var(PID_FILE) else {
        return;
    };
    let c = if std::env::var_os(FORK).is_some() {
        LocalConnector::new().without_setpriv()
    } else {
        LocalConnector::new()
    };
    let line = format!("echo $$ > {pid_file}; exec sleep 1000");
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
fn local_jobs_die_with_their_manager_without_setpriv() {
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
    assert!(alive(job));
    child.kill().unwrap(); // SIGKILL: no chance to clean up
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(job) {
        assert!(
            Instant::now() < deadline,
            "job {job} outlived the process that started it"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
