//! `flotilla debug`: a saved job's VM started again for a person, not for a job.
//!
//! The snapshot (say, of a job that failed with `FLOTILLA_SNAPSHOT: on_failure`) is restored
//! as a job would restore it, but in a directory of its own (`<owner>-debug-<n>`), so no slot
//! is taken and no job's VM is touched; the caller opens a shell or runs commands in it through
//! the guest connector, then [`DebugVm::close`] kills the VM and removes its files. What the
//! session changes is thrown away with it: the snapshot stays as it was.

use super::cleanup::remove_dir;
use super::restore::{SnapshotMeta, restore};
use super::shipping::{self, Imported};
use super::snapshot::Scope;
use super::{MicrovmIsolation, snapshot};
use crate::IsolateError;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ForwardTarget};
use flotilla_guest::{Dialer, GuestConnector};
use flotilla_vmm::Vm;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A VM restored from a snapshot for debugging.
pub struct DebugVm {
    host: Arc<dyn Connector>,
    instance: String,
    dir: String,
    vm: Box<dyn Vm>,
    guest: Arc<GuestConnector>,
    meta: SnapshotMeta,
    took: Duration,
}

impl std::fmt::Debug for DebugVm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebugVm")
            .field("instance", &self.instance)
            .field("dir", &self.dir)
            .field("pid", &self.vm.pid())
            .finish_non_exhaustive()
    }
}

impl MicrovmIsolation {
    /// Restores snapshot `key` on the instance `host` reaches into a VM of its own and waits
    /// for its agent. `key` is a snapshot key or a job's name (made a key as
    /// `FLOTILLA_SNAPSHOT` makes it). With `scope` and a snapshot store, the store's copy of
    /// that scope's snapshot is brought to the instance first, unless it holds that very
    /// snapshot or a newer one (a fleet job's snapshot, debugged on the manager's host).
    pub async fn debug(
        &self,
        host: Arc<dyn Connector>,
        instance: &str,
        key: &str,
        scope: Option<&Scope>,
    ) -> Result<DebugVm, IsolateError> {
        let started = Instant::now();
        let key = snapshot::key_of(key);
        let config = self.config();
        let dir = format!(
            "{}/vms/{}-debug-{}-{:08x}",
            config.state_dir,
            config.owner,
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos()
        );
        let system = |what: &str, e: &dyn std::fmt::Display| IsolateError::Cleanup {
            instance: instance.to_string(),
            message: format!("{what}: {e}"),
        };
        flotilla_vmm::host::run(
            &*host,
            "making the VM's directory",
            &format!("mkdir -p {}", quote(&dir)),
        )
        .await
        .map_err(|e| system("making the VM's directory", &e))?;
        if let (Some(scope), Some(store)) = (scope, &self.store) {
            let imported = shipping::import(&*host, config, &key, &**store, scope).await;
            match imported {
                Ok(Imported::NotInStore) => {
                    let _ = remove_dir(&*host, instance, &dir).await;
                    return Err(system(
                        "finding the snapshot",
                        &format!("the runner's store has no snapshot {key:?} of {scope}"),
                    ));
                }
                Ok(_) => {}
                Err(e) => {
                    let _ = remove_dir(&*host, instance, &dir).await;
                    return Err(system("bringing the snapshot from the store", &e));
                }
            }
        }
        let restored = restore(
            host.clone(),
            &self.qemu,
            config,
            instance,
            &key,
            &dir,
            scope,
        )
        .await;
        let (vm, meta) = match restored {
            Ok(r) => r,
            Err(e) => {
                let _ = remove_dir(&*host, instance, &dir).await;
                return Err(system("restoring the snapshot", &e));
            }
        };
        let socket = vm.agent().socket;
        let dial_host = host.clone();
        let dial: Dialer = Arc::new(move || {
            let (host, socket) = (dial_host.clone(), socket.clone());
            Box::pin(async move { host.forward(&ForwardTarget::Unix(socket)).await })
        });
        let guest = Arc::new(
            GuestConnector::new(format!("debug VM of snapshot {key}"), dial)
                .with_env(meta.env.clone()),
        );
        let session = DebugVm {
            host,
            instance: instance.to_string(),
            dir,
            vm,
            guest,
            meta,
            took: Duration::ZERO,
        };
        if let Err(e) = session.guest.wait_ready(config.boot_timeout).await {
            let message = format!("the restored VM did not answer: {e}");
            session.close().await;
            return Err(IsolateError::Cleanup {
                instance: instance.to_string(),
                message,
            });
        }
        Ok(DebugVm {
            took: started.elapsed(),
            ..session
        })
    }
}

impl DebugVm {
    /// The guest: commands, terminals and copies in the restored VM.
    pub fn guest(&self) -> &Arc<GuestConnector> {
        &self.guest
    }

    /// The image the snapshotted job ran.
    pub fn image(&self) -> &str {
        &self.meta.image
    }

    /// The snapshotted job's project directory in the VM, when the snapshot says.
    pub fn project_dir(&self) -> Option<&str> {
        self.meta.project_dir.as_deref()
    }

    /// The guest's base environment.
    pub fn env(&self) -> &[(String, String)] {
        &self.meta.env
    }

    /// How long the restore took, to a ready agent.
    pub fn took(&self) -> Duration {
        self.took
    }

    /// The VMM's pid on the instance.
    pub fn pid(&self) -> u32 {
        self.vm.pid()
    }

    /// Kills the VM and removes its files (what the session changed goes with them).
    pub async fn close(self) {
        self.guest.disconnect().await;
        if let Err(e) = self.vm.kill().await {
            tracing::warn!(instance = %self.instance, error = %e, "killing the debug VM");
        }
        if let Err(e) = remove_dir(&*self.host, &self.instance, &self.dir).await {
            tracing::warn!(instance = %self.instance, error = %e, "removing the debug VM's files");
        }
    }
}
