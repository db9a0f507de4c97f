//! Docker isolation's cleanup against a real instance with an inner dockerd: what a crashed
//! job left is swept, live environments are left alone, and an interrupted prepare leaves
//! nothing once cleaned up.

use flotilla_connect::Connector;
use flotilla_fleet::Secret;
use flotilla_isolate::{DockerIsolation, Isolation, PrepareRequest};
use flotilla_job::model::{Image, JobInfo, Port};
use flotilla_job::{EnvError, JobPayload};
use flotilla_testkit::docker_fleet::{DockerFleet, FleetOptions};
use flotilla_testkit::images::busybox_image;
use flotilla_testkit::infra::{Infra, require};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

fn job(id: i64) -> JobPayload {
    JobPayload {
        id,
        token: Secret::new(format!("glcbt-token-{id}")),
        job_info: JobInfo {
            project_full_path: "group/project".into(),
            ..Default::default()
        },
        image: Some(Image {
            name: busybox_image(),
            ..Default::default()
        }),
        services: vec![Image {
            name: busybox_image(),
            alias: "svc".into(),
            command: vec!["sleep".into(), "300".into()],
            ..Default::default()
        }],
        ..Default::default()
    }
}

async fn prepared(
    iso: &DockerIsolation,
    j: &JobPayload,
    instance: &str,
    connector: Arc<dyn Connector>,
    slot: usize,
) -> Box<dyn flotilla_isolate::IsolatedEnvironment> {
    let env = iso
        .prepare(PrepareRequest {
            job: j,
            instance_id: instance,
            slot,
            connector,
            builds_dir: "/builds".into(),
            custom_build_dir: None,
        })
        .await
        .unwrap();
    env.prepare(&mut tokio::io::sink(), CancellationToken::new())
        .await
        .unwrap();
    env
}

#[tokio::test]
async fn infra_cleanup_instance_removes_what_a_crashed_job_left() {
    if !require(Infra::Docker) {
        return;
    }
    let f = DockerFleet::start(FleetOptions::docker("crash")).await;
    let instance = f.instances()[0].clone();
    let connector = f.ssh(&instance).await;

    let first = DockerIsolation::default();
    let crashed_job = job(1);
    let env = prepared(&first, &crashed_job, &instance, connector.clone(), 0).await;
    // The build, service and helper containers.
    assert_eq!(f.job_containers(&instance).await.len(), 3);
    // Its own manager never sweeps a live environment.
    assert_eq!(
        first
            .cleanup_instance(connector.clone(), &instance)
            .await
            .unwrap(),
        0
    );
    assert_eq!(f.job_containers(&instance).await.len(), 3);
    // The job's task dies (say, its manager panicked): nothing cleans up.
    drop(env);
    drop(first);

    // The next manager sweeps the leftovers but not its own running job.
    let next = DockerIsolation::default();
    let live_job = job(2);
    let live = prepared(&next, &live_job, &instance, connector.clone(), 1).await;
    let removed = next
        .cleanup_instance(connector.clone(), &instance)
        .await
        .unwrap();
    assert_eq!(removed, 4, "three containers and the job's network");
    let left = f.job_containers(&instance).await;
    assert_eq!(left.len(), 3, "{left:?}");
    assert!(
        left.iter()
            .all(|c| { c.labels.as_ref().unwrap()["flotilla.job"] == "2" })
    );
    live.cleanup().await.unwrap();
    assert!(f.job_containers(&instance).await.is_empty());
    assert_eq!(
        next.cleanup_instance(connector, &instance).await.unwrap(),
        0
    );
}

#[tokio::test]
async fn infra_an_interrupted_prepare_leaves_nothing_after_cleanup() {
    if !require(Infra::Docker) {
        return;
    }
    let f = DockerFleet::start(FleetOptions::docker("interrupt")).await;
    let instance = f.instances()[0].clone();
    let connector = f.ssh(&instance).await;
    let iso = DockerIsolation::default();
    let mut j = job(3);
    // A port nothing listens on keeps prepare waiting for the service.
    j.services[0].ports = vec![Port {
        number: 9,
        ..Default::default()
    }];
    let env = iso
        .prepare(PrepareRequest {
            job: &j,
            instance_id: &instance,
            slot: 0,
            connector,
            builds_dir: "/builds".into(),
            custom_build_dir: None,
        })
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        let f = &f;
        let instance = instance.clone();
        async move {
            // Cancel once the containers exist.
            while f.job_containers(&instance).await.len() < 3 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            cancel.cancel();
        }
    };
    let mut log = Vec::new();
    let (r, ()) = tokio::join!(env.prepare(&mut log, cancel.clone()), canceller);
    assert!(matches!(r, Err(EnvError::Canceled)), "{r:?}");
    env.cleanup().await.unwrap();
    let left = f.job_containers(&instance).await;
    assert!(left.is_empty(), "left after cleanup: {left:?}");
}
