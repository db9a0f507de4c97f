//! The rules a decoded configuration must follow, as pure functions from a [`Config`] to a list
//! of findings with the key path each one is about.

use super::autoscaler::{AutoscalerConfig, IsolationLevel, MIN_IDLE_TIME, Policy};
use super::cron::parse_period;
use super::global::Config;
use super::runner::{Executor, RunnerConfig};
use super::source::{KeyPath, Target};

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Severity {
    /// The configuration is rejected.
    Error,
    /// The configuration is accepted and the finding printed.
    Warning,
}

/// One finding, tied to the key or value it is about.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Finding {
    pub(crate) severity: Severity,
    pub(crate) path: KeyPath,
    pub(crate) target: Target,
    pub(crate) message: String,
}

#[derive(Default)]
struct Findings(Vec<Finding>);

impl Findings {
    fn error(&mut self, path: KeyPath, message: impl Into<String>) {
        self.push(Severity::Error, path, Target::Value, message);
    }

    fn warn(&mut self, path: KeyPath, message: impl Into<String>) {
        self.push(Severity::Warning, path, Target::Value, message);
    }

    /// The errors a level's `build` found in its table at `table`.
    fn level(
        &mut self,
        table: &KeyPath,
        errors: Option<flotilla_isolate::settings::SettingErrors>,
    ) {
        for e in errors.map(|e| e.0).unwrap_or_default() {
            let mut at = table.clone();
            for step in &e.at {
                at = match step {
                    flotilla_isolate::settings::KeySegment::Key(k) => at.key(k),
                    flotilla_isolate::settings::KeySegment::Index(i) => at.index(*i),
                };
            }
            self.error(at, e.message);
        }
    }

    fn push(
        &mut self,
        severity: Severity,
        path: KeyPath,
        target: Target,
        message: impl Into<String>,
    ) {
        self.0.push(Finding {
            severity,
            path,
            target,
            message: message.into(),
        });
    }
}

/// Checks a decoded (and normalized) configuration. Returns every finding, errors and
/// warnings, in no particular order.
pub(crate) fn validate(config: &Config) -> Vec<Finding> {
    let mut f = Findings::default();
    let root = KeyPath::root();
    if config.concurrent == 0 {
        f.warn(
            root.key("concurrent"),
            "concurrent = 0: GitLab Runner starts no worker with it and takes no job; flotilla \
             takes one job at a time",
        );
    }
    check_listen_address(&mut f, config);
    for (i, runner) in config.runners.iter().enumerate() {
        check_runner(&mut f, &root.key("runners").index(i), runner);
    }
    check_sizing(&mut f, config);
    f.0
}

fn runner_label(runner: &RunnerConfig) -> String {
    if runner.name.is_empty() {
        "runner".to_string()
    } else {
        format!("runner `{}`", runner.name)
    }
}

fn check_runner(f: &mut Findings, path: &KeyPath, runner: &RunnerConfig) {
    let label = runner_label(runner);
    let executor = runner.executor;
    check_shell_and_clone_url(f, path, runner);
    check_feature_flags(f, path, runner);
    if runner
        .instance
        .as_ref()
        .is_some_and(|i| i.use_common_build_dir)
    {
        f.warn(
            path.key("instance").key("use_common_build_dir"),
            "use_common_build_dir is not used: every slot keeps a build directory of its own \
             (with max_use_count = 1, which GitLab Runner requires for it, an instance runs one \
             job, so no job shares a directory either way)",
        );
    }
    if let Some(cache) = &runner.cache {
        match cache.validate() {
            Ok(warnings) => {
                for w in warnings {
                    f.warn(path.key("cache"), format!("{label}: [runners.cache] {w}"));
                }
            }
            Err(e) => f.error(path.key("cache"), format!("{label}: {e}")),
        }
    }
    if executor.requires_gitlab() {
        match runner.url.as_deref() {
            None => f.error(
                path.clone(),
                format!("{label}: `url` is required for executor `{executor}`"),
            ),
            Some(url) if !(url.starts_with("https://") || url.starts_with("http://")) => f.error(
                path.key("url"),
                format!("{label}: `url` must start with https:// or http://, got `{url}`"),
            ),
            Some(_) => {}
        }
        match &runner.token {
            None => f.error(
                path.clone(),
                format!("{label}: `token` is required for executor `{executor}`"),
            ),
            Some(t) if t.expose().trim().is_empty() => {
                f.error(path.key("token"), format!("{label}: `token` is empty"));
            }
            Some(_) => {}
        }
    }
    for (j, entry) in runner.environment.iter().enumerate() {
        if !entry.contains('=') {
            f.error(
                path.key("environment").index(j),
                format!("environment entry `{entry}` is not KEY=VALUE"),
            );
        }
    }
    if runner.use_slot_cgroups
        && !runner.slot_cgroup_template.contains("${slot}")
        && !runner.slot_cgroup_template.contains("$slot")
    {
        f.warn(
            path.key("slot_cgroup_template"),
            format!(
                "slot_cgroup_template `{}` has no ${{slot}}: all jobs will share one cgroup",
                runner.slot_cgroup_template
            ),
        );
    }
    if let Some(level) = runner.image_isolation()
        && !runner.isolation_levels().offers(level)
    {
        f.error(
            path.key("autoscaler").key("image_isolation"),
            format!(
                "image_isolation = {level} is not one of the levels this runner offers ({})",
                runner.isolation_levels()
            ),
        );
    }
    if runner.isolation_levels().offers(IsolationLevel::Cgroup)
        && let Err(why) = flotilla_isolate::cgroup::check_template(&runner.slot_cgroup_template)
    {
        f.error(
            path.key("slot_cgroup_template"),
            format!("the cgroup level needs a slot cgroup per slot: {why}"),
        );
    }
    // Each level's table is checked by the level's own `build`, with what it takes from
    // the rest of the runner.
    if let Some(c) = &runner.cgroup {
        f.level(
            &path.key("cgroup"),
            c.build(&runner.slot_cgroup_template).err(),
        );
        if !runner.isolation_levels().offers(IsolationLevel::Cgroup) {
            f.warn(
                path.key("cgroup"),
                "[runners.cgroup] limits only the cgroup level, which this runner does not offer",
            );
        }
    }
    if let Some(m) = &runner.microvm {
        f.level(
            &path.key("microvm"),
            m.build(&runner.microvm_context(false)).err(),
        );
        if !runner.isolation_levels().offers(IsolationLevel::Microvm) {
            f.warn(
                path.key("microvm"),
                "[runners.microvm] configures only the microvm level, which this runner does not offer",
            );
        }
    }
    if let Some(v) = &runner.vm {
        f.level(&path.key("vm"), v.build(&runner.vm_context()).err());
        if !runner.isolation_levels().offers(IsolationLevel::Vm) {
            f.warn(
                path.key("vm"),
                "[runners.vm] configures only the vm level, which this runner does not offer",
            );
        }
    }
    if runner.output_limit == Some(0) {
        f.error(
            path.key("output_limit"),
            "output_limit must be 1 (KiB) or more; leave it out for GitLab's 4096",
        );
    }
    if let Some(docker) = &runner.docker {
        let docker_path = path.key("docker");
        if docker.privileged && !runner.isolation_levels().offers(IsolationLevel::Docker) {
            f.error(
                docker_path.key("privileged"),
                format!(
                    "privileged = true applies to docker isolation's containers, which this \
                     runner does not offer (it offers {}); offer \"docker\", or use \
                     isolation \"instance\" for a job that needs the whole machine",
                    runner.isolation_levels()
                ),
            );
        }
        f.level(&docker_path, docker.build(&runner.docker_context()).err());
    }
    match (&runner.autoscaler, executor) {
        (None, e) if e.requires_autoscaler() => f.error(
            path.clone(),
            format!("{label}: executor `{e}` needs a [runners.autoscaler] table"),
        ),
        (Some(_), e @ (Executor::Shell | Executor::Docker)) => f.error(
            path.key("autoscaler"),
            format!(
                "executor `{e}` runs jobs on this host and takes no [runners.autoscaler]; \
                 for an autoscaled fleet use executor = \"flotilla\" with isolation = \"{}\"",
                e.default_isolation(false)
            ),
        ),
        (Some(a), _) => check_autoscaler(f, &path.key("autoscaler"), a),
        (None, _) => {}
    }
}

/// `shell`, whose meaning flotilla keeps only in part, and `clone_url`.
///
/// flotilla writes POSIX shell scripts and runs them with bash where it is found and sh
/// otherwise, which is GitLab's `bash` shell (its detection script falls back to sh the same
/// way); `sh` runs the same scripts (they are POSIX) with bash where present; PowerShell and
/// `cmd` scripts are not written at all, so a runner set up for them is refused rather than
/// run in the wrong language.
/// `[runners.feature_flags]`: the flags flotilla reads are honoured; the others are warned
/// (flotilla has one behaviour where GitLab Runner has the flag), those that change the
/// stage script and are on, more plainly.
fn check_feature_flags(f: &mut Findings, path: &KeyPath, runner: &RunnerConfig) {
    use flotilla_job::model::feature_flags::{READ, UNSUPPORTED};
    let label = runner_label(runner);
    for (name, on) in &runner.feature_flags {
        let at = path.key("feature_flags").key(name);
        if READ.iter().any(|(n, _)| *n == name.as_str()) {
            continue;
        }
        if UNSUPPORTED.contains(&name.as_str()) {
            if *on {
                f.warn(
                    at,
                    format!(
                        "{label}: {name} = true is not supported: flotilla writes the stage \
                         script one way, as GitLab Runner does with it off (each job's log says so)"
                    ),
                );
            }
            continue;
        }
        f.warn(
            at,
            format!(
                "{label}: feature flag {name} has no effect in flotilla, which has one \
                 behaviour where GitLab Runner has this flag (flags read: {})",
                READ.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
            ),
        );
    }
}

fn check_shell_and_clone_url(f: &mut Findings, path: &KeyPath, runner: &RunnerConfig) {
    match runner.shell.as_deref().map(str::trim) {
        None | Some("" | "bash") => {}
        Some("sh") => f.warn(
            path.key("shell"),
            "shell = \"sh\": flotilla's scripts are POSIX and run with bash where the image or \
             host has it, else with sh",
        ),
        Some(other) => f.error(
            path.key("shell"),
            format!(
                "shell = \"{other}\" is not supported: flotilla writes POSIX shell scripts \
                 (bash, falling back to sh), not PowerShell or cmd"
            ),
        ),
    }
    // Empty is unset, as GitLab reads it (rendered configs write `clone_url = ""`).
    if let Some(url) = runner.clone_url.as_deref().filter(|u| !u.trim().is_empty())
        && flotilla_job::script::clone_url_remote(url, "", "p").is_none()
    {
        f.error(
            path.key("clone_url"),
            format!("clone_url `{url}` has no scheme (such as https:// or ssh://)"),
        );
    }
}

fn check_autoscaler(f: &mut Findings, path: &KeyPath, a: &AutoscalerConfig) {
    // Windows instances (and WinRM, which reaches them): flotilla has no connector for WinRM
    // and writes POSIX scripts, so such a fleet would fail every job (it was accepted and failed
    // at the first).
    let connector = &a.connector_config;
    let windows = connector
        .os
        .as_deref()
        .is_some_and(|os| os.eq_ignore_ascii_case("windows"));
    let protocol = connector.effective_protocol();
    let winrm = matches!(
        protocol,
        flotilla_fleet::Protocol::WinRm | flotilla_fleet::Protocol::WinRmHttps
    );
    if winrm && connector.protocol.is_some() {
        f.error(
            path.key("connector_config").key("protocol"),
            format!(
                "the {} protocol reaches Windows instances, on which flotilla cannot run jobs: \
                 it reaches instances over SSH only and writes POSIX shell scripts",
                protocol.as_str()
            ),
        );
    } else if windows {
        f.error(
            path.key("connector_config").key("os"),
            "os = \"windows\": flotilla cannot run jobs on Windows instances: it reaches \
             instances over SSH only (GitLab's default for Windows is WinRM) and writes POSIX \
             shell scripts",
        );
    }
    let storage = &a.state_storage;
    if storage.enabled || storage.dir.is_some() {
        f.warn(
            path.key("state_storage"),
            "[runners.autoscaler.state_storage] enabled and dir are not used: flotilla keeps \
             the fleet's state in its own store ([flotilla] state_dir) and adopts its instances \
             after a restart whatever they say; jobs that were running are reported failed",
        );
    }
    if a.vm_isolation
        .nesting_config
        .as_object()
        .is_some_and(|o| !o.is_empty())
    {
        f.warn(
            path.key("vm_isolation").key("nesting_config"),
            "nesting_config is not used: flotilla runs the vm level's VMs itself, with no \
             nesting daemon to configure",
        );
    }
    if a.reservation_throttling == Some(false) {
        f.warn(
            path.key("reservation_throttling"),
            "reservation_throttling = false has no effect: flotilla asks GitLab for a job only \
             once a slot is reserved for it, so a job it takes never waits for capacity no \
             instance has (GitLab Runner without throttling would take it and let it wait)",
        );
    }
    if a.plugin.trim().is_empty() {
        f.error(
            path.key("plugin"),
            "[runners.autoscaler] needs a `plugin` (the provider, e.g. \"aws\")",
        );
    }
    if a.capacity_per_instance < 1 {
        f.error(
            path.key("capacity_per_instance"),
            "capacity_per_instance must be at least 1",
        );
    }
    if a.isolation
        .as_ref()
        .is_some_and(|l| l.offers(IsolationLevel::Instance))
    {
        if a.capacity_per_instance > 1 {
            f.error(
                path.key("capacity_per_instance"),
                format!(
                    "isolation \"instance\" gives a job the whole instance, so every job on \
                     this fleet must have one to itself: capacity_per_instance must be 1, got {}",
                    a.capacity_per_instance
                ),
            );
        }
        if a.max_use_count != 1 {
            f.warn(
                path.key("max_use_count"),
                format!(
                    "with isolation \"instance\", jobs use an instance one after another \
                     (max_use_count = {}): what one job leaves on it, the next finds; \
                     max_use_count = 1 gives every job a fresh instance, the only setting safe \
                     for untrusted jobs",
                    a.max_use_count
                ),
            );
        }
    }
    for (key, value) in [
        ("update_interval", a.update_interval),
        (
            "update_interval_when_expecting",
            a.update_interval_when_expecting,
        ),
        ("instance_acquire_timeout", a.instance_acquire_timeout),
        ("instance_ready_timeout", a.instance_ready_timeout),
    ] {
        if value.is_zero() {
            f.error(path.key(key), format!("{key} must be greater than 0"));
        }
    }
    if a.scale_throttle.limit < -1 {
        f.error(
            path.key("scale_throttle").key("limit"),
            format!(
                "scale_throttle.limit must be -1 (unlimited), 0 (default 100/s) or positive, got {}",
                a.scale_throttle.limit
            ),
        );
    }
    // flotilla plays nesting's part itself: it boots and deletes the slots' VMs over the
    // instance's connection and reaches them through its agent.
    if !a.vm_isolation.nesting_host.trim().is_empty() {
        f.warn(
            path.key("vm_isolation").key("nesting_host"),
            "nesting_host is not used: flotilla runs the vm level's VMs itself (QEMU on the \
             instance, reached through flotilla's agent in the VM), no nesting daemon is \
             needed; see docs/isolation.md",
        );
    }
    if !a.vm_isolation.connector_config.is_unset() {
        f.warn(
            path.key("vm_isolation").key("connector_config"),
            "vm_isolation.connector_config is not used: flotilla reaches the VMs through its \
             agent in them, not over SSH",
        );
    }
    for (k, policy) in a.policy.iter().enumerate() {
        check_policy(f, &path.key("policy").index(k), policy);
    }
    check_buckets(f, path, a);
}

fn check_policy(f: &mut Findings, path: &KeyPath, p: &Policy) {
    if p.periods.is_empty() {
        f.warn(
            path.key("periods"),
            "policy has no periods and never applies",
        );
    }
    for (k, period) in p.periods.iter().enumerate() {
        if let Err(e) = parse_period(period) {
            f.error(path.key("periods").index(k), e);
        }
    }
    if let Some(tz) = p.timezone.as_deref()
        && !matches!(tz, "" | "Local")
        && tz.parse::<chrono_tz::Tz>().is_err()
    {
        f.error(
            path.key("timezone"),
            format!("unknown time zone `{tz}` (expected an IANA name such as \"Europe/Berlin\")"),
        );
    }
    if p.idle_time < MIN_IDLE_TIME {
        f.error(
            path.key("idle_time"),
            format!(
                "idle_time must be at least 1s, got {}",
                super::duration::format_go_duration(p.idle_time)
            ),
        );
    }
    if !(p.scale_factor >= 0.0 && p.scale_factor.is_finite()) {
        f.error(
            path.key("scale_factor"),
            format!("scale_factor must be 0 or more, got {}", p.scale_factor),
        );
    }
}

/// `listen_address` must parse; one that others can reach serves the status page only with
/// a token.
fn check_listen_address(f: &mut Findings, config: &Config) {
    let Some(address) = config.listen_address.as_deref() else {
        return;
    };
    let path = KeyPath::root().key("listen_address");
    match super::listen::ListenAddress::parse(address) {
        Err(e) => f.error(path, e),
        Ok(a) => {
            let has_token = config
                .flotilla
                .status_token
                .as_ref()
                .is_some_and(|t| !t.expose().is_empty());
            if a.is_loopback() != Some(true) && !has_token {
                f.warn(
                    path,
                    format!(
                        "listen_address `{address}` may be reachable from other machines: \
                         /metrics and /debug/health are served there as GitLab Runner serves \
                         them, but the status page is not without [flotilla] status_token"
                    ),
                );
            }
        }
    }
}

/// Histogram buckets must be finite and strictly increasing (Prometheus refuses others).
fn check_buckets(f: &mut Findings, path: &KeyPath, a: &AutoscalerConfig) {
    for (key, buckets) in [
        (
            "instance_operation_time_buckets",
            &a.instance_operation_time_buckets,
        ),
        (
            "instance_creation_time_buckets",
            &a.instance_creation_time_buckets,
        ),
        (
            "instance_is_running_time_buckets",
            &a.instance_is_running_time_buckets,
        ),
        (
            "instance_deletion_time_buckets",
            &a.instance_deletion_time_buckets,
        ),
        (
            "instance_readiness_time_buckets",
            &a.instance_readiness_time_buckets,
        ),
        (
            "instance_life_duration_buckets",
            &a.instance_life_duration_buckets,
        ),
    ] {
        let Some(b) = buckets else { continue };
        if b.iter().any(|x| !x.is_finite()) || b.windows(2).any(|w| w[0] >= w[1]) {
            f.error(
                path.key(key),
                format!("{key} must be finite numbers in strictly increasing order, got {b:?}"),
            );
        }
    }
}

/// GitLab's sizing rule: `concurrent = sum of max_instances * capacity_per_instance`. Only
/// checked when every autoscaled runner has a `max_instances`.
fn check_sizing(f: &mut Findings, config: &Config) {
    let fleets: Vec<Option<u64>> = config
        .runners
        .iter()
        .filter_map(|r| r.autoscaler.as_ref().map(AutoscalerConfig::max_slots))
        .collect();
    if fleets.is_empty() || fleets.iter().any(Option::is_none) {
        return;
    }
    let total: u64 = fleets.into_iter().flatten().sum();
    let concurrent = u64::from(config.concurrent);
    if total == concurrent {
        return;
    }
    let consequence = if concurrent < total {
        format!("at most {concurrent} jobs run even when more slots are idle")
    } else {
        format!("at most {total} jobs run at once; concurrent above that has no effect")
    };
    f.warn(
        KeyPath::root().key("concurrent"),
        format!(
            "concurrent = {concurrent} but the fleets hold {total} job slots \
             (sum of max_instances x capacity_per_instance): {consequence}"
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::autoscaler::ScaleThrottle;
    use flotilla_fleet::Secret;
    use std::time::Duration;

    fn runner(executor: Executor) -> RunnerConfig {
        RunnerConfig {
            name: "r".into(),
            url: Some("https://gitlab.example.com".into()),
            token: Some(Secret::new("glrt-x".into())),
            executor,
            autoscaler: Some(AutoscalerConfig {
                plugin: "aws".into(),
                max_instances: 5,
                capacity_per_instance: 2,
                ..Default::default()
            }),
            ..RunnerConfig::embedded_default()
        }
    }

    fn messages(config: &Config, severity: Severity) -> Vec<String> {
        validate(config)
            .into_iter()
            .filter(|f| f.severity == severity)
            .map(|f| format!("{}: {}", f.path, f.message))
            .collect()
    }

    #[test]
    fn a_sound_config_has_no_findings() {
        let c = Config {
            concurrent: 10,
            runners: vec![runner(Executor::DockerAutoscaler)],
            ..Default::default()
        };
        assert_eq!(validate(&c), vec![]);
    }

    #[test]
    fn sizing_mismatch_is_a_warning() {
        let c = Config {
            concurrent: 4,
            runners: vec![
                runner(Executor::DockerAutoscaler),
                runner(Executor::Instance),
            ],
            ..Default::default()
        };
        let w = messages(&c, Severity::Warning);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].starts_with("concurrent: concurrent = 4 but the fleets hold 20 job slots"));
        assert!(messages(&c, Severity::Error).is_empty());
        // Unlimited fleets are not compared.
        let mut unlimited = runner(Executor::Instance);
        unlimited.autoscaler.as_mut().unwrap().max_instances = 0;
        let c = Config {
            concurrent: 4,
            runners: vec![runner(Executor::DockerAutoscaler), unlimited],
            ..Default::default()
        };
        assert!(messages(&c, Severity::Warning).is_empty());
    }

    #[test]
    fn every_error_is_reported() {
        let mut r = runner(Executor::DockerAutoscaler);
        r.url = None;
        r.token = None;
        r.environment = vec!["OK=1".into(), "BROKEN".into()];
        let a = r.autoscaler.as_mut().unwrap();
        a.plugin = String::new();
        a.capacity_per_instance = 0;
        a.scale_throttle = ScaleThrottle {
            limit: -5,
            burst: 0,
        };
        a.policy = vec![Policy {
            periods: vec!["* * * *".into(), "* 8-15 * * mon-fri".into()],
            timezone: Some("Mars/Olympus_Mons".into()),
            idle_time: Duration::ZERO,
            scale_factor: -1.0,
            ..Default::default()
        }];
        let c = Config {
            concurrent: 0,
            runners: vec![r],
            ..Default::default()
        };
        let e = messages(&c, Severity::Error);
        let expected_paths = [
            "runners[0]: runner `r`: `url` is required",
            "runners[0]: runner `r`: `token` is required",
            "runners[0].environment[1]: environment entry `BROKEN`",
            "runners[0].autoscaler.plugin:",
            "runners[0].autoscaler.capacity_per_instance: capacity_per_instance must be at least 1",
            "runners[0].autoscaler.scale_throttle.limit:",
            "runners[0].autoscaler.policy[0].periods[0]: period `* * * *` must have 5 fields",
            "runners[0].autoscaler.policy[0].timezone: unknown time zone `Mars/Olympus_Mons`",
            "runners[0].autoscaler.policy[0].idle_time: idle_time must be at least 1s, got 0s",
            "runners[0].autoscaler.policy[0].scale_factor:",
        ];
        for p in expected_paths {
            assert!(e.iter().any(|m| m.starts_with(p)), "{p} not in {e:#?}");
        }
        assert_eq!(e.len(), expected_paths.len(), "{e:#?}");
        assert!(
            messages(&c, Severity::Warning)
                .iter()
                .any(|w| w.contains("concurrent = 0"))
        );
    }

    #[test]
    fn executor_and_autoscaler_must_agree() {
        let mut r = runner(Executor::Instance);
        r.autoscaler = None;
        let c = Config {
            runners: vec![r],
            ..Default::default()
        };
        assert_eq!(
            messages(&c, Severity::Error),
            vec!["runners[0]: runner `r`: executor `instance` needs a [runners.autoscaler] table"]
        );
        let c = Config {
            concurrent: 10,
            runners: vec![runner(Executor::Shell)],
            ..Default::default()
        };
        let e = messages(&c, Severity::Error);
        assert_eq!(e.len(), 1);
        assert!(
            e[0].contains("use executor = \"flotilla\" with isolation = \"shell\""),
            "{e:?}"
        );
    }

    #[test]
    fn flotilla_runners_may_be_local_only() {
        let mut r = runner(Executor::Flotilla);
        r.url = None;
        r.token = None;
        let c = Config {
            concurrent: 10,
            runners: vec![r],
            ..Default::default()
        };
        assert!(messages(&c, Severity::Error).is_empty());
    }

    #[test]
    fn instance_isolation_needs_an_instance_per_job_and_warns_when_they_are_reused() {
        let mut r = runner(Executor::Flotilla);
        let a = r.autoscaler.as_mut().unwrap();
        a.isolation = Some(IsolationLevel::Instance.into());
        let c = Config {
            concurrent: 10,
            runners: vec![r],
            ..Default::default()
        };
        let e = messages(&c, Severity::Error);
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("capacity_per_instance must be 1, got 2"));
        // Reusing an instance is allowed (a static host cannot be thrown away), with a
        // warning that says what it means.
        let w = messages(&c, Severity::Warning);
        assert!(
            w.iter()
                .any(|w| w.contains("max_use_count = 1 gives every job a fresh instance")),
            "{w:?}"
        );
    }

    #[test]
    fn slot_cgroup_template_without_placeholder_warns() {
        let mut r = runner(Executor::Instance);
        r.use_slot_cgroups = true;
        r.slot_cgroup_template = "gitlab-runner/all".into();
        let c = Config {
            concurrent: 10,
            runners: vec![r],
            ..Default::default()
        };
        let w = messages(&c, Severity::Warning);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("all jobs will share one cgroup"));
    }

    /// Issue 32: `shell` was accepted and ignored. `bash` is what flotilla does; `sh` is warned
    /// (bash runs the POSIX scripts where present); PowerShell and `cmd` are refused.
    #[test]
    fn feature_flags_read_are_quiet_and_the_others_said() {
        let mut r = runner(Executor::Instance);
        r.feature_flags = [
            ("FF_ENABLE_JOB_CLEANUP".to_string(), true),
            ("FF_USE_FASTZIP".to_string(), true),
            ("FF_USE_LEGACY_BASH_EVAL".to_string(), true),
            ("FF_ENABLE_BASH_EXIT_CODE_CHECK".to_string(), false),
        ]
        .into();
        let config = Config {
            concurrent: 10,
            runners: vec![r],
            ..Default::default()
        };
        let warned = messages(&config, Severity::Warning);
        assert_eq!(warned.len(), 2, "{warned:?}");
        assert!(
            warned[0].contains("FF_USE_FASTZIP has no effect"),
            "{warned:?}"
        );
        assert!(
            warned[1].contains("FF_USE_LEGACY_BASH_EVAL = true is not supported"),
            "{warned:?}"
        );
    }

    #[test]
    fn shell_says_what_it_does() {
        let with = |shell: Option<&str>| {
            let mut r = runner(Executor::Instance);
            r.shell = shell.map(str::to_string);
            Config {
                concurrent: 10,
                runners: vec![r],
                ..Default::default()
            }
        };
        let c = with(Some("bash"));
        let all = [
            messages(&c, Severity::Warning),
            messages(&c, Severity::Error),
        ]
        .concat();
        assert!(!all.iter().any(|m| m.contains(".shell")), "{all:?}");
        let w = messages(&with(Some("sh")), Severity::Warning);
        assert!(w.iter().any(|m| m.contains("POSIX")), "{w:?}");
        for windows in ["pwsh", "powershell", "cmd"] {
            let e = messages(&with(Some(windows)), Severity::Error);
            assert!(
                e.iter()
                    .any(|m| m.contains("is not supported: flotilla writes POSIX")),
                "{windows}: {e:?}"
            );
        }
    }

    /// `clone_url` must name a scheme for GitLab Runner to use it; empty is unset (rendered
    /// configs write `clone_url = ""`).
    #[test]
    fn clone_url_needs_a_scheme() {
        let with = |url: &str| {
            let mut r = runner(Executor::Instance);
            r.clone_url = Some(url.into());
            Config {
                concurrent: 10,
                runners: vec![r],
                ..Default::default()
            }
        };
        for fine in ["https://gitlab.internal", "ssh://gitlab.internal:2222", ""] {
            let e = messages(&with(fine), Severity::Error);
            assert!(!e.iter().any(|m| m.contains("clone_url")), "{fine}: {e:?}");
        }
        let e = messages(&with("gitlab.internal"), Severity::Error);
        assert!(e.iter().any(|m| m.contains("has no scheme")), "{e:?}");
    }
}
