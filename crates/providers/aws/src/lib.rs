//! The `aws` provider: an EC2 Auto Scaling group as an instance group, with the semantics of
//! GitLab's fleeting-plugin-aws, so that a runner configured for that plugin scales the same
//! group under flotilla.
//!
//! - `init` loads region and credentials from the standard AWS chain (with `profile`,
//!   `config_file` and `credentials_file`), finds the group and warns, with the fix, about
//!   every setting GitLab's documentation advises against ([`checks`]).
//! - `update` pages `DescribeAutoScalingInstances` and maps each lifecycle state
//!   ([`state::instance_state`]); an instance that left the listing is reported `deleted`
//!   once. No call is made per instance.
//! - `increase(n)` sets the desired capacity to `current + n` (`HonorCooldown=false`), clamped
//!   to the group's maximum ([`capacity::raise`]), and reports how many that requested.
//! - `decrease(ids)` terminates each instance with `TerminateInstanceInAutoScalingGroup`
//!   (`ShouldDecrementDesiredCapacity=true`) and reports those that succeeded; ids of another
//!   group's instances are refused without a call.
//! - `connect_info` reads the instance with `DescribeInstances` (OS, architecture, private and
//!   public address) and, unless `use_static_credentials` is set, pushes a fresh ed25519 key
//!   with EC2 Instance Connect's `SendSSHPublicKey`. The key is accepted for 60 seconds, so
//!   the `ConnectInfo` says it expires then, and the SSH connector asks for fresh credentials
//!   before it connects with expired ones. For a Windows instance (WinRM) it gets the
//!   Administrator password with `GetPasswordData` and decrypts it with the key pair's private
//!   key (`connector_config.key_path`), as the plugin does ([`password`]).
//! - `heartbeat` answers from the last listing (health and lifecycle), with no call.
//! - Throttling and transient failures are retried with backoff ([`retry`]); a call that
//!   still fails is reported, so the scaler decides again next tick: no decision is lost.
//!
//! After a restart the group itself is the listing of record: every instance in it is listed
//! and, as GitLab's documentation has a group dedicated to one runner, adopted
//! (`adopts_preexisting`).

mod api;
pub mod capacity;
pub mod checks;
mod error;
pub mod password;
pub mod retry;
mod settings;
pub mod state;

pub use api::{Api, GroupInstance, PAGE_SIZE, fixed_config, load_config};
pub use error::ApiError;
pub use settings::AwsSettings;

use async_trait::async_trait;
use aws_config::SdkConfig;
use checks::{Advice, GroupFacts};
use flotilla_fleet::{
    Capabilities, ConnectInfo, ConnectorConfig, FleetError, InstanceGroup, InstanceId,
    InstanceStatus, ProviderConfig, ProviderInfo, Secret, Settings, State,
};
use flotilla_ssh_machine::GroupKey;
use retry::RetryPolicy;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The provider's name in configuration (`plugin = "aws"`).
pub const PLUGIN: &str = "aws";

/// How long a key pushed with `SendSSHPublicKey` is accepted (EC2 Instance Connect API
/// Reference, SendSSHPublicKey: "The public key is available for 60 seconds").
pub const INSTANCE_CONNECT_KEY_LIFETIME: Duration = Duration::from_secs(60);

/// The login user of Linux AMIs when `connector_config.username` is not set
/// (fleeting-plugin-aws's default; Amazon Linux's user).
pub const DEFAULT_LINUX_USER: &str = "ec2-user";
/// The login user of Windows AMIs when `connector_config.username` is not set.
pub const DEFAULT_WINDOWS_USER: &str = "Administrator";

/// An Auto Scaling group. Create it with [`AwsGroup::new`] (the standard AWS chain at `init`)
/// or [`AwsGroup::with_config`], then call [`InstanceGroup::init`].
#[derive(Debug)]
pub struct AwsGroup {
    settings: AwsSettings,
    /// The SDK configuration to use instead of loading the standard chain at `init`.
    config: Option<SdkConfig>,
    policy: RetryPolicy,
    api: Mutex<Option<Arc<Api>>>,
    state: Mutex<GroupState>,
    /// Serialises `increase` and `decrease`: `SetDesiredCapacity` sets an absolute number,
    /// computed from the group as read just before.
    scaling: tokio::sync::Mutex<()>,
}

/// What the provider learns while running.
#[derive(Debug, Default)]
struct GroupState {
    /// The connector config `connect_info` starts from (set by `init`).
    connector: Option<ConnectorConfig>,
    /// Without static credentials, the configured key (`key_path`): the private key of the
    /// key pair instances were launched with, which decrypts Windows passwords.
    key_pair: Option<Secret<Vec<u8>>>,
    /// What `init` advised.
    advice: Vec<Advice>,
    /// The last listing: lifecycle state and health of each instance.
    listed: HashMap<String, GroupInstance>,
    /// Whether a listing was made yet.
    listed_once: bool,
}

/// The aws group for a runner, from its `plugin_config` (see [`AwsSettings`]); the group is
/// the one `name` names (required: an Auto Scaling group is made outside flotilla).
pub fn build(config: &ProviderConfig<'_>) -> Result<Arc<dyn InstanceGroup>, FleetError> {
    let value = match config.plugin_config {
        serde_json::Value::Null => serde_json::json!({}),
        other => other.clone(),
    };
    if value.get("name").is_none() {
        return Err(FleetError::Config(
            "aws plugin_config: name (the Auto Scaling group's name) is required".into(),
        ));
    }
    Ok(Arc::new(AwsGroup::new(AwsSettings::from_plugin_config(
        &value,
    )?)))
}

impl AwsGroup {
    /// A group whose region and credentials come from the standard AWS chain at `init`.
    pub fn new(settings: AwsSettings) -> Self {
        AwsGroup {
            settings,
            config: None,
            policy: RetryPolicy::default(),
            api: Mutex::new(None),
            state: Mutex::new(GroupState::default()),
            scaling: tokio::sync::Mutex::new(()),
        }
    }

    /// A group using `config` as it is (fixed credentials and endpoint, for tests).
    pub fn with_config(settings: AwsSettings, config: SdkConfig) -> Self {
        AwsGroup {
            config: Some(config),
            ..AwsGroup::new(settings)
        }
    }

    /// Uses `policy` for throttled and failed calls instead of the default.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The Administrator password of the Windows instance `id` for WinRM, as
    /// fleeting-plugin-aws gets it: `GetPasswordData`, decrypted with the private key of the
    /// key pair the instance was launched with (`connector_config.key_path`).
    async fn windows_password(
        &self,
        api: &Api,
        id: &str,
        key_pair: Option<&Secret<Vec<u8>>>,
    ) -> Result<String, FleetError> {
        let Some(key) = key_pair else {
            return Err(FleetError::Config(format!(
                "instance {id} runs Windows, whose password is decrypted with the key pair it \
                 was launched with: set connector_config.key_path to that key pair's private \
                 key, or set use_static_credentials and a password"
            )));
        };
        let data = api
            .get_password_data(id)
            .await
            .map_err(|e| e.into_fleet("connect_info"))?;
        password::decrypt(&data, key.expose()).map_err(|e| match e {
            // Not a failure of the instance: it is still starting, so the caller asks again.
            password::PasswordError::NotYet => FleetError::InstanceUnhealthy {
                id: id.into(),
                reason: e.to_string(),
            },
            other => FleetError::provider("connect_info", format!("instance {id}: {other}")),
        })
    }

    /// The group's settings.
    pub fn settings(&self) -> &AwsSettings {
        &self.settings
    }

    /// How many AWS API calls (attempts) the provider made so far; 0 before `init`.
    pub fn api_calls(&self) -> u64 {
        self.api_now().map_or(0, |a| a.calls())
    }

    /// What `init` found in the group's settings that works against flotilla.
    pub fn advice(&self) -> Vec<Advice> {
        self.lock().advice.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GroupState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn api_now(&self) -> Option<Arc<Api>> {
        self.api.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn api(&self) -> Result<Arc<Api>, FleetError> {
        self.api_now().ok_or(FleetError::NotInitialized)
    }

    fn name(&self) -> &str {
        &self.settings.name
    }

    /// The group as AWS describes it; an error naming the region when it does not exist.
    async fn group(
        &self,
        api: &Api,
        op: &'static str,
    ) -> Result<aws_sdk_autoscaling::types::AutoScalingGroup, FleetError> {
        api.describe_auto_scaling_group(self.name())
            .await
            .map_err(|e| e.into_fleet(op))?
            .ok_or_else(|| {
                FleetError::Config(format!(
                    "aws: Auto Scaling group {:?} not found in region {}",
                    self.name(),
                    api.region()
                ))
            })
    }
}

/// EC2's architecture as GOARCH names it, and whether it is a Mac instance.
fn goarch(arch: Option<&aws_sdk_ec2::types::ArchitectureValues>) -> (Option<&'static str>, bool) {
    match arch.map(|a| a.as_str()) {
        Some("x86_64") => (Some("amd64"), false),
        Some("arm64") => (Some("arm64"), false),
        Some("i386") => (Some("386"), false),
        Some("x86_64_mac") => (Some("amd64"), true),
        Some("arm64_mac") => (Some("arm64"), true),
        _ => (None, false),
    }
}

#[async_trait]
impl InstanceGroup for AwsGroup {
    async fn init(&self, settings: &Settings) -> Result<ProviderInfo, FleetError> {
        let config = match &self.config {
            Some(c) => c.clone(),
            None => load_config(&self.settings).await,
        };
        let api = Arc::new(Api::new(&config, self.policy)?);
        let group = self.group(&api, "init").await?;
        let policies = api
            .describe_policies(self.name())
            .await
            .map_err(|e| e.into_fleet("init"))?;
        let facts = GroupFacts {
            name: self.name().to_string(),
            min_size: group.min_size().unwrap_or(0),
            max_size: group.max_size().unwrap_or(0),
            new_instances_protected: group.new_instances_protected_from_scale_in() == Some(true),
            suspended_processes: group
                .suspended_processes()
                .iter()
                .filter_map(|p| p.process_name().map(str::to_owned))
                .collect(),
            availability_zones: group.availability_zones().len(),
            scaling_policies: policies,
        };
        let advice = checks::advise(&facts);
        for a in &advice {
            tracing::warn!(group = %self.name(), fix = %a.fix, "{}", a.problem);
        }
        let mut connector = settings.connector.clone();
        if connector.use_static_credentials
            && connector.key.is_none()
            && connector.password.is_none()
        {
            return Err(FleetError::Config(
                "aws: use_static_credentials is set but connector_config has neither a key nor a password"
                    .into(),
            ));
        }
        let mut key_pair = None;
        if !connector.use_static_credentials {
            // Minted per connection in connect_info (a key for SSH, the password decrypted
            // with the key pair's key for Windows).
            key_pair = connector.key.take();
            connector.password = None;
        }
        let id = format!("aws/{}/{}", api.region(), self.name());
        {
            let mut st = self.lock();
            st.connector = Some(connector);
            st.key_pair = key_pair;
            st.advice = advice;
        }
        *self.api.lock().unwrap_or_else(|e| e.into_inner()) = Some(api);
        Ok(ProviderInfo {
            id,
            max_size: usize::try_from(facts.max_size).unwrap_or(0),
            version: env!("CARGO_PKG_VERSION").into(),
            build_info: "EC2 Auto Scaling (aws-sdk-autoscaling), EC2 Instance Connect".into(),
            capabilities: Capabilities {
                adopts_preexisting: true,
                ..Capabilities::remote()
            },
        })
    }

    async fn update(&self) -> Result<Vec<InstanceStatus>, FleetError> {
        let api = self.api()?;
        let rows = api
            .describe_group_instances(self.name())
            .await
            .map_err(|e| e.into_fleet("update"))?;
        let mut out = Vec::with_capacity(rows.len());
        let mut now: HashMap<String, GroupInstance> = HashMap::with_capacity(rows.len());
        for row in rows {
            let Some(st) = state::instance_state(&row.lifecycle) else {
                continue;
            };
            out.push(InstanceStatus::new(row.id.clone(), st));
            now.insert(row.id.clone(), row);
        }
        let mut st = self.lock();
        for gone in st.listed.keys() {
            if !now.contains_key(gone) {
                out.push(InstanceStatus::new(gone.clone(), State::Deleted));
            }
        }
        st.listed = now;
        st.listed_once = true;
        Ok(out)
    }

    async fn increase(&self, n: usize) -> Result<usize, FleetError> {
        let api = self.api()?;
        if n == 0 {
            return Ok(0);
        }
        let _scaling = self.scaling.lock().await;
        let group = self.group(&api, "increase").await?;
        let current = group.desired_capacity().unwrap_or(0);
        let max = group.max_size().unwrap_or(0);
        let Some(raise) = capacity::raise(current, max, n) else {
            tracing::debug!(group = %self.name(), current, max, "the group is at its maximum size");
            return Ok(0);
        };
        api.set_desired_capacity(self.name(), raise.desired)
            .await
            .map_err(|e| e.into_fleet("increase"))?;
        tracing::debug!(group = %self.name(), from = current, to = raise.desired, "desired capacity raised");
        Ok(raise.requested)
    }

    async fn decrease(&self, ids: &[InstanceId]) -> Result<Vec<InstanceId>, FleetError> {
        let api = self.api()?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let _scaling = self.scaling.lock().await;
        // TerminateInstanceInAutoScalingGroup takes any group's instance: look first, so
        // that only this group's are terminated.
        let known: HashMap<String, GroupInstance> = api
            .describe_instances_groups(ids)
            .await
            .map_err(|e| e.into_fleet("decrease"))?
            .into_iter()
            .map(|i| (i.id.clone(), i))
            .collect();
        let mut done = Vec::with_capacity(ids.len());
        let mut seen = HashSet::new();
        for id in ids {
            if !seen.insert(id) {
                continue;
            }
            match known.get(id) {
                // In no group any more: already gone.
                None => done.push(id.clone()),
                Some(i) if i.group != self.name() => {
                    tracing::warn!(group = %self.name(), instance = %id, other = %i.group, "not terminating an instance of another Auto Scaling group");
                }
                // Already on its way out: terminating again would lower the desired
                // capacity a second time.
                Some(i) if i.lifecycle.starts_with("Terminat") => done.push(id.clone()),
                Some(_) => match api.terminate_instance(id).await {
                    Ok(()) => done.push(id.clone()),
                    Err(e) if e.is_not_found() => done.push(id.clone()),
                    Err(e) => {
                        tracing::warn!(group = %self.name(), instance = %id, error = %e, "terminating an instance failed");
                    }
                },
            }
        }
        Ok(done)
    }

    async fn connect_info(&self, id: &str) -> Result<ConnectInfo, FleetError> {
        let api = self.api()?;
        let (mut config, key_pair) = {
            let st = self.lock();
            let config = st.connector.clone().ok_or(FleetError::NotInitialized)?;
            (config, st.key_pair.clone())
        };
        let instance = api
            .describe_instance(id)
            .await
            .map_err(|e| e.into_fleet("connect_info"))?
            .ok_or_else(|| FleetError::InstanceNotFound(id.into()))?;
        let ec2_state = instance
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_string())
            .unwrap_or_default();
        if matches!(
            ec2_state.as_str(),
            "shutting-down" | "terminated" | "stopping" | "stopped"
        ) {
            return Err(FleetError::InstanceUnhealthy {
                id: id.into(),
                reason: format!("the EC2 instance is {ec2_state}"),
            });
        }
        let windows = instance
            .platform()
            .is_some_and(|p| p.as_str().eq_ignore_ascii_case("windows"));
        let (arch, mac) = goarch(instance.architecture());
        config.os = if windows {
            "windows".into()
        } else if mac {
            "darwin".into()
        } else {
            "linux".into()
        };
        if let Some(arch) = arch {
            config.arch = arch.into();
        }
        if config.username.is_empty() {
            config.username = if windows {
                DEFAULT_WINDOWS_USER
            } else {
                DEFAULT_LINUX_USER
            }
            .into();
        }
        let mut expires = None;
        if !config.use_static_credentials {
            if windows {
                config.password = Some(
                    self.windows_password(&api, id, key_pair.as_ref())
                        .await?
                        .into(),
                );
            } else {
                let key = GroupKey::generate(&format!("flotilla/aws/{}", self.name()))?;
                let pushed_at = SystemTime::now();
                let az = instance.placement().and_then(|p| p.availability_zone());
                let ok = api
                    .send_ssh_public_key(id, &config.username, &key.public_openssh, az)
                    .await
                    .map_err(|e| e.into_fleet("connect_info"))?;
                if !ok {
                    return Err(FleetError::provider(
                        "connect_info",
                        "SendSSHPublicKey answered without success",
                    ));
                }
                config.key = Some(key.private_openssh);
                config.password = None;
                expires = Some(pushed_at + INSTANCE_CONNECT_KEY_LIFETIME);
            }
        }
        let (internal, external) = match &self.settings.test_address_override {
            Some(addr) => (addr.clone(), addr.clone()),
            None => (
                instance
                    .private_ip_address()
                    .unwrap_or_default()
                    .to_string(),
                instance.public_ip_address().unwrap_or_default().to_string(),
            ),
        };
        if internal.is_empty() && external.is_empty() {
            return Err(FleetError::InstanceUnhealthy {
                id: id.into(),
                reason: "the instance has no IP address yet".into(),
            });
        }
        if config.use_external_addr && external.is_empty() {
            return Err(FleetError::InstanceUnhealthy {
                id: id.into(),
                reason: "use_external_addr is set but the instance has no public IP address".into(),
            });
        }
        Ok(ConnectInfo {
            config,
            id: id.into(),
            external_addr: external,
            internal_addr: internal,
            expires,
        })
    }

    async fn heartbeat(&self, id: &str) -> Result<(), FleetError> {
        let st = self.lock();
        if !st.listed_once {
            return Ok(());
        }
        let Some(i) = st.listed.get(id) else {
            return Err(FleetError::InstanceNotFound(id.into()));
        };
        if i.health.eq_ignore_ascii_case("unhealthy") {
            return Err(FleetError::InstanceUnhealthy {
                id: id.into(),
                reason: "Auto Scaling marked the instance Unhealthy".into(),
            });
        }
        match state::instance_state(&i.lifecycle) {
            Some(State::Running | State::Creating) => Ok(()),
            _ => Err(FleetError::InstanceUnhealthy {
                id: id.into(),
                reason: format!("lifecycle state {}", i.lifecycle),
            }),
        }
    }

    async fn shutdown(&self) -> Result<(), FleetError> {
        // Instances outlive the provider; the SDK's clients need no closing.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_name_is_required() {
        let none = serde_json::Value::Null;
        let config = ProviderConfig {
            plugin_config: &none,
            runner_name: "r",
            state_dir: None,
        };
        let e = build(&config).err().unwrap().to_string();
        assert!(
            e.contains("name (the Auto Scaling group's name) is required"),
            "{e}"
        );
    }

    #[test]
    fn architectures_are_gitlabs_names() {
        use aws_sdk_ec2::types::ArchitectureValues as A;
        assert_eq!(goarch(Some(&A::X8664)), (Some("amd64"), false));
        assert_eq!(goarch(Some(&A::Arm64)), (Some("arm64"), false));
        assert_eq!(goarch(Some(&A::I386)), (Some("386"), false));
        assert_eq!(goarch(Some(&A::Arm64Mac)), (Some("arm64"), true));
        assert_eq!(goarch(None), (None, false));
    }

    #[tokio::test]
    async fn unusable_before_init() {
        let g = AwsGroup::new(AwsSettings::new("g"));
        assert!(matches!(g.update().await, Err(FleetError::NotInitialized)));
        assert!(matches!(
            g.increase(1).await,
            Err(FleetError::NotInitialized)
        ));
        assert!(matches!(
            g.connect_info("i-1").await,
            Err(FleetError::NotInitialized)
        ));
        assert_eq!(g.api_calls(), 0);
    }
}
