//! Snapshots carried between instances through the runner's store, for real under TCG: a
//! snapshot taken on one instance (here: one state directory) is kept self-contained in a
//! cache store; that instance's files are then removed altogether (its root file systems,
//! initramfs and the snapshot itself), and a job on another instance starts from the store's
//! copy, then from its own copy without fetching again. A job of another project cannot
//! restore it, and `flotilla debug`'s restore brings it from the store too.

use crate::vm_support;

use flotilla_connect::local::LocalConnector;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_isolate::microvm::snapshot::{RESTORE_VARIABLE, SNAPSHOT_VARIABLE, Scope};
use flotilla_isolate::microvm::{MicrovmConfig, MicrovmIsolation};
use flotilla_job::{CacheStore, JobPayload, LocalCacheStore, Place};
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::vms::VmGuard;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use vm_support::{prepared, stage};

fn job(id: i64, name: &str, project: &str, vars: &[(&str, &str)]) -> JobPayload {
    vm_support::busybox_job(id, name, project, vars)
}

fn level(state: &Path, store: &Arc<dyn CacheStore>) -> MicrovmIsolation {
    MicrovmIsolation::new(MicrovmConfig {
        state_dir: state.to_str().unwrap().to_string(),
        owner: "test-ship".into(),
        memory_mib: 256,
        network: false,
        ..MicrovmConfig::default()
    })
    .unwrap()
    .with_snapshot_store(store.clone())
}

fn scope(project: &str, protected: bool) -> Scope {
    Scope {
        project: project.into(),
        project_id: 1,
        protected,
    }
}

fn tmp(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn infra_microvm_a_snapshot_from_one_instance_starts_a_job_on_another() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let (first_state, second_state) = (tmp("fl-ship-a-"), tmp("fl-ship-b-"));
    let _vms = (
        VmGuard::new(first_state.path()),
        VmGuard::new(second_state.path()),
    );
    let (builds, store_dir) = (tmp("fl-ship-builds-"), tmp("fl-ship-store-"));
    let builds = builds.path().to_str().unwrap();
    let store: Arc<dyn CacheStore> = Arc::new(LocalCacheStore::new(store_dir.path()));

    // On the first instance: the setup is saved, and kept in the store.
    let first = level(first_state.path(), &store);
    let setup = job(1, "setup", "group/app", &[(SNAPSHOT_VARIABLE, "always")]);
    let (env, _) = prepared(&first, builds, &setup, 0).await;
    let (st, out) = stage(&*env, Place::Build, "echo prepared > /root/state\n").await;
    assert!(st.success(), "{out}");
    eprintln!("{out}");
    assert!(
        out.contains("Kept snapshot setup in the runner's store for any instance:"),
        "{out}"
    );
    env.cleanup().await.unwrap();
    // Snapshots hold what the job held: for the level's user only.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&first_state.path().join("snapshots")), 0o700);
    // Nothing of the first instance remains: the store's copy must stand alone.
    std::fs::remove_dir_all(first_state.path()).unwrap();

    // On the second instance: a matrix of three at once brings it from the store (they take
    // turns; one brings it, the others find it there), then a job uses the instance's copy.
    let second = level(second_state.path(), &store);
    let branches: Vec<JobPayload> = (0..3)
        .map(|i| {
            job(
                2 + i,
                &format!("test: [{i}]"),
                "group/app",
                &[(RESTORE_VARIABLE, "setup")],
            )
        })
        .collect();
    let prepared_all = futures::future::join_all(
        branches
            .iter()
            .enumerate()
            .map(|(i, j)| prepared(&second, builds, j, i)),
    )
    .await;
    let mut brought = 0;
    for (env, log) in prepared_all {
        eprintln!("{log}");
        assert!(
            log.contains("microVM restored from snapshot setup"),
            "{log}"
        );
        brought += usize::from(log.contains("brought from the runner's store"));
        let (st, out) = stage(&*env, Place::Build, "cat /root/state\n").await;
        assert!(st.success(), "{out}");
        assert_eq!(out, "prepared\n");
        env.cleanup().await.unwrap();
    }
    assert_eq!(
        brought, 1,
        "one branch brings the snapshot, the others wait for it and find it"
    );
    assert_eq!(mode(&second_state.path().join("snapshots")), 0o700);
    // That job saves the key again: its VM boots from the brought copy's kernel, which the
    // new snapshot keeps for itself before the old directory is replaced.
    let again = job(
        5,
        "setup",
        "group/app",
        &[(RESTORE_VARIABLE, "setup"), (SNAPSHOT_VARIABLE, "always")],
    );
    let (env, log) = prepared(&second, builds, &again, 0).await;
    assert!(
        log.contains("microVM restored from snapshot setup"),
        "{log}"
    );
    assert!(!log.contains("brought from the runner's store"), "{log}");
    let (st, out) = stage(&*env, Place::Build, "echo again >> /root/state\n").await;
    assert!(st.success(), "{out}");
    assert!(
        out.contains("Kept snapshot setup in the runner's store for any instance:"),
        "{out}"
    );
    env.cleanup().await.unwrap();
    let last = job(6, "last", "group/app", &[(RESTORE_VARIABLE, "setup")]);
    let (env, _) = prepared(&second, builds, &last, 0).await;
    let (st, out) = stage(&*env, Place::Build, "cat /root/state\n").await;
    assert!(st.success(), "{out}");
    assert_eq!(out, "prepared\nagain\n");
    env.cleanup().await.unwrap();

    // Another project's job finds neither the store's copy nor the instance's, nor does a
    // job of a protected ref of the same project: an unprotected job prepared that state.
    let intruder = job(9, "test", "other/app", &[(RESTORE_VARIABLE, "setup")]);
    let mut protected = job(10, "deploy", "group/app", &[(RESTORE_VARIABLE, "setup")]);
    protected.git_info.protected = Some(true);
    for (j, scope) in [
        (&intruder, "project \"other/app\" (non-protected refs)"),
        (&protected, "project \"group/app\" (protected refs)"),
    ] {
        let (env, r, _) = vm_support::prepare(&second, builds, j, 0).await;
        let e = r.unwrap_err();
        assert!(e.contains("was taken by a job of another project"), "{e}");
        assert!(
            e.contains(&format!(
                "the runner's store has none for the job's {scope}"
            )),
            "{e}"
        );
        env.cleanup().await.unwrap();
    }

    // `flotilla debug` on a third host: from the store, with the project named.
    let third_state = tmp("fl-ship-c-");
    let _third_vms = VmGuard::new(third_state.path());
    let third = level(third_state.path(), &store);
    let host: Arc<dyn Connector> = Arc::new(LocalConnector::new());
    let missing = third
        .debug(
            host.clone(),
            "this-host",
            "setup",
            Some(&scope("other/app", false)),
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        missing.contains("has no snapshot \"setup\" of project \"other/app\" (non-protected refs)"),
        "{missing}"
    );
    let vm = third
        .debug(host, "this-host", "setup", Some(&scope("group/app", false)))
        .await
        .unwrap();
    // The newest save of the key, made on the second instance from a restored VM.
    let out = vm.guest().output("cat /root/state").await.unwrap();
    assert_eq!(out.stdout_str(), "prepared\nagain\n");
    vm.close().await;
}
