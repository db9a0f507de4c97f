//! `[runners.autoscaler]`: the fleet and its scaling, with GitLab's keys and defaults
//! (taskscaler's `AutoscalerConfig`) plus flotilla's clearly marked extensions.
//!
//! Every key in this table and its sub-tables must be known: a typo here silently changes how
//! many machines are paid for, so it is an error, not a warning.

use super::connector::ConnectorSettings;
use super::count;
use super::duration;
use super::redact;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How strongly one job is separated from the others on the same instance (flotilla
/// extension). Weakest to strongest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IsolationLevel {
    /// None: a per-slot build directory on the instance.
    Shell,
    /// Shell plus a per-slot cgroup (cpu, memory, pids).
    Cgroup,
    /// The job image and its services as containers on the instance's Docker daemon.
    Docker,
    /// A microVM per job on the instance.
    Microvm,
    /// A full VM per slot (GitLab's nesting / `vm_isolation`).
    Vm,
    /// The whole instance for one job, deleted afterwards (`max_use_count = 1`).
    Instance,
}

impl IsolationLevel {
    /// The name used in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationLevel::Shell => "shell",
            IsolationLevel::Cgroup => "cgroup",
            IsolationLevel::Docker => "docker",
            IsolationLevel::Microvm => "microvm",
            IsolationLevel::Vm => "vm",
            IsolationLevel::Instance => "instance",
        }
    }
}

impl fmt::Display for IsolationLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The isolation levels a fleet offers (flotilla extension): `isolation = "docker"`, or
/// `isolation = ["docker", "cgroup", "microvm"]`, where the first is the default and a job
/// picks another with `FLOTILLA_ISOLATION`. Never empty; no level twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolationLevels(Vec<IsolationLevel>);

impl IsolationLevels {
    /// The levels, the default first; `None` when `levels` is empty or names a level twice.
    pub fn new(levels: Vec<IsolationLevel>) -> Option<IsolationLevels> {
        let unique = levels
            .iter()
            .enumerate()
            .all(|(i, l)| !levels[..i].contains(l));
        (!levels.is_empty() && unique).then_some(IsolationLevels(levels))
    }

    /// The level of jobs that name none.
    pub fn default_level(&self) -> IsolationLevel {
        self.0[0]
    }

    /// Every level, the default first.
    pub fn all(&self) -> &[IsolationLevel] {
        &self.0
    }

    /// Whether `level` is offered.
    pub fn offers(&self, level: IsolationLevel) -> bool {
        self.0.contains(&level)
    }
}

impl From<IsolationLevel> for IsolationLevels {
    fn from(level: IsolationLevel) -> IsolationLevels {
        IsolationLevels(vec![level])
    }
}

impl fmt::Display for IsolationLevels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|l| l.as_str()).collect();
        f.write_str(&names.join(", "))
    }
}

impl Serialize for IsolationLevels {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => one.serialize(s),
            many => many.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for IsolationLevels {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum OneOrMany {
            One(IsolationLevel),
            Many(Vec<IsolationLevel>),
        }
        let levels = match OneOrMany::deserialize(d).map_err(|_| {
            serde::de::Error::custom(
                "isolation must be a level or a list of levels: shell, cgroup, docker, \
                 microvm, vm, instance",
            )
        })? {
            OneOrMany::One(l) => vec![l],
            OneOrMany::Many(v) => v,
        };
        IsolationLevels::new(levels).ok_or_else(|| {
            serde::de::Error::custom("isolation must name at least one level, each once")
        })
    }
}

/// `[runners.autoscaler]`. `Debug` prints the redacted form (see `plugin_config`).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AutoscalerConfig {
    /// The fleeting plugin / provider: `aws`, `aws:1`, `registry/repo/name:1.2`, or one of
    /// flotilla's built-in providers (`local`, `docker`, ...). Required.
    pub plugin: String,
    /// flotilla extension: the isolation levels jobs on this fleet may run at, the default
    /// first (a job picks another with `FLOTILLA_ISOLATION`). When unset, loading fills in
    /// the executor's default (`docker` for `docker-autoscaler`, `shell` for `instance`, `vm`
    /// for `instance` with `vm_isolation` enabled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<IsolationLevels>,
    /// flotilla extension: the level of jobs that name an `image:` and no level, one of
    /// `isolation` (the embedded default of `flotilla exec` sends them to `docker`). Unset,
    /// such jobs run at the default level like any other.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_isolation: Option<IsolationLevel>,
    /// Jobs per instance (default 1, must be at least 1).
    #[serde(deserialize_with = "count::deserialize")]
    pub capacity_per_instance: u32,
    /// Jobs an instance runs before it is deleted; 0 is unlimited.
    #[serde(deserialize_with = "count::deserialize")]
    pub max_use_count: u32,
    /// Most instances at once, counting pending, running and deleting ones; 0 is unlimited.
    #[serde(deserialize_with = "count::deserialize")]
    pub max_instances: u32,
    /// Run on each new instance; failure deletes the instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_ready_command: Option<String>,
    /// flotilla extension: how long `instance_ready_command` (or the reachability check) may
    /// take before the instance is given up and removed (default 30m; GitLab Runner waits
    /// for ever, so a hung command holds the instance for good).
    #[serde(with = "duration::go")]
    pub instance_ready_timeout: Duration,
    /// How long a job waits for a slot (default 15m).
    #[serde(with = "duration::go")]
    pub instance_acquire_timeout: Duration,
    /// How often the provider is listed when nothing is expected to change (default 1m).
    #[serde(with = "duration::go")]
    pub update_interval: Duration,
    /// How often the provider is listed while a change is expected (default 2s).
    #[serde(with = "duration::go")]
    pub update_interval_when_expecting: Duration,
    /// Wait between retries of a failed deletion (default 1m).
    #[serde(with = "duration::go")]
    pub deletion_retry_interval: Duration,
    /// Wait between checks that instances are gone at shutdown (default 10s).
    #[serde(with = "duration::go")]
    pub shutdown_deletion_interval: Duration,
    /// Checks that instances are gone at shutdown (default 3).
    #[serde(deserialize_with = "count::deserialize")]
    pub shutdown_deletion_retries: u32,
    /// Consecutive health failures before an instance is replaced (default 3).
    #[serde(deserialize_with = "count::deserialize")]
    pub failure_threshold: u32,
    /// Throttle job requests by reservations; unset means on. Use
    /// [`AutoscalerConfig::reservation_throttling_enabled`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_throttling: Option<bool>,
    /// Delete every instance when flotilla shuts down (default false).
    pub delete_instances_on_shutdown: bool,
    /// Log instances' internal addresses (default false).
    pub log_internal_ip: bool,
    /// Log instances' external addresses (default false).
    pub log_external_ip: bool,
    /// Histogram buckets (seconds) used for the four `instance_*_time_buckets` keys that are
    /// not set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_operation_time_buckets: Option<Vec<f64>>,
    /// Histogram buckets (seconds) for instance creation time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_creation_time_buckets: Option<Vec<f64>>,
    /// Histogram buckets (seconds) for the time until an instance runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_is_running_time_buckets: Option<Vec<f64>>,
    /// Histogram buckets (seconds) for instance deletion time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_deletion_time_buckets: Option<Vec<f64>>,
    /// Histogram buckets (seconds) for instance readiness time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_readiness_time_buckets: Option<Vec<f64>>,
    /// Histogram buckets (seconds) for instance lifetimes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_life_duration_buckets: Option<Vec<f64>>,
    /// `[runners.autoscaler.plugin_config]`: handed to the provider as JSON, unchanged. Values
    /// of credential-like keys are printed as `[REDACTED]`.
    #[serde(
        default = "empty_object",
        serialize_with = "redact::opaque_table",
        skip_serializing_if = "is_empty_object"
    )]
    pub plugin_config: serde_json::Value,
    /// `[runners.autoscaler.connector_config]`.
    #[serde(skip_serializing_if = "ConnectorSettings::is_unset")]
    pub connector_config: ConnectorSettings,
    /// `[runners.autoscaler.scale_throttle]`.
    pub scale_throttle: ScaleThrottle,
    /// `[runners.autoscaler.state_storage]`.
    pub state_storage: StateStorage,
    /// `[runners.autoscaler.vm_isolation]`.
    #[serde(skip_serializing_if = "VmIsolation::is_unset")]
    pub vm_isolation: VmIsolation,
    /// `[[runners.autoscaler.policy]]`: the last one whose period matches wins.
    pub policy: Vec<Policy>,
}

pub(crate) fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

pub(crate) fn is_empty_object(v: &serde_json::Value) -> bool {
    v.as_object().is_some_and(serde_json::Map::is_empty)
}

impl fmt::Debug for AutoscalerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        flotilla_fleet::debug_redacted("AutoscalerConfig", self, f)
    }
}

impl Default for AutoscalerConfig {
    fn default() -> Self {
        AutoscalerConfig {
            plugin: String::new(),
            isolation: None,
            image_isolation: None,
            capacity_per_instance: 1,
            max_use_count: 0,
            max_instances: 0,
            instance_ready_command: None,
            instance_ready_timeout: Duration::from_secs(30 * 60),
            instance_acquire_timeout: Duration::from_secs(15 * 60),
            update_interval: Duration::from_secs(60),
            update_interval_when_expecting: Duration::from_secs(2),
            deletion_retry_interval: Duration::from_secs(60),
            shutdown_deletion_interval: Duration::from_secs(10),
            shutdown_deletion_retries: 3,
            failure_threshold: 3,
            reservation_throttling: None,
            delete_instances_on_shutdown: false,
            log_internal_ip: false,
            log_external_ip: false,
            instance_operation_time_buckets: None,
            instance_creation_time_buckets: None,
            instance_is_running_time_buckets: None,
            instance_deletion_time_buckets: None,
            instance_readiness_time_buckets: None,
            instance_life_duration_buckets: None,
            plugin_config: empty_object(),
            connector_config: ConnectorSettings::default(),
            scale_throttle: ScaleThrottle::default(),
            state_storage: StateStorage::default(),
            vm_isolation: VmIsolation::default(),
            policy: Vec::new(),
        }
    }
}

impl AutoscalerConfig {
    /// Whether job requests are throttled by reservations (`reservation_throttling`, on unless
    /// set to `false`).
    pub fn reservation_throttling_enabled(&self) -> bool {
        self.reservation_throttling.unwrap_or(true)
    }

    /// The total slots of a full fleet (`max_instances * capacity_per_instance`), or `None`
    /// when `max_instances` is 0 (unlimited).
    pub fn max_slots(&self) -> Option<u64> {
        (self.max_instances > 0)
            .then(|| u64::from(self.max_instances) * u64::from(self.capacity_per_instance))
    }
}

/// `[runners.autoscaler.scale_throttle]`: a token bucket on instance creation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ScaleThrottle {
    /// New instances per second: 0 means the default of 100, -1 means unlimited.
    pub limit: i64,
    /// Bucket size: 0 means `max_instances`, or `limit` when `max_instances` is 0. Ignored
    /// when the limit is unlimited.
    #[serde(deserialize_with = "count::deserialize")]
    pub burst: u32,
}

/// The default `scale_throttle.limit`, in instances per second.
pub const DEFAULT_SCALE_THROTTLE_LIMIT: u32 = 100;

impl ScaleThrottle {
    /// The rate in instances per second, `None` for unlimited (`limit = -1`).
    pub fn rate_per_second(&self) -> Option<u32> {
        match self.limit {
            0 => Some(DEFAULT_SCALE_THROTTLE_LIMIT),
            l if l < 0 => None,
            l => Some(u32::try_from(l).unwrap_or(u32::MAX)),
        }
    }

    /// The bucket size in effect for a fleet of `max_instances`, `None` for unlimited.
    pub fn burst_size(&self, max_instances: u32) -> Option<u32> {
        let rate = self.rate_per_second()?;
        Some(match (self.burst, max_instances) {
            (0, 0) => rate,
            (0, m) => m,
            (b, _) => b,
        })
    }
}

/// `[runners.autoscaler.state_storage]` (GitLab beta). Accepted for compatibility; flotilla
/// always keeps its ledgers in its own store (`[flotilla] state_dir`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StateStorage {
    /// Persist instance state across restarts (default false).
    pub enabled: bool,
    /// Where; loading fills in `<config dir>/.taskscaler` when unset and makes a relative path
    /// absolute against the configuration file's directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
    /// Keep instances that still have acquisitions across a restart (default false).
    pub keep_instance_with_acquisitions: bool,
}

/// The default period of a policy: always.
pub const ALWAYS: &str = "* * * * *";

/// `[[runners.autoscaler.policy]]`: idle capacity targets for a set of time ranges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Policy {
    /// 5-field cron expressions (minute hour day-of-month month day-of-week) denoting time
    /// *ranges*: `* 8-15 * * mon-fri` is active 08:00-15:59 on weekdays. Default: always.
    pub periods: Vec<String>,
    /// IANA time zone of the periods (`Europe/Berlin`, `UTC`, `Local`); unset is the system's
    /// local time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Idle job slots (not instances) to keep ready.
    #[serde(deserialize_with = "count::deserialize")]
    pub idle_count: u32,
    /// How long an instance may idle before it is removed (at least 1s). Unset is GitLab's
    /// zero, which is raised to the 1s minimum.
    #[serde(with = "duration::go")]
    pub idle_time: Duration,
    /// Extra idle capacity as a factor of the slots in use (default 0.0).
    pub scale_factor: f64,
    /// Cap on the idle capacity `scale_factor` asks for; 0 is no cap.
    #[serde(deserialize_with = "count::deserialize")]
    pub scale_factor_limit: u32,
    /// Request jobs only when an idle slot exists. Unset means `idle_count > 0`; use
    /// [`Policy::preemptive_mode_enabled`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptive_mode: Option<bool>,
}

/// The smallest `idle_time` GitLab's schema allows.
pub const MIN_IDLE_TIME: Duration = Duration::from_secs(1);

impl Default for Policy {
    fn default() -> Self {
        Policy {
            periods: vec![ALWAYS.to_string()],
            timezone: None,
            idle_count: 0,
            idle_time: MIN_IDLE_TIME,
            scale_factor: 0.0,
            scale_factor_limit: 0,
            preemptive_mode: None,
        }
    }
}

impl Policy {
    /// Whether preemptive mode is on: the configured value, or `idle_count > 0`.
    pub fn preemptive_mode_enabled(&self) -> bool {
        self.preemptive_mode.unwrap_or(self.idle_count > 0)
    }

    /// The time zone: `None` for the system's local time (unset or `Local`), else the
    /// parsed zone. Loading has already rejected unknown zones, so this returns `None` for
    /// them too.
    pub fn tz(&self) -> Option<chrono_tz::Tz> {
        match self.timezone.as_deref() {
            None | Some("" | "Local") => None,
            Some(name) => name.parse().ok(),
        }
    }

    /// The periods parsed as 5-field cron patterns (already validated while loading).
    pub fn cron_periods(&self) -> Vec<croner::Cron> {
        self.periods
            .iter()
            .filter_map(|p| super::cron::parse_period(p).ok())
            .collect()
    }
}

/// `[runners.autoscaler.vm_isolation]`: a VM per slot on each instance, managed by a
/// nesting-compatible daemon on the instance. `Debug` prints the redacted form.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct VmIsolation {
    /// Turn VM isolation on (default false).
    pub enabled: bool,
    /// The nesting daemon's address on the instance, e.g. `unix:///path/nesting.sock`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub nesting_host: String,
    /// Handed to the nesting daemon's `Init` as JSON, unchanged.
    #[serde(
        default = "empty_object",
        serialize_with = "redact::opaque_table",
        skip_serializing_if = "is_empty_object"
    )]
    pub nesting_config: serde_json::Value,
    /// The VM image; unset for the instance executor means the job's `image:`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// How to connect to the nested VM (through the instance's connection).
    #[serde(skip_serializing_if = "ConnectorSettings::is_unset")]
    pub connector_config: ConnectorSettings,
}

impl fmt::Debug for VmIsolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        flotilla_fleet::debug_redacted("VmIsolation", self, f)
    }
}

impl VmIsolation {
    /// Whether nothing is configured (the table is left out of printed configurations).
    pub fn is_unset(&self) -> bool {
        *self == VmIsolation::default()
    }
}

impl Default for VmIsolation {
    fn default() -> Self {
        VmIsolation {
            enabled: false,
            nesting_host: String::new(),
            nesting_config: empty_object(),
            image: String::new(),
            connector_config: ConnectorSettings::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_defaults() {
        let a = AutoscalerConfig::default();
        assert_eq!(a.capacity_per_instance, 1);
        assert_eq!(a.max_use_count, 0);
        assert_eq!(a.max_instances, 0);
        assert_eq!(a.instance_acquire_timeout, Duration::from_secs(900));
        assert_eq!(a.update_interval, Duration::from_secs(60));
        assert_eq!(a.update_interval_when_expecting, Duration::from_secs(2));
        assert_eq!(a.deletion_retry_interval, Duration::from_secs(60));
        assert_eq!(a.shutdown_deletion_interval, Duration::from_secs(10));
        assert_eq!(a.shutdown_deletion_retries, 3);
        assert_eq!(a.failure_threshold, 3);
        assert!(a.reservation_throttling_enabled());
        assert!(!a.delete_instances_on_shutdown);
        assert!(a.plugin_config.as_object().unwrap().is_empty());
        assert_eq!(a.max_slots(), None);
        let p = Policy::default();
        assert_eq!(p.periods, vec!["* * * * *".to_string()]);
        assert_eq!(p.scale_factor, 0.0);
        assert!(!p.preemptive_mode_enabled());
        assert!(!VmIsolation::default().enabled);
        assert!(!StateStorage::default().enabled);
    }

    #[test]
    fn preemptive_mode_follows_idle_count_unless_set() {
        let mut p = Policy {
            idle_count: 2,
            ..Policy::default()
        };
        assert!(p.preemptive_mode_enabled());
        p.preemptive_mode = Some(false);
        assert!(!p.preemptive_mode_enabled());
        p.idle_count = 0;
        p.preemptive_mode = Some(true);
        assert!(p.preemptive_mode_enabled());
    }

    #[test]
    fn scale_throttle_defaults() {
        let t = ScaleThrottle::default();
        assert_eq!(t.rate_per_second(), Some(100));
        assert_eq!(t.burst_size(10), Some(10));
        assert_eq!(t.burst_size(0), Some(100));
        let t = ScaleThrottle {
            limit: 1,
            burst: 60,
        };
        assert_eq!(t.rate_per_second(), Some(1));
        assert_eq!(t.burst_size(10), Some(60));
        let t = ScaleThrottle { limit: 5, burst: 0 };
        assert_eq!(t.burst_size(0), Some(5));
        let t = ScaleThrottle {
            limit: -1,
            burst: 7,
        };
        assert_eq!(t.rate_per_second(), None);
        assert_eq!(t.burst_size(10), None);
    }

    #[test]
    fn max_slots_multiplies() {
        let a = AutoscalerConfig {
            max_instances: 10,
            capacity_per_instance: 4,
            ..Default::default()
        };
        assert_eq!(a.max_slots(), Some(40));
    }

    #[test]
    fn timezones() {
        let mut p = Policy::default();
        assert_eq!(p.tz(), None);
        p.timezone = Some("Europe/Berlin".into());
        assert_eq!(p.tz(), Some(chrono_tz::Europe::Berlin));
        p.timezone = Some("Local".into());
        assert_eq!(p.tz(), None);
    }
}
