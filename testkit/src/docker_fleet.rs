//! A docker fleet for end-to-end job tests: a [`DockerGroup`] of the offline instance image
//! with a unique name, a [`Scaler`] keeping every slot ready, and a [`Dispatcher`] running jobs
//! at shell or docker isolation over SSH, with local artifact and cache stores.
//!
//! Every container of the group is removed when the fleet is dropped, even when the test
//! panicked ([`FleetGuard`]); the job containers live inside the instances, so they go with
//! them.
//!
//! ```no_run
//! # async fn t() {
//! use flotilla_testkit::docker_fleet::{DockerFleet, FleetIsolation, FleetOptions};
//! let fleet = DockerFleet::start(FleetOptions::new("demo", FleetIsolation::Shell)).await;
//! # }
//! ```

use crate::containers::LabelGuard;
use crate::images::instance_image;
use async_trait::async_trait;
use bollard::Docker;
use bollard::models::ContainerSummary;
use bollard::query_parameters::ListContainersOptions;
use flotilla_connect::Connector;
use flotilla_connect::docker_api::{DockerRoute, docker_client};
use flotilla_connect::ssh::SshConnector;
use flotilla_dispatch::{Dispatcher, DispatcherConfig, SshConnectors};
use flotilla_fleet::{InstanceGroup, Settings};
use flotilla_isolate::{DockerIsolation, DockerIsolationConfig, Isolation, ShellIsolation};
use flotilla_job::{LocalArtifactStore, LocalCacheStore, RunOptions};
use flotilla_provider_docker::{DockerGroup, DockerSettings, GROUP_LABEL};
use flotilla_scaler::{Cause, Hooks, Policy, Scaler, ScalerBuilder, ScalerConfig, Schedule};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The isolation level the fleet's dispatcher runs jobs at.
#[derive(Debug, Clone)]
pub enum FleetIsolation {
    /// Shell isolation (instances without an inner dockerd).
    Shell,
    /// Docker isolation on each instance's inner dockerd (which has the busybox image
    /// preloaded).
    Docker(Box<DockerIsolationConfig>),
}

/// How to build a fleet.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Part of the group's name (which is unique per process and call).
    pub tag: String,
    /// Instances to start (and the group's maximum).
    pub instances: usize,
    /// Job slots per instance.
    pub capacity_per_instance: usize,
    /// The isolation level.
    pub isolation: FleetIsolation,
    /// The job runner's options.
    pub run_options: RunOptions,
    /// The builds directory on the instances.
    pub builds_dir: String,
}

impl FleetOptions {
    /// One instance with one slot, builds in `/builds`, a 5 s stop grace.
    pub fn new(tag: &str, isolation: FleetIsolation) -> FleetOptions {
        FleetOptions {
            tag: tag.to_string(),
            instances: 1,
            capacity_per_instance: 1,
            isolation,
            run_options: RunOptions {
                stop_grace: Duration::from_secs(5),
                ..RunOptions::default()
            },
            builds_dir: "/builds".into(),
        }
    }

    /// Docker isolation with the default configuration.
    pub fn docker(tag: &str) -> FleetOptions {
        FleetOptions::new(tag, FleetIsolation::Docker(Box::default()))
    }
}

/// Removes every container of a docker group (by its group label) when dropped.
#[derive(Debug)]
pub struct FleetGuard {
    /// Held for what its drop does.
    _containers: LabelGuard,
}

impl FleetGuard {
    /// A guard for the group named `name`.
    pub fn new(name: &str) -> FleetGuard {
        FleetGuard {
            _containers: LabelGuard::new(format!("{GROUP_LABEL}={name}")),
        }
    }
}

/// Holds an instance back until its inner dockerd has loaded the preloaded images (the
/// instance image touches `/run/flotilla-dockerd-ready` then).
#[derive(Debug)]
struct InnerDockerdReady;

#[async_trait]
impl Hooks for InnerDockerdReady {
    async fn ready_up(
        &self,
        _group: &dyn InstanceGroup,
        instance: &str,
        _cause: Cause,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        loop {
            let status = tokio::process::Command::new("docker")
                .args([
                    "exec",
                    instance,
                    "test",
                    "-e",
                    "/run/flotilla-dockerd-ready",
                ])
                .status()
                .await
                .map_err(|e| format!("running docker exec: {e}"))?;
            if status.success() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("the inner dockerd of {instance} never got ready"));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// A running fleet. Dropping it removes its instances.
pub struct DockerFleet {
    /// The group's name (label `flotilla.group`).
    pub name: String,
    /// The instance group.
    pub group: Arc<DockerGroup>,
    /// The scaler over it.
    pub scaler: Scaler,
    /// The dispatcher.
    pub dispatcher: Arc<Dispatcher>,
    /// The docker isolation, when the fleet uses it.
    pub docker_isolation: Option<Arc<DockerIsolation>>,
    /// The artifact store.
    pub artifacts: Arc<LocalArtifactStore>,
    /// The cache store.
    pub cache: Arc<LocalCacheStore>,
    /// Where the stores keep their files.
    pub stores: tempfile::TempDir,
    _guard: FleetGuard,
}

impl std::fmt::Debug for DockerFleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerFleet")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl DockerFleet {
    /// Starts the fleet and waits (up to three minutes, then panics) until every slot is
    /// ready.
    pub async fn start(options: FleetOptions) -> DockerFleet {
        // The fleet's own log lines (INFO and up, or `RUST_LOG`) in the test's captured output,
        // shown when it fails.
        let _ = tracing_subscriber::fmt()
            .with_test_writer()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            )
            .try_init();
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "d{}-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed),
            options.tag
        );
        let guard = FleetGuard::new(&name);
        let docker_isolation = matches!(options.isolation, FleetIsolation::Docker(_));
        let mut settings = DockerSettings::new(&name, instance_image());
        settings.inner_dockerd = docker_isolation;
        settings.max_size = options.instances;
        let group = Arc::new(DockerGroup::new(settings).expect("docker group settings"));
        group
            .init(&Settings::default())
            .await
            .expect("initialising the docker group");

        let slots = options.instances * options.capacity_per_instance;
        let config = ScalerConfig {
            capacity_per_instance: options.capacity_per_instance,
            max_instances: options.instances,
            instance_acquire_timeout: Duration::from_secs(120),
            update_interval: Duration::from_secs(2),
            update_interval_when_expecting: Duration::from_millis(250),
            ..ScalerConfig::default()
        };
        let policy = Policy {
            idle_count: slots,
            idle_time: Duration::from_secs(3600),
            ..Policy::default()
        };
        let mut builder =
            ScalerBuilder::new(group.clone(), config).schedule(Schedule::single(policy));
        if docker_isolation {
            builder = builder.hooks(Arc::new(InnerDockerdReady));
        }
        let scaler = builder.start().await.expect("starting the scaler");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
        loop {
            let counts = scaler.snapshot().counts;
            if counts.idle >= slots {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the fleet {name} did not get {slots} ready slots: {counts}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        let stores = tempfile::tempdir().expect("a temporary directory");
        let artifacts = Arc::new(LocalArtifactStore::new(stores.path().join("artifacts")));
        let cache = Arc::new(LocalCacheStore::new(stores.path().join("cache")));
        let (isolation, docker): (Arc<dyn Isolation>, Option<Arc<DockerIsolation>>) =
            match options.isolation {
                FleetIsolation::Shell => (Arc::new(ShellIsolation::new()), None),
                FleetIsolation::Docker(config) => {
                    let d = Arc::new(DockerIsolation::new(*config));
                    (d.clone(), Some(d))
                }
            };
        let dispatcher = Arc::new(Dispatcher::new(
            scaler.clone(),
            DispatcherConfig {
                isolation: isolation.into(),
                connectors: Arc::new(SshConnectors::new(group.clone())),
                artifacts: artifacts.clone(),
                cache: cache.clone(),
                run_options: options.run_options,
                builds_dir: options.builds_dir,
                custom_build_dir: None,
                log_addresses: flotilla_dispatch::LogAddresses::default(),
            },
        ));
        DockerFleet {
            name,
            group,
            scaler,
            dispatcher,
            docker_isolation: docker,
            artifacts,
            cache,
            stores,
            _guard: guard,
        }
    }

    /// The ids of the fleet's instances (in the scaler's ledger).
    pub fn instances(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .scaler
            .snapshot()
            .ledger
            .instances()
            .map(|i| i.id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// A fresh SSH connector to `instance` (its own connection, for assertions).
    pub async fn ssh(&self, instance: &str) -> Arc<dyn Connector> {
        let info = self
            .group
            .connect_info(instance)
            .await
            .expect("connection details");
        Arc::new(SshConnector::new(info))
    }

    /// A Docker client for the inner dockerd of `instance`, over its own SSH connection.
    pub async fn inner_docker(&self, instance: &str) -> Docker {
        docker_client(self.ssh(instance).await, DockerRoute::default(), 60)
            .await
            .expect("a Docker client for the inner dockerd")
    }

    /// Every container on `instance`'s inner dockerd that a job environment made (label
    /// `flotilla.env` present), in any state.
    pub async fn job_containers(&self, instance: &str) -> Vec<ContainerSummary> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![
                "flotilla.managed=true".to_string(),
                "flotilla.env".to_string(),
            ],
        )]);
        self.inner_docker(instance)
            .await
            .list_containers(Some(ListContainersOptions {
                all: true,
                filters: Some(filters),
                ..Default::default()
            }))
            .await
            .expect("listing job containers")
    }
}
