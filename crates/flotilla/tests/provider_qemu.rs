//! The `qemu` provider in the real binary, under TCG with the test VM image:
//! `flotilla exec` of `examples/hello` on a VM that is gone when exec ends, and `flotilla run`
//! against the fake GitLab through a `kill -9` of the manager: the VM keeps running (instances
//! outlive the provider process), the restarted manager adopts it instead of booting another,
//! runs the next job on it, and ends it at a graceful stop (`delete_instances_on_shutdown`).
//!
//! No VM outlives a test: a guard kills what is left when the test ends, and each VM powers
//! itself off after `max_lifetime` if even the test process was killed.

use crate::exec_support;
use crate::run_support;

use exec_support::{Project, statuses};
use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::vms::{VmGuard, running_vms, vm_image};
use run_support::Manager;
use std::time::Duration;

/// `[runners.autoscaler]` and its plugin_config for one small VM.
fn autoscaler(extra: &str) -> String {
    autoscaler_at("shell", 2, extra)
}

/// [`autoscaler`] with the isolation level and the slots per VM given.
fn autoscaler_at(isolation: &str, capacity: u32, extra: &str) -> String {
    let image = vm_image();
    format!(
        r#"  [runners.autoscaler]
    plugin = "qemu"
    isolation = "{isolation}"
    capacity_per_instance = {capacity}
    max_instances = 1
    delete_instances_on_shutdown = true
    shutdown_deletion_interval = "1s"
{extra}
    [runners.autoscaler.plugin_config]
      disk = "{disk}"
      kernel = "{kernel}"
      initrd = "{initrd}"
      memory_mb = 384
      max_lifetime = 900
      restrict_network = true
"#,
        disk = image.disk.display(),
        kernel = image.kernel.display(),
        initrd = image.initrd.display(),
    )
}

/// The id of the VM a job's log says it ran on.
fn vm_of(trace: &str) -> String {
    let at = trace
        .find("Using shell isolation on instance vm-")
        .unwrap_or_else(|| panic!("not on a VM:\n{trace}"));
    trace[at + "Using shell isolation on instance ".len()..][..11].to_string()
}

#[test]
fn infra_hello_example_runs_on_a_qemu_vm_and_leaves_none() {
    if !require(Infra::Qemu) {
        return;
    }
    let p = Project::example("hello");
    let _guard = VmGuard::new(p.path());
    p.write(
        "config.toml",
        &format!(
            "concurrent = 2\n\n[[runners]]\n  name = \"qemu-exec\"\n  executor = \"flotilla\"\n{}",
            autoscaler("")
        ),
    );
    let run = p.exec(&["--config", "config.toml"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("build", "passed"), ("test", "passed")])
    );
    assert!(run.stderr.contains("plugin qemu, shell isolation"), "{run}");
    let build = p.log("build");
    let vm = vm_of(&build);
    assert!(build.contains("hello from build on Linux"), "{build}");
    let test = p.log("test");
    assert_eq!(vm_of(&test), vm, "one VM for the pipeline");
    assert!(test.contains("the working tree is here"), "{test}");
    // exec ends its fleet: no VM process, no VM directory.
    assert!(running_vms(p.path()).is_empty(), "a VM outlived exec");
    let vms = p.path().join(".flotilla/qemu/qemu-exec");
    assert_eq!(
        std::fs::read_dir(&vms).unwrap().count(),
        0,
        "{}",
        vms.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_run_on_a_qemu_vm_survives_kill_9_and_adopts_it() {
    if !require(Infra::Qemu) {
        return;
    }
    const TOKEN: &str = "glrt-qemu-run-token";
    let dir = tempfile::tempdir().unwrap();
    let _guard = VmGuard::new(dir.path());
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_secs(2)).await;
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"concurrent = 2
check_interval = 1
shutdown_timeout = 30

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "qemu-fleet"
  url = "{url}"
  token = "{TOKEN}"
  executor = "instance"
{autoscaler}"#,
            state = dir.path().join("state").display(),
            url = gl.url(),
            autoscaler = autoscaler(
                "    [[runners.autoscaler.policy]]\n      idle_count = 1\n      idle_time = \"1h\"\n"
            ),
        ),
    )
    .unwrap();
    let mut m = Manager::start(&config, &[]);
    let first = gl.enqueue(
        TOKEN,
        JobBuilder::new("first")
            .script(["echo OUT-first-$(uname -s)", "hostname > /root/first-ran"]),
    );
    assert!(
        gl.wait_finished(&[first], Duration::from_secs(300)).await,
        "the first job did not finish:\n{}",
        m.log_tail()
    );
    let j = gl.job(first).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}");
    assert!(trace.contains("OUT-first-Linux"), "{trace}");
    let vm = vm_of(&trace);
    let pids = running_vms(dir.path());
    assert_eq!(pids.len(), 1, "one VM");

    // kill -9: the VM keeps running.
    m.kill9().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(running_vms(dir.path()), pids, "the VM outlives the manager");

    // The restarted manager adopts it: the next job runs on the same VM, and no other boots.
    let mut again = Manager::start(&config, &[]);
    let second = gl.enqueue(
        TOKEN,
        JobBuilder::new("second").script(["cat /root/first-ran", "echo OUT-second"]),
    );
    assert!(
        gl.wait_finished(&[second], Duration::from_secs(300)).await,
        "the second job did not finish:\n{}",
        again.log_tail()
    );
    let j = gl.job(second).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}");
    assert_eq!(vm_of(&trace), vm, "adopted, not replaced");
    assert!(
        trace.contains(&format!("\n{vm}")),
        "the first job's file is there:\n{trace}"
    );
    assert_eq!(running_vms(dir.path()), pids, "no second VM");

    // A graceful stop ends the VM.
    again.signal(libc::SIGTERM);
    let status = again.wait(Duration::from_secs(90)).await.expect("exits");
    assert!(
        status.success(),
        "exit {status:?}; log:\n{}",
        again.log_tail()
    );
    assert!(
        running_vms(dir.path()).is_empty(),
        "the VM outlived the stop:\n{}",
        again.log_tail()
    );
    assert!(!again.log().contains(TOKEN), "the token leaked");
}

/// The cgroup level on cgroup v2, for real: in a QEMU guest the unified hierarchy has every
/// controller (this host's v1 cannot show that). Each job's stages run in its slot's cgroup
/// below `flotilla/`, with `cpu.max`, `memory.max` and `pids.max` written; a memory hog is
/// killed by the kernel and a fork bomb is held, each told in its log; the job beside them
/// passes.
#[test]
fn infra_cgroup_v2_limits_hold_in_a_qemu_guest() {
    if !require(Infra::Qemu) {
        return;
    }
    let p = Project::with_pipeline(
        r#"
limits:
  script:
    - c=$(sed -n 's/^0:://p' /proc/self/cgroup)
    - echo "in $c"
    - echo "cpu $(cat /sys/fs/cgroup$c/cpu.max) memory $(cat /sys/fs/cgroup$c/memory.max) pids $(cat /sys/fs/cgroup$c/pids.max)"
    - echo "controllers $(cat /sys/fs/cgroup$c/cgroup.controllers)"
hog:
  script:
    - x=$(head -c 100000000 /dev/zero | tr '\0' a)
    - echo survived
bomb:
  # The sleeps outlive bash's own fork retries (about 15 s), so the refused forks fail the
  # job even when earlier children could have ended meanwhile.
  script:
    - set -e; for i in $(seq 64); do sleep 60 & done; wait
"#,
    );
    let _guard = VmGuard::new(p.path());
    p.write(
        "config.toml",
        &format!(
            r#"concurrent = 3

[[runners]]
  name = "qemu-cgroup"
  executor = "flotilla"
  slot_cgroup_template = "flotilla/slot-${{slot}}"
  [runners.cgroup]
    cpu = "0.5"
    memory = "48Mi"
    pids = 24
{}"#,
            autoscaler_at("cgroup", 3, "")
        ),
    );
    p.commit("config");
    let run = p.exec(&["--config", "config.toml"]);
    run.expect_code(1);
    assert_eq!(
        run.statuses(),
        statuses(&[("limits", "passed"), ("hog", "failed"), ("bomb", "failed")])
    );
    let limits = p.log("limits");
    assert!(limits.contains("(cgroup v2)"), "{limits}");
    assert!(limits.contains("in /flotilla/slot-"), "{limits}");
    assert!(
        limits.contains("cpu 50000 100000 memory 50331648 pids 24"),
        "{limits}"
    );
    for controller in ["cpu", "memory", "pids"] {
        assert!(
            limits
                .lines()
                .any(|l| l.starts_with("controllers ") && l.split(' ').any(|c| c == controller)),
            "{controller}: {limits}"
        );
    }
    let hog = p.log("hog");
    assert!(hog.contains("killed: memory limit 48 MiB of slot"), "{hog}");
    assert!(!hog.contains("\nsurvived"), "{hog}");
    let bomb = p.log("bomb");
    assert!(bomb.contains("(24) refused"), "{bomb}");
    assert!(running_vms(p.path()).is_empty(), "a VM outlived exec");
}
