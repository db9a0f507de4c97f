//! The `vm` level on this host, for real (QEMU `q35` under TCG, the Debian cloud kernel, the
//! qemu provider's test VM image as the prepared disk): the job's stages, helper ones
//! included, run in a full VM of its own in its slot; a VM an earlier job left in the slot is
//! stomped; the VM is deleted after the job; an image the configuration does not allow is
//! refused with the reason.

use crate::vm_support;

use flotilla_isolate::vm::{VmLevel, VmLevelConfig};
use flotilla_job::model::{Image, JobInfo};
use flotilla_job::{ExitStatus, JobPayload, Place};
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::vms::{VmGuard, vm_image};
use std::path::Path;
use vm_support::{alive, stage, vmm_pid as pid_of};

fn job(id: i64, image: Option<&str>) -> JobPayload {
    JobPayload {
        id,
        job_info: JobInfo {
            project_full_path: "group/project".into(),
            ..Default::default()
        },
        image: image.map(|name| Image {
            name: name.into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_vm_a_job_runs_every_stage_in_a_full_vm_of_its_slot() {
    if !require(Infra::Qemu) {
        return;
    }
    let image = vm_image();
    let images_dir = image.disk.parent().unwrap().to_str().unwrap().to_string();
    let state = tempfile::Builder::new()
        .prefix("fl-vm-state-")
        .tempdir_in("/tmp")
        .unwrap();
    let _vms = VmGuard::new(state.path());
    let level = VmLevel::new(VmLevelConfig {
        default_image: Some("disk.img".into()),
        allowed_images: vec!["disk.*".into()],
        images_dir: Some(images_dir),
        network: false,
        memory_mib: 512,
        state_dir: state.path().to_str().unwrap().to_string(),
        owner: "test-vm".into(),
        ..VmLevelConfig::default()
    })
    .unwrap();

    let j = job(41, None);
    let (env, r, log) = vm_support::prepare(&level, "/unused-on-the-instance", &j, 1).await;
    eprintln!("{log}");
    r.unwrap_or_else(|e| panic!("{e}\n{log}"));
    assert!(
        log.contains("Using vm isolation on instance this-host (slot 1)"),
        "{log}"
    );
    assert!(log.contains("VM of image disk.img up in"), "{log}");
    let project = env.paths().project_dir.clone();
    assert!(project.starts_with("/builds/"), "{project}");
    // A helper stage (as get_sources would) runs in the VM too: git is the image's.
    let (st, out) = stage(
        &*env,
        Place::Helper,
        &format!(
            "mkdir -p {project} && cd {project} && git --version && echo from-helper > f && \
             echo \"pid 1 is $(cat /proc/1/comm), host $(hostname)\""
        ),
    )
    .await;
    assert!(st.success(), "{out}");
    assert!(out.contains("git version"), "{out}");
    assert!(out.contains("pid 1 is init, host test-vm-slot-1"), "{out}");
    let (st, out) = stage(&*env, Place::Build, &format!("cat {project}/f; exit 3")).await;
    assert_eq!(st, ExitStatus::Code(3));
    assert_eq!(out.trim(), "from-helper");
    let dir = level.config().vm_dir(1);
    let first = pid_of(&dir).expect("the VM's pid file");
    assert!(alive(first));

    // The next job in the slot, the first not cleaned up (a dead manager's): stomped.
    let (second, r, log) = vm_support::prepare(
        &level,
        "/unused-on-the-instance",
        &job(42, Some("disk.img")),
        1,
    )
    .await;
    r.unwrap_or_else(|e| panic!("{e}\n{log}"));
    assert!(
        log.contains("Stomped the VM an earlier job left in slot 1"),
        "{log}"
    );
    assert!(!alive(first), "the earlier VM is gone");
    let (st, out) = stage(
        &*second,
        Place::Build,
        &format!("ls {project}/f || echo fresh"),
    )
    .await;
    assert!(st.success());
    assert!(
        out.contains("fresh"),
        "a fresh VM has nothing of the earlier job's: {out}"
    );
    let now = pid_of(&dir).unwrap();
    second.cleanup().await.unwrap();
    assert!(!alive(now), "deleted after the job");
    assert!(!Path::new(&dir).exists());

    // An image the configuration does not allow never boots.
    let (_, r, _) = vm_support::prepare(
        &level,
        "/unused-on-the-instance",
        &job(43, Some("ubuntu-24.04")),
        2,
    )
    .await;
    let e = r.unwrap_err();
    assert!(e.contains("not allowed") && e.contains("disk.*"), "{e}");
}
