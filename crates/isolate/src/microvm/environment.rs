//! One job's microVM: booted in the environment's `prepare`, build stages run in it through
//! the guest agent, helper stages on the instance, the job's directories copied between the
//! two when the side that runs changes.

use super::boot::{BootCache, BootWanted, agent_words, boot_pieces, not_up};
use super::cleanup::remove_dir;
use super::restore::{self, SnapshotMeta};
use super::shipping::{self, Imported};
use super::sizing::{self, VmSize};
use super::snapshot::{Scope, SnapshotPlan, When};
use super::{MicrovmConfig, rootfs, services, sync};
use crate::command::{helper_command, script_command};
use crate::exec::run_with;
use crate::layout::BuildLayout;
use crate::shell::ShellEnvironment;
use crate::{IsolateError, IsolatedEnvironment, PrepareRequest};
use async_trait::async_trait;
use flotilla_connect::shell::quote;
use flotilla_connect::{Connector, ForwardTarget};
use flotilla_guest::{Dialer, GuestConnector};
use flotilla_job::model::Image;
use flotilla_job::script::{ANSI_RESET, ANSI_YELLOW};
use flotilla_job::{CacheStore, EnvError, EnvPaths, Environment, ExecSpec, ExitStatus, Place};
use flotilla_vmm::qemu::Qemu;
use flotilla_vmm::{
    Accel, AfterSnapshot, Disk, Machine, SnapshotFiles, Vm, VmSpec, Vmm, VmmError, disk,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Free space in a service's root file system beyond its image's files, in MiB.
const SERVICE_DISK_FREE_MIB: u64 = 256;

/// The script that flattens each of the `disks` frozen layers in `dir` whose backing file is
/// under `snapshots` (another snapshot's disk) into a qcow2 file of its own. Layers over a
/// cached root file system keep their backing: that file is never changed or replaced.
fn detach_script(dir: &str, disks: usize, snapshots: &str) -> String {
    format!(
        r#"set -e
dir={dir}
base={base}
i=0
while [ "$i" -lt {disks} ]; do
  d="$dir/disk-$i.qcow2"
  b=$(qemu-img info -U "$d" | sed -n 's/^backing file: \([^ ]*\).*/\1/p')
  case "$b" in
    "$base"/*)
      qemu-img convert -U -O qcow2 "$d" "$d.flat"
      mv -f "$d.flat" "$d"
      ;;
  esac
  i=$((i + 1))
done
"#,
        dir = quote(dir),
        base = quote(snapshots),
    )
}

/// Where the job's directories were last written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// On the instance (a helper stage ran last, or nothing yet).
    Instance,
    /// In the VM (a build stage ran last).
    Vm,
}

/// A started VM, the guest's base environment, and how it started (for the log).
type Booted = (Box<dyn Vm>, Vec<(String, String)>, String);

/// The running VM of a job.
struct Running {
    vm: Box<dyn Vm>,
    guest: Arc<GuestConnector>,
}

/// One job's environment at the `microvm` level.
pub(crate) struct MicrovmEnvironment {
    connector: Arc<dyn Connector>,
    instance: String,
    slot: usize,
    layout: BuildLayout,
    helper: ShellEnvironment,
    config: Arc<MicrovmConfig>,
    qemu: Qemu,
    image: Option<String>,
    /// The job's services and the environment each gets.
    services: Vec<(Image, Vec<String>)>,
    /// The services' root file systems, found while the VM's disks are made.
    service_roots: OnceLock<Vec<rootfs::Rootfs>>,
    running: OnceLock<Running>,
    side: Mutex<Side>,
    plan: SnapshotPlan,
    /// The VM's size, and warnings about the job's requests.
    size: (VmSize, Vec<String>),
    /// Build stages run so far (the first is `step_script`).
    builds: AtomicUsize,
    /// The VM was restored and nothing was copied into it yet.
    restored: AtomicBool,
    /// The guest's base environment and the image (kept with a snapshot).
    guest_env: OnceLock<(Vec<(String, String)>, String)>,
    /// The kernel and initramfs found on each instance (shared by the level's jobs).
    boot_cache: BootCache,
    /// Whose snapshots the job saves and restores: its project's, on refs protected alike.
    scope: Scope,
    /// Where snapshots are carried between instances, if anywhere ([`shipping`]).
    store: Option<Arc<dyn CacheStore>>,
}

impl std::fmt::Debug for MicrovmEnvironment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MicrovmEnvironment")
            .field("instance", &self.instance)
            .field("slot", &self.slot)
            .field("vm", &self.running.get().map(|r| r.vm.pid()))
            .finish_non_exhaustive()
    }
}

fn vmm_error(what: &str, e: VmmError) -> EnvError {
    EnvError::System(format!("{what}: {e}"))
}

impl MicrovmEnvironment {
    pub(crate) fn new(
        req: &PrepareRequest<'_>,
        layout: BuildLayout,
        helper: ShellEnvironment,
        config: Arc<MicrovmConfig>,
        qemu: Qemu,
        boot_cache: BootCache,
        store: Option<Arc<dyn CacheStore>>,
    ) -> MicrovmEnvironment {
        let image = req
            .job
            .image
            .as_ref()
            .map(|i| i.name.clone())
            .filter(|n| !n.is_empty())
            .or_else(|| config.default_image.clone());
        let size = sizing::for_job(
            VmSize {
                vcpus: config.vcpus,
                memory_mib: config.memory_mib,
            },
            req.job,
        );
        let services = req
            .job
            .services
            .iter()
            .map(|s| {
                let env =
                    crate::service::service_env(req.job, s, &layout.paths, req.slot, "microvm");
                (s.clone(), env)
            })
            .collect();
        MicrovmEnvironment {
            connector: req.connector.clone(),
            instance: req.instance_id.to_string(),
            slot: req.slot,
            layout,
            helper,
            config,
            qemu,
            image,
            services,
            service_roots: OnceLock::new(),
            running: OnceLock::new(),
            side: Mutex::new(Side::Instance),
            plan: SnapshotPlan::for_job(req.job),
            size,
            builds: AtomicUsize::new(0),
            restored: AtomicBool::new(false),
            guest_env: OnceLock::new(),
            boot_cache,
            scope: Scope::of(req.job),
            store,
        }
    }

    fn vm_dir(&self) -> String {
        self.config.vm_dir(self.slot)
    }

    /// The job's directories, as both sides see them.
    fn job_dirs(&self) -> [&str; 2] {
        [&self.layout.paths.project_dir, &self.layout.paths.tmp_dir]
    }

    fn guest(&self) -> Result<Arc<GuestConnector>, EnvError> {
        self.running
            .get()
            .map(|r| r.guest.clone())
            .ok_or_else(|| EnvError::System("the job's microVM is not running".into()))
    }

    /// Boots the job's VM, or restores it from a snapshot; adds lines for the job's log.
    async fn boot(&self, text: &mut String) -> Result<(), EnvError> {
        let host = &*self.connector;
        let started = Instant::now();
        // What an earlier job (or a dead manager) left in this slot goes first.
        let dir = self.vm_dir();
        if self
            .qemu
            .kill_dir(host, &dir)
            .await
            .map_err(|e| vmm_error("stopping the slot's earlier VM", e))?
        {
            tracing::warn!(instance = %self.instance, slot = self.slot, "killed a VM an earlier job left in the slot");
            text.push_str(&format!(
                "{ANSI_YELLOW}WARNING: killed a VM an earlier job left in this slot{ANSI_RESET}\n"
            ));
        }
        remove_dir(host, &self.instance, &dir)
            .await
            .map_err(|e| EnvError::System(e.to_string()))?;
        flotilla_vmm::host::run(
            host,
            "making the VM's directory",
            &format!("mkdir -p {}", quote(&dir)),
        )
        .await
        .map_err(|e| vmm_error("making the VM's directory", e))?;
        let cleared = started.elapsed();
        let (vm, env, what) = match &self.plan.restore {
            Some(key) => self.restore(key, &dir).await?,
            None => self.cold_boot(&dir, text).await?,
        };
        let vm_started = started.elapsed();
        let socket = vm.agent().socket;
        let host_arc = self.connector.clone();
        let dial: Dialer = Arc::new(move || {
            let (host, socket) = (host_arc.clone(), socket.clone());
            Box::pin(async move { host.forward(&ForwardTarget::Unix(socket)).await })
        });
        let guest = Arc::new(
            GuestConnector::new(format!("microvm slot {}", self.slot), dial).with_env(env),
        );
        // Stored before waiting, so a failed boot's VM is still killed by the cleanup.
        let pid = vm.pid();
        let (vcpus, memory_mib) = (vm.spec().vcpus, vm.spec().memory_mib);
        let _ = self.running.set(Running {
            vm,
            guest: guest.clone(),
        });
        let info = match guest.wait_ready(self.config.boot_timeout).await {
            Ok(info) => info,
            Err(e) => return Err(not_up(host, &dir, "microVM", e).await),
        };
        let ready = started.elapsed();
        text.push_str(&format!(
            "microVM {what} in {:.2} s (slot cleared {:.2} s, VM running {:.2} s, agent answered \
             {:.2} s; {} vCPU, {} MiB, {}, pid {pid}): {}\n",
            ready.as_secs_f64(),
            cleared.as_secs_f64(),
            vm_started.as_secs_f64(),
            ready.as_secs_f64(),
            vcpus,
            memory_mib,
            if self.config.kvm { "KVM" } else { "TCG" },
            info.info
        ));
        Ok(())
    }

    /// Starts the VM from snapshot `key` in `dir`.
    async fn restore(&self, key: &str, dir: &str) -> Result<Booted, EnvError> {
        let fetched = match &self.store {
            Some(store) => {
                shipping::import(&*self.connector, &self.config, key, &**store, &self.scope).await
            }
            None => Ok(Imported::NotInStore),
        };
        let restored = restore::restore(
            self.connector.clone(),
            &self.qemu,
            &self.config,
            &self.instance,
            key,
            dir,
            Some(&self.scope),
        )
        .await;
        // A store that failed is the reason when the instance has no copy either; otherwise
        // the instance's copy serves, and the failure is a warning.
        let (vm, meta) = match (restored, &fetched) {
            (Ok(r), _) => r,
            (Err(e), Err(store)) => {
                return Err(EnvError::System(format!(
                    "{e}; bringing it from the runner's store failed: {store}"
                )));
            }
            (Err(e), Ok(Imported::NotInStore)) if self.store.is_some() => {
                return Err(EnvError::System(format!(
                    "{e}, and the runner's store has none for the job's {}",
                    self.scope
                )));
            }
            (Err(e), Ok(_)) => return Err(e),
        };
        let _ = self.guest_env.set((meta.env.clone(), meta.image.clone()));
        self.restored.store(true, Ordering::SeqCst);
        Ok((
            vm,
            meta.env,
            match fetched {
                Ok(Imported::Fetched(bytes)) => format!(
                    "restored from snapshot {key} (image {}; brought from the runner's store, \
                     {:.1} MiB)",
                    meta.image,
                    bytes as f64 / 1048576.0
                ),
                Ok(Imported::LocalNewer) => format!(
                    "restored from snapshot {key} (image {}; the instance's copy, newer than \
                     the runner's store's)",
                    meta.image
                ),
                Err(e) => format!(
                    "restored from snapshot {key} (image {}; the instance's copy: the \
                     runner's store failed: {e})",
                    meta.image
                ),
                Ok(_) => format!("restored from snapshot {key} (image {})", meta.image),
            },
        ))
    }

    /// Boots a new VM from the job's image in `dir`.
    async fn cold_boot(&self, dir: &str, text: &mut String) -> Result<Booted, EnvError> {
        let host = &*self.connector;
        let prep = Instant::now();
        let image = self.image.clone().ok_or_else(|| {
            EnvError::System(
                "the microvm level needs an image: name one in the job (image:) or set \
                 [runners.microvm] image"
                    .into(),
            )
        })?;
        // The boot pieces and the root file system at once: each is a few round trips.
        let boot_dir = self.config.boot_dir();
        let wanted = BootWanted {
            kernel: self.config.kernel.as_deref(),
            boot_dir: &boot_dir,
            machine: Machine::Microvm,
            network: self.config.network,
        };
        let boot_pieces = boot_pieces(host, &self.instance, &wanted, &self.boot_cache);
        let root_fs = |image: String, free_mib: u64| async move {
            rootfs::ensure(
                host,
                &self.instance,
                &image,
                &self.config.rootfs_dir(),
                free_mib,
            )
            .await
            .map_err(|e| EnvError::System(e.to_string()))
        };
        // Services write little (their data): a smaller margin than the job's.
        let service_roots = futures::future::join_all(
            self.services
                .iter()
                .map(|(s, _)| root_fs(s.name.clone(), SERVICE_DISK_FREE_MIB)),
        );
        let (pieces, root, service_roots) = tokio::join!(
            boot_pieces,
            root_fs(image.clone(), self.config.disk_free_mib),
            service_roots
        );
        let (kernel_path, initrd_path) = pieces?;
        let root = root?;
        let service_roots = service_roots.into_iter().collect::<Result<Vec<_>, _>>()?;
        text.push_str(&format!(
            "Using image {image} ({}) as the root file system{}\n",
            root.image_id,
            if root.made { ", converted now" } else { "" }
        ));
        let top = format!("{dir}/disk-0.qcow2");
        disk::overlay(host, &top, &root.path, "raw", None)
            .await
            .map_err(|e| vmm_error("making the VM's disk", e))?;
        let mut disks = vec![Disk {
            path: top,
            format: "qcow2".into(),
            read_only: false,
        }];
        for (i, r) in service_roots.iter().enumerate() {
            let path = format!("{dir}/service-{i}.qcow2");
            disk::overlay(host, &path, &r.path, "raw", None)
                .await
                .map_err(|e| vmm_error("making a service's disk", e))?;
            disks.push(Disk {
                path,
                format: "qcow2".into(),
                read_only: false,
            });
        }
        let _ = self.service_roots.set(service_roots);
        let extra = agent_words(&self.config.owner, self.slot, self.config.network);
        let spec = VmSpec {
            name: format!("flotilla-{}-slot-{}", self.config.owner, self.slot),
            machine: Machine::Microvm,
            accel: if self.config.kvm {
                Accel::Kvm
            } else {
                Accel::Tcg
            },
            vcpus: self.size.0.vcpus,
            memory_mib: self.size.0.memory_mib,
            kernel: kernel_path,
            initrd: initrd_path,
            cmdline: flotilla_vmm::kernel_cmdline(self.config.tsc_khz, &extra),
            disks,
            user_net: self.config.network,
            dir: dir.to_string(),
        };
        let prepared = prep.elapsed();
        let vm = self
            .qemu
            .boot(self.connector.clone(), spec)
            .await
            .map_err(|e| vmm_error("starting QEMU", e))?;
        tracing::debug!(
            prepared_ms = prepared.as_millis() as u64,
            qemu_ms = prep.elapsed().checked_sub(prepared).unwrap().as_millis() as u64,
            "microVM started"
        );
        text.push_str(&format!(
            "Disk, kernel and initramfs ready in {:.2} s, QEMU started in {:.2} s\n",
            prepared.as_secs_f64(),
            prep.elapsed().checked_sub(prepared).unwrap().as_secs_f64()
        ));
        let mut env = root.env.clone();
        if !env.iter().any(|(k, _)| k == "PATH") {
            env.push((
                "PATH".into(),
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            ));
        }
        if !env.iter().any(|(k, _)| k == "HOME") {
            env.push(("HOME".into(), "/root".into()));
        }
        let _ = self.guest_env.set((env.clone(), image));
        Ok((vm, env, "up".to_string()))
    }

    /// Boots the VM (or restores it), then starts the job's services in it unless they came
    /// with the snapshot.
    async fn boot_and_start_services(&self, text: &mut String) -> Result<(), EnvError> {
        self.boot(text).await?;
        if self.services.is_empty() {
            return Ok(());
        }
        if self.restored.load(Ordering::SeqCst) {
            text.push_str(
                "The services run as the snapshot kept them; the job's own list is not started \
                 again\n",
            );
            return Ok(());
        }
        let roots = self.service_roots.get().cloned().unwrap_or_default();
        let planned: Vec<services::Planned> = self
            .services
            .iter()
            .zip(roots)
            .map(|((image, env), rootfs)| services::Planned {
                ports: crate::service::service_ports(image, &rootfs.exposed_ports),
                image: image.clone(),
                rootfs,
                env: env.clone(),
            })
            .collect();
        let lines = services::start(
            &*self.guest()?,
            &planned,
            self.config.wait_for_services_timeout,
        )
        .await
        .map_err(EnvError::System)?;
        text.push_str(&lines);
        Ok(())
    }

    /// Saves the VM as snapshot `key` (it runs on); returns the line for the job's log.
    async fn save(&self, key: &str) -> Result<String, EnvError> {
        let host = &*self.connector;
        let running = self
            .running
            .get()
            .ok_or_else(|| EnvError::System("the job's microVM is not running".into()))?;
        let (env, image) = self.guest_env.get().cloned().unwrap_or_default();
        let base = self.config.snapshots_dir();
        let fin = format!("{base}/{key}");
        // Written aside and renamed: a restore never sees half a snapshot.
        let tmp = SnapshotFiles {
            dir: format!("{base}/.{key}.{}-slot-{}.tmp", self.config.owner, self.slot),
        };
        // Snapshots hold what the job held (its variables too): for the level's user only.
        flotilla_vmm::host::run(
            host,
            "clearing a snapshot directory",
            &format!(
                "mkdir -p {b} && chmod 700 {b} && rm -rf {t}",
                b = quote(&base),
                t = quote(&tmp.dir)
            ),
        )
        .await
        .map_err(|e| vmm_error("clearing a snapshot directory", e))?;
        let report = running
            .vm
            .snapshot(&tmp, AfterSnapshot::Resume)
            .await
            .map_err(|e| vmm_error("saving the VM", e))?;
        // A VM restored from a snapshot writes over that snapshot's disks: the layers saved
        // now back onto them by path. Flattened, this snapshot stands without that one, which
        // may be replaced (by a save of the same key, or an import) while this one is kept.
        flotilla_vmm::host::run(
            host,
            "making the snapshot's disks stand alone",
            &detach_script(&tmp.dir, running.vm.spec().disks.len(), &base),
        )
        .await
        .map_err(|e| vmm_error("making the snapshot's disks stand alone", e))?;
        // Its kernel and initramfs may be such a snapshot's too (brought from the store):
        // copied for the same reason.
        let mut spec = running.vm.spec().clone();
        for (file, name) in [(&mut spec.kernel, "vmlinuz"), (&mut spec.initrd, "initrd")] {
            if file.starts_with(&format!("{base}/")) {
                flotilla_vmm::host::run(
                    host,
                    "keeping the kernel with the snapshot",
                    &format!(
                        "cp {} {}",
                        quote(file),
                        quote(&format!("{}/{name}", tmp.dir))
                    ),
                )
                .await
                .map_err(|e| vmm_error("keeping the kernel with the snapshot", e))?;
                *file = name.to_string();
            }
        }
        let meta = SnapshotMeta {
            spec,
            env,
            image,
            project_dir: Some(self.layout.paths.project_dir.clone()),
            id: Some(uuid::Uuid::new_v4().to_string()),
            project: Some(self.scope.project.clone()),
            protected: Some(self.scope.protected),
            saved_at_ms: Some(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            ),
        };
        let described = serde_json::to_vec(&meta)
            .map_err(|e| EnvError::System(format!("describing the snapshot: {e}")))?;
        flotilla_vmm::host::write(host, &format!("{}/meta.json", tmp.dir), described)
            .await
            .map_err(|e| vmm_error("describing the snapshot", e))?;
        flotilla_vmm::host::run(
            host,
            "keeping the snapshot",
            // On the lock imports of the key take ([`shipping::unpack_script`]).
            &format!(
                "exec 9>{l} && flock 9 && rm -rf {f} && mv {t} {f}",
                l = quote(&format!("{base}/.{key}.lock")),
                f = quote(&fin),
                t = quote(&tmp.dir)
            ),
        )
        .await
        .map_err(|e| vmm_error("keeping the snapshot", e))?;
        let mut line = format!(
            "Saved snapshot {key} of the VM on instance {}: memory and devices {:.1} MiB, disk \
             {:.1} MiB written by the job, the VM paused {:.0} ms; start a job from it with \
             FLOTILLA_RESTORE_FROM: {key}",
            self.instance,
            report.state_bytes as f64 / 1048576.0,
            report.disk_bytes as f64 / 1048576.0,
            report.took.as_secs_f64() * 1e3
        );
        if let Some(store) = &self.store {
            let started = Instant::now();
            match shipping::export(
                host,
                &self.config,
                key,
                &meta,
                &**store,
                &self.scope,
                self.slot,
            )
            .await
            {
                Ok(bytes) => line.push_str(&format!(
                    "\nKept snapshot {key} in the runner's store for any instance: {:.1} MiB \
                     (disks flattened, kernel and initramfs included, compressed) in {:.2} s",
                    bytes as f64 / 1048576.0,
                    started.elapsed().as_secs_f64()
                )),
                Err(e) => line.push_str(&format!(
                    "\n{ANSI_YELLOW}WARNING: snapshot {key} stays on instance {} only: {e}{ANSI_RESET}",
                    self.instance
                )),
            }
        }
        Ok(line)
    }

    /// Copies the job's directories to where the next stage runs.
    async fn follow(&self, to: Side, cancel: CancellationToken) -> Result<(), EnvError> {
        let from = *self.side.lock().unwrap_or_else(|e| e.into_inner());
        if from == to {
            return Ok(());
        }
        let guest = self.guest()?;
        let dirs = self.job_dirs();
        // The first copy into a restored VM keeps what the snapshotted job left there.
        let mode = if to == Side::Vm && self.restored.swap(false, Ordering::SeqCst) {
            sync::Mode::Merge
        } else {
            sync::Mode::Replace
        };
        match to {
            Side::Vm => {
                sync::copy(
                    &*self.connector,
                    &*guest,
                    &dirs,
                    mode,
                    None,
                    "copying the job's files into the VM",
                    cancel,
                )
                .await?;
            }
            Side::Instance => {
                // The VM's side is the job's: what it sends is checked before the
                // instance extracts it.
                let rules = sync::rules_out_of_vm(&dirs, &self.layout.paths.project_dir);
                sync::copy(
                    &*guest,
                    &*self.connector,
                    &dirs,
                    mode,
                    Some(rules),
                    "copying the job's files out of the VM",
                    cancel,
                )
                .await?;
            }
        }
        *self.side.lock().unwrap_or_else(|e| e.into_inner()) = to;
        Ok(())
    }
}

#[async_trait]
impl Environment for MicrovmEnvironment {
    fn paths(&self) -> &EnvPaths {
        &self.layout.paths
    }

    fn disposable(&self) -> bool {
        true
    }

    async fn prepare(
        &self,
        log: &mut (dyn AsyncWrite + Send + Unpin),
        cancel: CancellationToken,
    ) -> Result<(), EnvError> {
        let mut text = format!(
            "Using microvm isolation on instance {} (slot {})\n",
            self.instance, self.slot
        );
        if self.services.len() > services::MAX_SERVICES {
            return Err(EnvError::System(format!(
                "the job has {} services; a microVM runs at most {}",
                self.services.len(),
                services::MAX_SERVICES
            )));
        }
        for w in self.plan.warnings.iter().chain(&self.size.1) {
            text.push_str(&format!("{ANSI_YELLOW}WARNING: {w}{ANSI_RESET}\n"));
        }
        // The helper side is the shell level's: stop what an earlier job left running in the
        // slot. Its own lines (it calls itself shell isolation) stay out of the log but for
        // warnings.
        let mut helper_log = Vec::new();
        self.helper.prepare(&mut helper_log, cancel.clone()).await?;
        for line in String::from_utf8_lossy(&helper_log).lines() {
            if line.contains("WARNING: stopped") {
                text.push_str(line);
                text.push('\n');
            }
        }
        let booted = tokio::select! {
            r = self.boot_and_start_services(&mut text) => r,
            () = cancel.cancelled() => Err(EnvError::Canceled),
        };
        log.write_all(text.as_bytes())
            .await
            .map_err(|source| EnvError::Io {
                context: "writing to the job log".into(),
                source,
            })?;
        booted
    }

    async fn exec(&self, spec: ExecSpec<'_>) -> Result<ExitStatus, EnvError> {
        match spec.place {
            Place::Helper => {
                self.follow(Side::Instance, spec.cancel.clone()).await?;
                self.helper.exec(spec).await
            }
            Place::Build => {
                self.follow(Side::Vm, spec.cancel.clone()).await?;
                let guest = self.guest()?;
                let first = self.builds.fetch_add(1, Ordering::SeqCst) == 0;
                let Some((when, key)) = self.plan.save.as_ref().filter(|_| first) else {
                    return run_with(
                        &*guest,
                        "running in the microVM",
                        spec,
                        &script_command(),
                        helper_command,
                    )
                    .await;
                };
                // The stage's output stays ours after it ends: the snapshot is reported
                // where the job's output is.
                let ExecSpec {
                    place,
                    command,
                    stdin,
                    mut stdout,
                    stderr,
                    cancel,
                } = spec;
                let borrowed = ExecSpec {
                    place,
                    command,
                    stdin,
                    stdout: Box::new(&mut stdout),
                    stderr,
                    cancel,
                };
                let status = run_with(
                    &*guest,
                    "running in the microVM",
                    borrowed,
                    &script_command(),
                    helper_command,
                )
                .await?;
                if *when == When::Always || !status.success() {
                    let line = match self.save(key).await {
                        Ok(line) => line,
                        Err(e) => {
                            format!("{ANSI_YELLOW}WARNING: no snapshot was taken: {e}{ANSI_RESET}")
                        }
                    };
                    let _ = stdout.write_all(format!("\n{line}\n").as_bytes()).await;
                }
                Ok(status)
            }
        }
    }
}

#[async_trait]
impl IsolatedEnvironment for MicrovmEnvironment {
    async fn cleanup(&self) -> Result<(), IsolateError> {
        if let Some(r) = self.running.get() {
            r.guest.disconnect().await;
        }
        // By the directory, not the handle: a VM whose boot was interrupted has none.
        let dir = self.vm_dir();
        let killed = self
            .qemu
            .kill_dir(&*self.connector, &dir)
            .await
            .map_err(|e| IsolateError::Cleanup {
                instance: self.instance.clone(),
                message: format!("killing the job's VM: {e}"),
            });
        let removed = remove_dir(&*self.connector, &self.instance, &dir).await;
        let helper = self.helper.cleanup().await;
        killed?;
        removed?;
        helper
    }
}
