//! The connection details of an instance are asked of its provider once, when the
//! dispatcher first connects to it; later jobs on the instance reuse the kept connector
//! without another provider call (for the docker provider a Docker API call per job, for a
//! cloud provider a cloud API call per job).

use crate::common;

use common::*;
use flotilla_dispatch::{Dispatcher, DispatcherConfig, LocalConnectors};
use flotilla_isolate::ShellIsolation;
use flotilla_job::{LocalArtifactStore, LocalCacheStore, Outcome, RunOptions};
use flotilla_scaler::{Policy, ScalerBuilder, ScalerConfig, Schedule};
use flotilla_testkit::{FakeConfig, FakeInstanceGroup};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn connection_details_are_asked_once_per_instance() {
    let dir = tempfile::tempdir().unwrap();
    let group = Arc::new(FakeInstanceGroup::new(
        FakeConfig {
            max_size: 1,
            ..FakeConfig::default()
        },
        3,
    ));
    group.add_running();
    let scaler = ScalerBuilder::new(
        group.clone(),
        ScalerConfig {
            capacity_per_instance: 2,
            max_instances: 1,
            instance_acquire_timeout: Duration::from_secs(30),
            update_interval: Duration::from_millis(100),
            update_interval_when_expecting: Duration::from_millis(50),
            ..ScalerConfig::default()
        },
    )
    .schedule(Schedule::single(Policy {
        idle_count: 2,
        idle_time: Duration::from_secs(3600),
        ..Policy::default()
    }))
    .start()
    .await
    .unwrap();
    let d = Dispatcher::new(
        scaler,
        DispatcherConfig {
            isolation: Arc::new(ShellIsolation::new()).into(),
            connectors: Arc::new(LocalConnectors),
            artifacts: Arc::new(LocalArtifactStore::new(dir.path().join("artifacts"))),
            cache: Arc::new(LocalCacheStore::new(dir.path().join("cache"))),
            run_options: RunOptions {
                scratch_dir: Some(dir.path().to_path_buf()),
                ..RunOptions::default()
            },
            builds_dir: dir.path().join("builds").to_string_lossy().into_owned(),
            custom_build_dir: None,
            log_addresses: flotilla_dispatch::LogAddresses::default(),
        },
    );
    for n in 0..4 {
        let (r, t) = dispatch(&d, &job(&[&format!("echo job {n} ran")])).await;
        assert_eq!(r.outcome, Outcome::Success, "{t}");
        assert!(t.contains(&format!("\njob {n} ran\n")), "{t}");
    }
    assert_eq!(group.call_count("connect_info"), 1);
}
