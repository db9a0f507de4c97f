//! Snapshots at the microvm level, for real under TCG: a job whose `step_script` fails is
//! saved (`FLOTILLA_SNAPSHOT: on_failure`) and its `after_script` still runs in the VM; three
//! jobs started from that snapshot at once (`FLOTILLA_RESTORE_FROM`, a matrix branched from
//! one setup) each find the setup's state and write only to their own layer; a job asking
//! for a snapshot that does not exist fails with the reason.

use crate::vm_support;

use flotilla_isolate::microvm::snapshot::{RESTORE_VARIABLE, SNAPSHOT_VARIABLE};
use flotilla_isolate::microvm::{MicrovmConfig, MicrovmIsolation};
use flotilla_job::{ExitStatus, JobPayload, Place};
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::vms::VmGuard;
use std::time::Instant;
use vm_support::stage;

fn job(id: i64, name: &str, vars: &[(&str, &str)]) -> JobPayload {
    vm_support::busybox_job(id, name, "group/project", vars)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn infra_microvm_a_failed_job_is_saved_and_a_matrix_branches_from_it() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let state = tempfile::Builder::new()
        .prefix("fl-microvm-snap-")
        .tempdir_in("/tmp")
        .unwrap();
    // A failed assertion must not leave VMs running.
    let _vms = VmGuard::new(state.path());
    let builds = tempfile::Builder::new()
        .prefix("fl-microvm-builds-")
        .tempdir_in("/tmp")
        .unwrap();
    let iso = MicrovmIsolation::new(MicrovmConfig {
        state_dir: state.path().to_str().unwrap().to_string(),
        owner: "test-snap".into(),
        memory_mib: 256,
        network: false,
        ..MicrovmConfig::default()
    })
    .unwrap();

    // The setup job: its script fails after making some state, which is saved.
    let setup = job(1, "setup", &[(SNAPSHOT_VARIABLE, "on_failure")]);
    let (env, r, log) = vm_support::prepare(&iso, builds.path().to_str().unwrap(), &setup, 0).await;
    r.unwrap_or_else(|e| panic!("{e}\n{log}"));
    let project = env.paths().project_dir.clone();
    let (st, _) = stage(
        &*env,
        Place::Helper,
        &format!("mkdir -p {project} && echo checked-out > {project}/source.txt"),
    )
    .await;
    assert!(st.success());
    let (st, out) = stage(
        &*env,
        Place::Build,
        &format!(
            "echo prepared > /root/state\ncat {project}/source.txt > {project}/setup-output.txt\n\
             echo failing; exit 4\n"
        ),
    )
    .await;
    assert_eq!(st, ExitStatus::Code(4), "{out}");
    eprintln!("{out}");
    assert!(out.contains("failing\n"), "{out}");
    assert!(
        out.contains("Saved snapshot setup of the VM on instance this-host: memory and devices"),
        "{out}"
    );
    assert!(out.contains("FLOTILLA_RESTORE_FROM: setup"), "{out}");
    // The VM runs on: after_script still runs, and what it writes is not in the snapshot.
    let (st, out) = stage(
        &*env,
        Place::Build,
        "cat /root/state; echo after > /root/after\n",
    )
    .await;
    assert!(st.success(), "{out}");
    assert_eq!(out, "prepared\n");
    env.cleanup().await.unwrap();
    assert!(state.path().join("snapshots/setup/state.bin").exists());

    // Three jobs from the snapshot at once.
    let mut envs = Vec::new();
    let mut jobs = Vec::new();
    for i in 0..3 {
        jobs.push(job(
            10 + i,
            &format!("test: [{i}]"),
            &[(RESTORE_VARIABLE, "setup")],
        ));
    }
    let started = Instant::now();
    let prepared = futures::future::join_all(
        jobs.iter()
            .enumerate()
            .map(|(i, j)| vm_support::prepare(&iso, builds.path().to_str().unwrap(), j, i)),
    )
    .await;
    eprintln!("three restores at once: {:?}", started.elapsed());
    for (env, r, log) in prepared {
        r.unwrap_or_else(|e| panic!("{e}\n{log}"));
        eprintln!("{log}");
        assert!(
            log.contains("microVM restored from snapshot setup (image local/flotilla-busybox:"),
            "{log}"
        );
        envs.push(env);
    }
    for (i, env) in envs.iter().enumerate() {
        let (st, out) = stage(
            &**env,
            Place::Build,
            &format!(
                "cat /root/state; cat {project}/setup-output.txt; ls /root; echo {i} > /root/mine\n"
            ),
        )
        .await;
        assert!(st.success(), "{out}");
        assert_eq!(out, "prepared\nchecked-out\nstate\n", "job {i}");
    }
    for (i, env) in envs.iter().enumerate() {
        let (_, out) = stage(&**env, Place::Build, "cat /root/mine\n").await;
        assert_eq!(out, format!("{i}\n"), "each branch writes its own layer");
    }
    for env in envs {
        env.cleanup().await.unwrap();
    }

    // A snapshot nobody took.
    let lost = job(20, "lost", &[(RESTORE_VARIABLE, "never-saved")]);
    let (env, r, _) = vm_support::prepare(&iso, builds.path().to_str().unwrap(), &lost, 0).await;
    let e = r.unwrap_err();
    assert!(
        e.contains("no snapshot \"never-saved\" on instance this-host"),
        "{e}"
    );
    env.cleanup().await.unwrap();
}
