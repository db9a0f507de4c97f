//! The `qemu` provider: VMs on this host as a fleet's instances, for on-prem fleets without a
//! cloud.
//!
//! - Each instance is a QEMU VM (a `microvm` machine, the kernel booted directly) started from
//!   one base disk, writing to a qcow2 overlay of its own (`snapshot=on`, unlinked in the VM's
//!   directory: it goes when the VM goes). Its sshd is reached at `127.0.0.1:<port>`,
//!   forwarded by QEMU's user-mode network.
//! - `increase(n)` starts `n` VMs (never more than `max_size`), each once its QEMU answers on
//!   QMP; `decrease` ends them (QMP `quit`, else SIGKILL) and removes their directories.
//! - `update` lists the VM directories under `vm_dir` and checks each against the process it
//!   names (the pid file's process must carry the VM's name on its command line) and against
//!   sshd's banner: see [`state::vm_state`]. There is no other list: a restarted flotilla
//!   finds its VMs again from the directories and the live processes.
//! - VMs run in their own session, so neither a signal to flotilla's process group nor
//!   flotilla's death (`kill -9` included) ends them: like any fleeting instance they outlive
//!   the provider process, and the next start adopts them. What ends them is `decrease` (the
//!   scaler's decision, or `delete_instances_on_shutdown`), or the guest's `max_lifetime`.
//! - Credentials: one ed25519 key per group, kept in `key_file`; its public half reaches the
//!   guest on the kernel command line (`flotilla.authorized_key`), which the guest's init
//!   installs for root (see `scripts/vm-image/init.sh`).

mod command;
mod qmp;
mod settings;
pub mod state;
mod vm;

pub use command::{
    DEFAULT_TSC_KHZ, Launch, args, disk_format, kernel_cmdline, tsc_khz_from_cpuinfo,
};
pub use qmp::{QmpError, execute as qmp_execute};
pub use settings::QemuSettings;
pub use vm::{VmDir, VmRecord, is_vm_id, process_name};

use async_trait::async_trait;
use flotilla_fleet::{
    Capabilities, ConnectInfo, ConnectorConfig, ConnectorKind, FleetError, InstanceGroup,
    InstanceId, InstanceStatus, Protocol, ProviderConfig, ProviderInfo, Settings, State,
};
use flotilla_ssh_machine::{GroupKey, ssh_banner};
use futures::future::join_all;
use rand::RngCore;
use std::collections::HashSet;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The provider's name in configuration (`plugin = "qemu"`).
pub const PLUGIN: &str = "qemu";
/// How long a probe waits for sshd's banner.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a new QEMU may take to answer on QMP (it has not booted the guest yet, only
/// itself; a busy host under TCG is slow).
const QMP_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts at starting a VM when the port picked for it was taken meanwhile.
const START_ATTEMPTS: usize = 3;

/// A qemu instance group. Create it with [`QemuGroup::new`], then call
/// [`InstanceGroup::init`].
#[derive(Debug)]
pub struct QemuGroup {
    settings: QemuSettings,
    state: Mutex<GroupState>,
}

#[derive(Debug, Default)]
struct GroupState {
    connector: Option<ConnectorConfig>,
    authorized_key: Option<String>,
    disk_format: &'static str,
    tsc_khz: u64,
    /// VMs being started by this process (their pid may not be written yet).
    starting: HashSet<String>,
    /// VMs whose sshd answered once.
    ready: HashSet<String>,
    /// The ids of the last listing, to report vanished VMs as `deleted` once.
    listed: HashSet<String>,
}

/// The qemu group of a runner, from its `plugin_config` (see [`QemuSettings`]). From the
/// runner: the name (unless set), and with a state directory the VMs' directory
/// `<state_dir>/qemu/<runner>` and the key `<state_dir>/keys/<runner>.qemu.key` (unless set).
pub fn build(config: &ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> {
    Ok(Arc::new(QemuGroup::new(QemuSettings::from_plugin_config(
        &plugin_settings(config)?,
    )?)))
}

/// `plugin_config` with the defaults [`build`] takes from the runner filled in.
fn plugin_settings(config: &ProviderConfig<'_>) -> Result<serde_json::Value, FleetError> {
    let mut settings = match config.plugin_config {
        serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
        other => other.clone(),
    };
    if let serde_json::Value::Object(map) = &mut settings {
        if !map.contains_key("name") {
            map.insert("name".into(), config.runner_name.into());
        }
        if let Some(state_dir) = config.state_dir {
            let state_dir = std::path::absolute(state_dir).map_err(|e| {
                FleetError::Config(format!("state directory {}: {e}", state_dir.display()))
            })?;
            let runner = flotilla_fleet::safe_file_name(config.runner_name);
            if !map.contains_key("vm_dir") {
                let dir = state_dir.join("qemu").join(&runner);
                map.insert("vm_dir".into(), dir.to_string_lossy().into_owned().into());
            }
            if !map.contains_key("key_file") {
                let key = state_dir.join("keys").join(format!("{runner}.qemu.key"));
                map.insert("key_file".into(), key.to_string_lossy().into_owned().into());
            }
        } else if !map.contains_key("vm_dir") {
            return Err(FleetError::Config(
                "qemu plugin_config: vm_dir is required when flotilla has no state directory"
                    .into(),
            ));
        }
    }
    Ok(settings)
}

impl QemuGroup {
    /// A group for `settings`. Nothing is started or checked until [`InstanceGroup::init`].
    pub fn new(settings: QemuSettings) -> Self {
        QemuGroup {
            settings,
            state: Mutex::new(GroupState::default()),
        }
    }

    /// The provider id: `qemu/<name>`.
    pub fn provider_id(&self) -> String {
        format!("qemu/{}", self.settings.name)
    }

    /// The settings.
    pub fn settings(&self) -> &QemuSettings {
        &self.settings
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This group's VM directories (a `vm_dir` shared with another group by mistake never
    /// shows the other's VMs).
    fn vms(&self, op: &'static str) -> Result<Vec<(VmDir, VmRecord)>, FleetError> {
        let all = VmDir::all(&self.settings.vm_dir).map_err(|e| {
            FleetError::provider(op, format!("{}: {e}", self.settings.vm_dir.display()))
        })?;
        let starting = self.lock().starting.clone();
        let mut out = Vec::with_capacity(all.len());
        for d in all {
            match d.record() {
                Some(r) if r.group == self.settings.name => out.push((d, r)),
                Some(_) => {}
                // No record: being made by this process right now, or left by a crash
                // before its QEMU was started (the record is written first), which is
                // removed once it is old enough not to be another process's start.
                None if starting.contains(&d.id) => {}
                None => {
                    let stale = std::fs::metadata(&d.path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok())
                        .is_some_and(|age| age > QMP_START_TIMEOUT);
                    if stale {
                        tracing::info!(vm = %d.id, "removing a VM directory left without a record");
                        let _ = std::fs::remove_dir_all(&d.path);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Starts one VM and waits until its QEMU answers on QMP. On failure nothing is left.
    async fn start_one(&self) -> Result<String, FleetError> {
        let (authorized_key, disk_format, tsc_khz) = {
            let st = self.lock();
            let key = st
                .authorized_key
                .clone()
                .ok_or(FleetError::NotInitialized)?;
            (key, st.disk_format, st.tsc_khz)
        };
        let id = format!("vm-{:08x}", rand::rng().next_u32());
        let dir = VmDir::new(&self.settings.vm_dir, &id);
        self.lock().starting.insert(id.clone());
        let result = self
            .spawn(&dir, &authorized_key, disk_format, tsc_khz)
            .await;
        self.lock().starting.remove(&id);
        if let Err(e) = &result {
            tracing::warn!(group = %self.settings.name, vm = %id, error = %e, "starting a VM failed");
            let _ = std::fs::remove_dir_all(&dir.path);
        }
        result.map(|()| id)
    }

    async fn spawn(
        &self,
        dir: &VmDir,
        authorized_key: &str,
        disk_format: &'static str,
        tsc_khz: u64,
    ) -> Result<(), FleetError> {
        let err = |m: String| FleetError::provider("increase", format!("VM {}: {m}", dir.id));
        std::fs::create_dir_all(&dir.path)
            .map_err(|e| err(format!("{}: {e}", dir.path.display())))?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let ssh_port = free_port().map_err(|e| err(format!("no free port: {e}")))?;
            dir.write_record(&VmRecord {
                group: self.settings.name.clone(),
                ssh_port,
                created: vm::now_secs(),
            })
            .map_err(|e| err(format!("writing its record: {e}")))?;
            let args = command::args(&Launch {
                settings: &self.settings,
                id: &dir.id,
                ssh_port,
                authorized_key,
                tsc_khz,
                disk_format,
            });
            let log = std::fs::File::create(dir.file(vm::QEMU_LOG))
                .map_err(|e| err(format!("{}: {e}", vm::QEMU_LOG)))?;
            let log2 = log
                .try_clone()
                .map_err(|e| err(format!("{}: {e}", vm::QEMU_LOG)))?;
            let mut child = tokio::process::Command::new(&self.settings.qemu)
                .args(&args)
                .current_dir(&dir.path)
                .env("TMPDIR", &dir.path)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                // Its own session: a terminal's ^C to flotilla, or flotilla's end, does not
                // reach it.
                .process_group(0)
                .kill_on_drop(false)
                .spawn()
                .map_err(|e| err(format!("cannot run {}: {e}", self.settings.qemu.display())))?;
            let socket = dir.file(vm::QMP_SOCKET);
            let deadline = tokio::time::Instant::now() + QMP_START_TIMEOUT;
            let started = loop {
                if let Ok(Some(status)) = child.try_wait() {
                    break Err(format!(
                        "QEMU exited ({status}): {}",
                        dir.tail(vm::QEMU_LOG, 5)
                    ));
                }
                if socket.exists()
                    && let Ok(r) =
                        qmp::execute(&socket, "query-status", Duration::from_secs(5)).await
                {
                    break if r["status"] == "running" {
                        Ok(())
                    } else {
                        Err(format!("QEMU reports the VM {}", r["status"]))
                    };
                }
                if tokio::time::Instant::now() >= deadline {
                    let _ = child.start_kill();
                    break Err(format!(
                        "QEMU did not answer on QMP within {QMP_START_TIMEOUT:?}"
                    ));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            };
            match started {
                Ok(()) => {
                    // Reap it when it ends (while this process lives; after a restart it is
                    // not our child any more and init reaps it).
                    let id = dir.id.clone();
                    tokio::spawn(async move {
                        if let Ok(status) = child.wait().await {
                            tracing::debug!(vm = %id, %status, "QEMU ended");
                        }
                    });
                    return Ok(());
                }
                Err(m) => {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                    // Another process took the port between our check and QEMU's bind: try
                    // another one.
                    if m.contains("hostfwd") || m.contains("host forwarding") {
                        last = m;
                        continue;
                    }
                    return Err(err(m));
                }
            }
        }
        Err(err(last))
    }

    /// Ends a VM's QEMU (QMP `quit`, else SIGKILL) and removes its directory.
    async fn destroy(&self, dir: &VmDir) -> Result<(), String> {
        if let Some(pid) = dir.live_pid() {
            let quit =
                qmp::execute(&dir.file(vm::QMP_SOCKET), "quit", Duration::from_secs(3)).await;
            if !wait_gone(pid, &dir.id, Duration::from_secs(5)).await {
                if let Err(e) = quit {
                    tracing::debug!(vm = %dir.id, error = %e, "QMP quit failed; killing");
                }
                // Checked again just before: the pid is still this VM's QEMU.
                if vm::is_process_of(pid, &dir.id) {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid as i32),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                if !wait_gone(pid, &dir.id, Duration::from_secs(10)).await {
                    return Err(format!("QEMU (pid {pid}) does not end"));
                }
            }
        }
        match std::fs::remove_dir_all(&dir.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(format!("removing {}: {e}", dir.path.display())),
        }
    }
}

/// Waits until process `pid` is no longer VM `id`'s QEMU; false on timeout.
async fn wait_gone(pid: u32, id: &str, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    while vm::is_process_of(pid, id) {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// A port free on 127.0.0.1 right now.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The first bytes of `path`.
fn head(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = vec![0u8; 8];
    let n = std::fs::File::open(path)?.read(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

#[async_trait]
impl InstanceGroup for QemuGroup {
    async fn init(&self, settings: &Settings) -> Result<ProviderInfo, FleetError> {
        for (key, path) in self.settings.files() {
            if !path.is_file() {
                return Err(FleetError::Config(format!(
                    "qemu plugin_config: {key} {} is not a file",
                    path.display()
                )));
            }
        }
        let disk_format = command::disk_format(&head(&self.settings.disk).map_err(|e| {
            FleetError::Config(format!(
                "qemu plugin_config: disk {}: {e}",
                self.settings.disk.display()
            ))
        })?);
        let version = tokio::process::Command::new(&self.settings.qemu)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| {
                FleetError::Config(format!(
                    "qemu plugin_config: cannot run {}: {e}",
                    self.settings.qemu.display()
                ))
            })?;
        let version = String::from_utf8_lossy(&version.stdout)
            .lines()
            .next()
            .unwrap_or_default()
            .to_string();
        std::fs::create_dir_all(&self.settings.vm_dir).map_err(|e| {
            FleetError::Config(format!(
                "qemu plugin_config: vm_dir {}: {e}",
                self.settings.vm_dir.display()
            ))
        })?;
        let comment = format!("flotilla/{}", self.provider_id());
        let key = match &self.settings.key_file {
            Some(path) => GroupKey::load_or_create(path, &comment)?,
            None => GroupKey::generate(&comment)?,
        };
        let tsc_khz = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| command::tsc_khz_from_cpuinfo(&c))
            .unwrap_or(DEFAULT_TSC_KHZ);
        let mut connector = settings.connector.clone();
        connector.username = "root".into();
        connector.key = Some(key.private_openssh.clone());
        connector.password = None;
        connector.protocol = Protocol::Ssh;
        connector.protocol_port = None;
        connector.os = "linux".into();
        connector.arch = "amd64".into();
        {
            let mut st = self.lock();
            st.connector = Some(connector);
            st.authorized_key = Some(key.public_openssh);
            st.disk_format = disk_format;
            st.tsc_khz = tsc_khz;
        }
        Ok(ProviderInfo {
            id: self.provider_id(),
            max_size: self.settings.max_size,
            version: env!("CARGO_PKG_VERSION").into(),
            build_info: format!("{version}, accel {}", self.settings.accel),
            capabilities: Capabilities {
                // VMs found in its own directory after a restart are this group's.
                adopts_preexisting: true,
                connector: ConnectorKind::Protocol,
                ..Capabilities::remote()
            },
        })
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        let vms = self.vms("update")?;
        let (ready, starting) = {
            let st = self.lock();
            (st.ready.clone(), st.starting.clone())
        };
        let startup_timeout = self.settings.startup_timeout();
        let seen = join_all(vms.iter().map(|(dir, record)| {
            let ready = &ready;
            let starting = &starting;
            async move {
                let alive = dir.live_pid().is_some();
                let ssh_ready = alive
                    && (ready.contains(&dir.id)
                        || ssh_banner("127.0.0.1", record.ssh_port, PROBE_TIMEOUT)
                            .await
                            .is_ok());
                let observed = state::Observed {
                    alive,
                    ssh_ready,
                    starting: starting.contains(&dir.id),
                    age: vm::age(record.created),
                };
                (dir.id.clone(), observed)
            }
        }))
        .await;
        let mut out = Vec::with_capacity(seen.len());
        let mut ids = HashSet::new();
        let mut st = self.lock();
        st.ready.clear();
        for (id, observed) in seen {
            if observed.ssh_ready {
                st.ready.insert(id.clone());
            }
            ids.insert(id.clone());
            out.push(InstanceStatus::new(
                id,
                state::vm_state(&observed, startup_timeout),
            ));
        }
        for gone in st.listed.difference(&ids) {
            out.push(InstanceStatus::new(gone.clone(), State::Deleted));
        }
        st.listed = ids;
        Ok(out)
    }

    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        if n == 0 {
            return Ok(0);
        }
        if self.lock().authorized_key.is_none() {
            return Err(FleetError::NotInitialized);
        }
        let existing = self
            .vms("increase")?
            .iter()
            .filter(|(d, _)| d.live_pid().is_some())
            .count()
            + self.lock().starting.len();
        let want = n.min(self.settings.max_size.saturating_sub(existing));
        let results = join_all((0..want).map(|_| self.start_one())).await;
        let mut started = 0;
        let mut first_error = None;
        for r in results {
            match r {
                Ok(id) => {
                    tracing::info!(group = %self.settings.name, vm = %id, "VM started");
                    started += 1;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) if started == 0 => Err(e),
            _ => Ok(started),
        }
    }

    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        let ours: HashSet<String> = self
            .vms("decrease")?
            .into_iter()
            .map(|(d, _)| d.id)
            .collect();
        let ours = &ours;
        let removals = ids.iter().map(|id| async move {
            let dir = VmDir::new(&self.settings.vm_dir, id);
            if !ours.contains(id) {
                // Already gone counts as deleted; anything else is not ours to end.
                return (!is_vm_id(id) || !dir.path.exists()).then(|| id.clone());
            }
            match self.destroy(&dir).await {
                Ok(()) => Some(id.clone()),
                Err(e) => {
                    tracing::warn!(group = %self.settings.name, vm = %id, error = %e, "ending a VM failed");
                    None
                }
            }
        });
        let done: Vec<InstanceId> = join_all(removals).await.into_iter().flatten().collect();
        let mut st = self.lock();
        for id in &done {
            st.ready.remove(id);
        }
        Ok(done)
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        let connector = self
            .lock()
            .connector
            .clone()
            .ok_or(FleetError::NotInitialized)?;
        if !is_vm_id(id) {
            return Err(FleetError::InstanceNotFound(id.into()));
        }
        let dir = VmDir::new(&self.settings.vm_dir, id);
        let record = dir
            .record()
            .filter(|r| r.group == self.settings.name)
            .ok_or_else(|| FleetError::InstanceNotFound(id.into()))?;
        let addr = format!("127.0.0.1:{}", record.ssh_port);
        Ok(ConnectInfo {
            config: connector,
            id: id.into(),
            external_addr: addr.clone(),
            internal_addr: addr,
            expires: None,
        })
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        if !is_vm_id(id) {
            return Err(FleetError::InstanceNotFound(id.into()));
        }
        let dir = VmDir::new(&self.settings.vm_dir, id);
        let record = dir
            .record()
            .filter(|r| r.group == self.settings.name)
            .ok_or_else(|| FleetError::InstanceNotFound(id.into()))?;
        let unhealthy = |reason: String| FleetError::InstanceUnhealthy {
            id: id.into(),
            reason,
        };
        if dir.live_pid().is_none() {
            return Err(unhealthy("its QEMU is not running".into()));
        }
        ssh_banner("127.0.0.1", record.ssh_port, PROBE_TIMEOUT)
            .await
            .map_err(|e| unhealthy(format!("sshd does not answer: {e}")))
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        // VMs outlive the provider; nothing else to release.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runner_names_the_group_its_directory_and_key() {
        let given = serde_json::json!({"disk": "/d", "kernel": "/k"});
        let config = ProviderConfig {
            plugin_config: &given,
            runner_name: "vm fleet",
            state_dir: Some(Path::new("/state")),
        };
        let s = plugin_settings(&config).unwrap();
        assert_eq!(s["name"], "vm fleet");
        assert_eq!(s["vm_dir"], "/state/qemu/vm_fleet");
        assert_eq!(s["key_file"], "/state/keys/vm_fleet.qemu.key");
        let e = plugin_settings(&ProviderConfig {
            state_dir: None,
            ..config
        })
        .unwrap_err();
        assert!(e.to_string().contains("vm_dir is required"), "{e}");
        let given = serde_json::json!({"disk": "/d", "kernel": "/k", "vm_dir": "/v", "name": "n"});
        let s = plugin_settings(&ProviderConfig {
            plugin_config: &given,
            state_dir: None,
            ..config
        })
        .unwrap();
        assert_eq!(
            (s["name"].as_str(), s["vm_dir"].as_str()),
            (Some("n"), Some("/v"))
        );
    }

    #[tokio::test]
    async fn init_refuses_missing_files_and_unusable_before_init() {
        let dir = tempfile::tempdir().unwrap();
        let s = QemuSettings::from_plugin_config(&serde_json::json!({
            "name": "g", "disk": dir.path().join("absent.img"), "kernel": "/k",
            "vm_dir": dir.path().join("vms")
        }))
        .unwrap();
        let g = QemuGroup::new(s);
        assert!(matches!(
            g.increase(1).await,
            Err(FleetError::NotInitialized)
        ));
        assert!(matches!(
            g.connect_info("vm-00000001").await,
            Err(FleetError::NotInitialized)
        ));
        let e = g.init(&Settings::default()).await.unwrap_err();
        assert!(e.to_string().contains("disk"), "{e}");
        assert!(e.to_string().contains("is not a file"), "{e}");
    }
}
