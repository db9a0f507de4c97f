//! The cgroup level on this host, for real: jobs run in their slot's cgroup under its limits,
//! a job that hits a limit is told so, whatever a job leaves (even a process that left its
//! process group) is killed by the cgroup, and a dead manager's leftovers are stomped. This
//! machine has cgroup v1; the v2 code path is run against the unified hierarchy where it is
//! mounted (without controllers), and with limits inside a QEMU guest elsewhere.

use flotilla_connect::Connector;
use flotilla_connect::local::LocalConnector;
use flotilla_isolate::cgroup::{CgroupConfig, CgroupIsolation, SlotLimits};
use flotilla_isolate::{IsolatedEnvironment, Isolation, PrepareRequest};
use flotilla_job::model::JobInfo;
use flotilla_job::{ExecCommand, ExecSpec, ExitStatus, JobPayload, Place, Variable};
use flotilla_testkit::infra::{Infra, require};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const ROOT: &str = "/sys/fs/cgroup";

/// A template of this test's own, so tests (and other processes) never share slot cgroups.
fn template(test: &str) -> String {
    format!("flotilla-test-{}-{test}/slot-${{slot}}", std::process::id())
}

/// Removes the test's cgroups (and kills what is in them) when dropped.
struct Cgroups {
    top: String,
    root: String,
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        let bases: Vec<PathBuf> = if Path::new(&self.root).join("cgroup.controllers").exists() {
            vec![PathBuf::from(&self.root)]
        } else {
            ["cpu", "memory", "pids"]
                .iter()
                .map(|h| Path::new(&self.root).join(h))
                .collect()
        };
        for base in bases {
            let top = base.join(&self.top);
            let Ok(slots) = std::fs::read_dir(&top) else {
                continue;
            };
            for slot in slots.flatten().filter(|e| e.path().is_dir()) {
                if let Ok(procs) = std::fs::read_to_string(slot.path().join("cgroup.procs")) {
                    for pid in procs.split_whitespace() {
                        let _ = std::process::Command::new("kill")
                            .args(["-9", pid])
                            .status();
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
                let _ = std::fs::remove_dir(slot.path());
            }
            let _ = std::fs::remove_dir(&top);
        }
    }
}

fn level(test: &str, root: &str, limits: SlotLimits) -> (CgroupIsolation, Cgroups) {
    let iso = CgroupIsolation::new(CgroupConfig {
        template: template(test),
        root: root.to_string(),
        limits,
    })
    .unwrap();
    let top = template(test).split('/').next().unwrap().to_string();
    (
        iso,
        Cgroups {
            top,
            root: root.to_string(),
        },
    )
}

fn job(id: i64, vars: &[(&str, &str)]) -> JobPayload {
    JobPayload {
        id,
        job_info: JobInfo {
            project_full_path: "group/project".into(),
            ..Default::default()
        },
        variables: vars.iter().map(|(k, v)| Variable::new(*k, *v)).collect(),
        ..Default::default()
    }
}

/// Prepares `job` on `slot`: its environment and the log of its preparation.
async fn prepared(
    iso: &CgroupIsolation,
    builds: &Path,
    job: &JobPayload,
    slot: usize,
) -> (Box<dyn IsolatedEnvironment>, String) {
    let connector: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let env = iso
        .prepare(PrepareRequest {
            job,
            instance_id: "this-host",
            slot,
            connector,
            builds_dir: builds.to_str().unwrap().to_string(),
            custom_build_dir: None,
        })
        .await
        .unwrap();
    let mut log = Vec::new();
    env.prepare(&mut log, CancellationToken::new())
        .await
        .unwrap_or_else(|e| panic!("prepare: {e}"));
    (env, String::from_utf8(log).unwrap())
}

/// Runs a stage script in `env`: its status and output.
async fn stage(env: &dyn IsolatedEnvironment, script: &str) -> (ExitStatus, String) {
    let mut out = Vec::new();
    let status = env
        .exec(ExecSpec {
            place: Place::Build,
            command: ExecCommand::Script(script.to_string()),
            stdin: None,
            stdout: Box::new(&mut out),
            stderr: Box::new(tokio::io::sink()),
            cancel: CancellationToken::new(),
        })
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&out).into_owned())
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X'))
    })
}

async fn dies(pid: u32) -> bool {
    for _ in 0..300 {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

fn v1() -> bool {
    !Path::new(ROOT).join("cgroup.controllers").exists()
}

#[tokio::test]
async fn infra_cgroup_stages_run_in_their_slots_cgroup_under_its_limits() {
    if !require(Infra::Cgroups) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let limits = SlotLimits {
        cpu_millis: Some(500),
        memory_bytes: Some(256 << 20),
        pids: Some(64),
    };
    let (iso, _cg) = level("limits", ROOT, limits);
    let (env, log) = prepared(&iso, &dir.path().join("builds"), &job(1, &[]), 2).await;
    assert!(
        log.starts_with("Using cgroup isolation on instance this-host"),
        "{log}"
    );
    assert!(
        log.contains("cpu 0.5 CPUs, memory 256 MiB, pids 64"),
        "the log names the limits: {log}"
    );
    let (status, out) = stage(&*env, "cat /proc/self/cgroup").await;
    assert!(status.success(), "{out}");
    let path = format!("/flotilla-test-{}-limits/slot-2", std::process::id());
    if v1() {
        for h in ["memory", "pids"] {
            assert!(
                out.lines().any(|l| l.contains(&format!(":{h}:{path}"))),
                "the stage is in the slot's {h} cgroup: {out}"
            );
        }
        let read = |h: &str, f: &str| {
            std::fs::read_to_string(format!("{ROOT}/{h}{path}/{f}"))
                .unwrap()
                .trim()
                .to_string()
        };
        assert_eq!(
            read("memory", "memory.limit_in_bytes"),
            (256u64 << 20).to_string()
        );
        assert_eq!(read("pids", "pids.max"), "64");
        assert_eq!(read("cpu", "cpu.cfs_quota_us"), "50000");
        assert_eq!(read("cpu", "cpu.cfs_period_us"), "100000");
    } else {
        assert!(out.contains(&format!("0::{path}")), "{out}");
    }
    env.cleanup().await.unwrap();
}

#[tokio::test]
async fn infra_cgroup_a_job_over_its_memory_limit_is_killed_and_told_why() {
    if !require(Infra::Cgroups) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let limits = SlotLimits {
        memory_bytes: Some(256 << 20),
        ..SlotLimits::default()
    };
    let (iso, _cg) = level("oom", ROOT, limits);
    // The job lowers its slot's limit, as GitLab's Kubernetes overwrite variable says.
    let j = job(1, &[("KUBERNETES_MEMORY_LIMIT", "32Mi")]);
    let (env, log) = prepared(&iso, &dir.path().join("builds"), &j, 0).await;
    assert!(log.contains("memory 32 MiB"), "{log}");
    // About 100 MB in the shell's own memory: three times the limit.
    let (status, out) = stage(
        &*env,
        "x=$(head -c 100000000 /dev/zero | tr '\\0' a); echo survived ${#x}",
    )
    .await;
    assert!(!status.success(), "{out}");
    assert!(!out.contains("survived"), "{out}");
    assert!(
        out.contains("killed: memory limit 32 MiB of slot 0"),
        "the log says which limit killed it: {out:?}"
    );
    // The next job of the slot starts with fresh counters: no false alarm.
    env.cleanup().await.unwrap();
    let (env, _) = prepared(&iso, &dir.path().join("builds"), &job(2, &[]), 0).await;
    let (status, out) = stage(&*env, "exit 3").await;
    assert_eq!(status, ExitStatus::Code(3));
    assert!(!out.contains("killed"), "{out}");
    env.cleanup().await.unwrap();
}

#[tokio::test]
async fn infra_cgroup_a_fork_bomb_is_held_by_the_process_limit_and_told() {
    if !require(Infra::Cgroups) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let limits = SlotLimits {
        pids: Some(16),
        ..SlotLimits::default()
    };
    let (iso, _cg) = level("pids", ROOT, limits);
    let (env, _) = prepared(&iso, &dir.path().join("builds"), &job(1, &[]), 1).await;
    // The sleeps outlive bash's own fork retries (about 15 s), so a refused fork fails the
    // stage even when earlier children could have ended meanwhile.
    let (status, out) = stage(
        &*env,
        "set -e; for i in $(seq 64); do sleep 60 & done; wait",
    )
    .await;
    assert!(!status.success(), "{out}");
    assert!(
        out.contains("the process limit of slot 1 (16) refused"),
        "{out:?}"
    );
    env.cleanup().await.unwrap();
}

#[tokio::test]
async fn infra_cgroup_cleanup_kills_what_the_job_left_even_outside_its_process_group() {
    if !require(Infra::Cgroups) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (iso, _cg) = level("left", ROOT, SlotLimits::default());
    let (env, _) = prepared(&iso, &dir.path().join("builds"), &job(1, &[]), 0).await;
    let pid_file = dir.path().join("pid");
    // `setsid` leaves the stage's process group: a stage record cannot find it; the cgroup can.
    let (status, out) = stage(
        &*env,
        &format!(
            "setsid sh -c 'echo $$ > {}; exec sleep 300' >/dev/null 2>&1 < /dev/null &\n\
             while [ ! -s {} ]; do sleep 0.05; done",
            pid_file.display(),
            pid_file.display()
        ),
    )
    .await;
    assert!(status.success(), "{out}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(pid));
    env.cleanup().await.unwrap();
    assert!(dies(pid).await, "the job's leftover outlived its cleanup");
}

#[tokio::test]
async fn infra_cgroup_a_dead_managers_leftovers_are_stomped_by_the_next_job_and_the_sweep() {
    if !require(Infra::Cgroups) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let builds = dir.path().join("builds");
    let (iso, _cg) = level("stomp", ROOT, SlotLimits::default());
    let pid_of = |name: &str| -> u32 {
        std::fs::read_to_string(dir.path().join(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // Jobs on slots 0 and 1 leave processes and are never cleaned up: their manager died.
    for (slot, name) in [(0, "a"), (1, "b")] {
        let (env, _) = prepared(&iso, &builds, &job(slot as i64, &[]), slot).await;
        let file = dir.path().join(name);
        let (status, _) = stage(
            &*env,
            &format!(
                "setsid sh -c 'echo $$ > {}; exec sleep 300' >/dev/null 2>&1 < /dev/null &\n\
                 while [ ! -s {} ]; do sleep 0.05; done",
                file.display(),
                file.display()
            ),
        )
        .await;
        assert!(status.success());
        drop(env);
    }
    let (a, b) = (pid_of("a"), pid_of("b"));
    assert!(alive(a) && alive(b));
    // The next job on slot 0 finds slot 0's leftover and stops it, and only that one.
    let (env, log) = prepared(&iso, &builds, &job(3, &[]), 0).await;
    assert!(
        log.contains("stopped 1 process(es) an earlier job left in this slot's cgroup"),
        "{log}"
    );
    assert!(dies(a).await);
    assert!(
        alive(b),
        "another slot's process is not this job's business"
    );
    env.cleanup().await.unwrap();
    // A new manager meeting the instance sweeps every slot.
    let connector: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let swept = iso.cleanup_instance(connector, "this-host").await.unwrap();
    assert_eq!(swept, 1);
    assert!(dies(b).await);
}

#[tokio::test]
async fn infra_cgroup_unusable_cgroups_fail_the_job_with_the_reason() {
    if !require(Infra::Cgroups) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (iso, _cg) = level("missing", "/nonexistent-cgroup-root", SlotLimits::default());
    let connector: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let j = job(1, &[]);
    let env = iso
        .prepare(PrepareRequest {
            job: &j,
            instance_id: "this-host",
            slot: 0,
            connector,
            builds_dir: dir.path().join("b").to_str().unwrap().to_string(),
            custom_build_dir: None,
        })
        .await
        .unwrap();
    let mut log = Vec::new();
    let e = env
        .prepare(&mut log, CancellationToken::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cgroup isolation cannot use the cgroup")
            && e.contains("no cgroup file system at /nonexistent-cgroup-root"),
        "{e}"
    );
}

/// The v2 code path on the unified hierarchy this machine mounts next to v1 (it carries no
/// cpu, memory or pids controller, so no limits): stages join the slot's cgroup and cleanup
/// kills everything in it.
#[tokio::test]
async fn infra_cgroup_v2_placement_and_cleanup_on_the_unified_hierarchy() {
    if !require(Infra::Cgroups) {
        return;
    }
    let unified = if Path::new(ROOT).join("cgroup.controllers").exists() {
        ROOT
    } else {
        "/sys/fs/cgroup/unified"
    };
    if !Path::new(unified).join("cgroup.controllers").exists() {
        assert!(
            !flotilla_testkit::infra::in_ci(),
            "no cgroup v2 hierarchy here, and CI is set"
        );
        eprintln!("!!!!!!!! SKIPPED: no cgroup v2 hierarchy mounted");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (iso, _cg) = level("v2", unified, SlotLimits::default());
    let (env, log) = prepared(&iso, &dir.path().join("builds"), &job(1, &[]), 0).await;
    assert!(log.contains("(cgroup v2)"), "{log}");
    let pid_file = dir.path().join("pid");
    let (status, out) = stage(
        &*env,
        &format!(
            "cat /proc/self/cgroup; setsid sh -c 'echo $$ > {}; exec sleep 300' >/dev/null 2>&1 < /dev/null &\n\
             while [ ! -s {} ]; do sleep 0.05; done",
            pid_file.display(),
            pid_file.display()
        ),
    )
    .await;
    assert!(status.success(), "{out}");
    let path = format!("/flotilla-test-{}-v2/slot-0", std::process::id());
    assert!(out.lines().any(|l| l == format!("0::{path}")), "{out}");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    env.cleanup().await.unwrap();
    assert!(dies(pid).await, "killed through the v2 cgroup");
}
