//! Real GitLab Runner configuration files (written from GitLab's documented examples) load
//! unchanged, with the values and defaults GitLab gives them.

use flotilla::config::{
    Config, Executor, IsolationLevel, Loaded, PullPolicy, REDACTED, Warning, format_go_duration,
};
use flotilla_fleet::Protocol;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load(name: &str) -> Loaded {
    match Config::load(fixture(name)) {
        Ok(loaded) => loaded,
        Err(e) => panic!("{name} failed to load:\n{e}"),
    }
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

#[test]
fn canonical_docker_autoscaler_on_aws() {
    let loaded = load("docker-autoscaler-aws.toml");
    // GitLab's example sets `shell = "sh"`; flotilla runs the same POSIX scripts with bash
    // where the image has it, and says so (it was silent before).
    let warned: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(
        warned[0].contains(":8:11: shell = \"sh\": flotilla's scripts are POSIX"),
        "{warned:?}"
    );
    let c = &loaded.config;
    assert_eq!(c.concurrent, 10);
    assert_eq!(c.check_interval, secs(3));
    assert_eq!(c.shutdown_timeout, secs(30));
    assert_eq!(c.runners.len(), 1);
    let r = &c.runners[0];
    assert_eq!(r.executor, Executor::DockerAutoscaler);
    assert_eq!(
        r.token.as_ref().unwrap().expose(),
        "glrt-canonical-example-token"
    );
    assert_eq!(r.request_concurrency, 1);
    assert_eq!(r.isolation(), IsolationLevel::Docker);
    assert_eq!(
        r.docker.as_ref().unwrap().image.as_deref(),
        Some("busybox:latest")
    );
    let a = r.autoscaler.as_ref().unwrap();
    assert_eq!(a.plugin, "aws");
    assert_eq!(
        (a.capacity_per_instance, a.max_use_count, a.max_instances),
        (1, 1, 10)
    );
    assert_eq!(
        a.plugin_config,
        serde_json::json!({"name": "my-docker-asg"})
    );
    assert_eq!(a.connector_config.username.as_deref(), Some("ec2-user"));
    assert!(a.connector_config.use_external_addr);
    // Everything not written takes GitLab's default.
    assert_eq!(a.instance_acquire_timeout, secs(15 * 60));
    assert_eq!(a.update_interval, secs(60));
    assert_eq!(a.update_interval_when_expecting, secs(2));
    assert_eq!(a.deletion_retry_interval, secs(60));
    assert_eq!(a.shutdown_deletion_interval, secs(10));
    assert_eq!(a.shutdown_deletion_retries, 3);
    assert_eq!(a.failure_threshold, 3);
    assert!(a.reservation_throttling_enabled());
    assert_eq!(a.scale_throttle.rate_per_second(), Some(100));
    assert_eq!(a.scale_throttle.burst_size(a.max_instances), Some(10));
    assert_eq!(a.policy.len(), 1);
    let p = &a.policy[0];
    assert_eq!(p.periods, vec!["* * * * *"]);
    assert_eq!(p.idle_count, 5);
    assert_eq!(p.idle_time, secs(20 * 60));
    assert!(p.preemptive_mode_enabled());
    let connector = a.connector_config.to_connector_config().unwrap();
    assert_eq!(connector.username, "ec2-user");
    assert_eq!(connector.protocol, Protocol::Ssh);
    assert_eq!(connector.port(), 22);
    assert!(connector.use_external_addr);
}

#[test]
fn full_docker_autoscaler_on_aws() {
    let loaded = load("docker-autoscaler-aws-full.toml");
    // `reservation_throttling = false` and `state_storage` are read but not honoured: said,
    // not dropped (`cache_dir` and `log_internal_ip` are honoured).
    let warned: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    assert_eq!(warned.len(), 2, "{warned:?}");
    assert!(
        warned[0].contains(":44:")
            && warned[0].contains("reservation_throttling = false has no effect"),
        "{warned:?}"
    );
    assert!(
        warned[1].contains(":74:")
            && warned[1].contains("state_storage] enabled and dir are not used"),
        "{warned:?}"
    );
    let c = &loaded.config;
    assert_eq!(c.concurrent, 40);
    assert_eq!(c.shutdown_timeout, secs(300));
    let r = &c.runners[0];
    assert_eq!(r.id, Some(1234));
    assert_eq!((r.limit, r.request_concurrency), (40, 4));
    assert_eq!(
        r.environment_pairs(),
        vec![
            ("FF_USE_FASTZIP", "true"),
            ("DOCKER_AUTH_CONFIG", "{\"auths\":{}}")
        ]
    );
    let d = r.docker.as_ref().unwrap();
    assert_eq!(
        d.pull_policy,
        vec![PullPolicy::IfNotPresent, PullPolicy::Always]
    );
    assert_eq!(d.services_limit, Some(3));
    assert_eq!(d.volumes, vec!["/cache", "/certs/client"]);
    let a = r.autoscaler.as_ref().unwrap();
    assert_eq!(a.max_slots(), Some(40));
    assert_eq!(
        a.instance_ready_command.as_deref(),
        Some("cloud-init status --wait")
    );
    assert_eq!(a.instance_acquire_timeout, secs(600));
    assert_eq!(a.update_interval, secs(30));
    assert_eq!(a.update_interval_when_expecting, secs(1));
    assert_eq!(a.deletion_retry_interval, secs(120));
    assert_eq!(a.shutdown_deletion_interval, secs(5));
    assert_eq!((a.shutdown_deletion_retries, a.failure_threshold), (6, 5));
    assert!(!a.reservation_throttling_enabled());
    assert!(a.delete_instances_on_shutdown && a.log_internal_ip && !a.log_external_ip);
    assert_eq!(
        a.instance_operation_time_buckets.as_deref(),
        Some(&[1.0, 5.0, 10.0, 30.0, 60.0][..])
    );
    assert_eq!(a.instance_deletion_time_buckets, None);
    let cc = &a.connector_config;
    assert_eq!(cc.protocol, Some(Protocol::Ssh));
    assert_eq!(cc.protocol_port, Some(22));
    assert_eq!(cc.keepalive, Some(secs(30)));
    assert_eq!(cc.timeout, Some(secs(300)));
    assert!(cc.use_static_credentials);
    assert_eq!(
        cc.key_path.as_deref(),
        Some(Path::new("/etc/gitlab-runner/ci-fleet.pem"))
    );
    assert_eq!((a.scale_throttle.limit, a.scale_throttle.burst), (2, 10));
    assert_eq!(a.scale_throttle.rate_per_second(), Some(2));
    assert!(a.state_storage.enabled && a.state_storage.keep_instance_with_acquisitions);
    assert_eq!(
        a.state_storage.dir.as_deref(),
        Some(Path::new("/var/lib/gitlab-runner/taskscaler"))
    );
    assert_eq!(a.policy.len(), 4);
    let office = &a.policy[1];
    assert_eq!(office.periods, vec!["* 8-17 * * mon-fri"]);
    assert_eq!(office.tz(), Some(chrono_tz::Europe::Berlin));
    assert_eq!((office.idle_count, office.scale_factor_limit), (8, 16));
    assert_eq!(office.scale_factor, 0.5);
    assert_eq!(office.idle_time, secs(1800));
    let nightly = &a.policy[2];
    assert_eq!(nightly.cron_periods().len(), 2);
    assert!(!nightly.preemptive_mode_enabled());
    assert_eq!(nightly.tz(), Some(chrono_tz::UTC));
    assert_eq!(a.policy[3].idle_time, secs(60));
}

#[test]
fn instance_executor_with_policies() {
    let loaded = load("instance-policies.toml");
    assert_eq!(loaded.warnings, Vec::<Warning>::new());
    let r = &loaded.config.runners[0];
    assert_eq!(r.executor, Executor::Instance);
    assert_eq!(r.isolation(), IsolationLevel::Shell);
    assert!(r.use_slot_cgroups);
    assert_eq!(r.slot_cgroup(1), "runner-slot-1.slice");
    assert!(!r.instance.as_ref().unwrap().use_common_build_dir);
    let a = r.autoscaler.as_ref().unwrap();
    assert_eq!(a.isolation, Some(IsolationLevel::Shell.into()));
    assert_eq!(
        a.instance_ready_command.as_deref(),
        Some("test -x /usr/local/bin/gitlab-runner && systemctl is-active docker")
    );
    assert_eq!(a.connector_config.timeout, Some(secs(600)));
    let p = &a.policy[1];
    assert_eq!(p.periods, vec!["* 7-19 * * 1-5"]);
    assert_eq!(p.tz(), Some(chrono_tz::America::New_York));
    assert_eq!(p.idle_time, secs(5400));
    assert_eq!(p.scale_factor, 1.5);
    assert_eq!(p.preemptive_mode, Some(true));
}

#[test]
fn vm_isolation_nesting_on_macos() {
    let loaded = load("vm-isolation-macos.toml");
    // GitLab's example names a nesting daemon and SSH into the VM; flotilla is its own
    // daemon and reaches the VM through its agent, and says so at each key.
    let warned: Vec<String> = loaded.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warned.len(), 3, "{warned:?}");
    assert!(warned[0].contains("nesting_host is not used"), "{warned:?}");
    assert!(
        warned[1].contains("nesting_config is not used"),
        "{warned:?}"
    );
    assert!(
        warned[2].contains("connector_config is not used"),
        "{warned:?}"
    );
    let r = &loaded.config.runners[0];
    assert_eq!(r.isolation(), IsolationLevel::Vm);
    assert_eq!(
        r.instance.as_ref().unwrap().allowed_images,
        vec!["macos-14-xcode-15", "macos-15-*"]
    );
    let a = r.autoscaler.as_ref().unwrap();
    assert_eq!(a.capacity_per_instance, 2);
    let vm = &a.vm_isolation;
    assert!(vm.enabled);
    assert_eq!(
        vm.nesting_host,
        "unix:///Users/ec2-user/Library/Application Support/nesting.sock"
    );
    assert_eq!(vm.image, "macos-14-xcode-15");
    assert_eq!(
        vm.nesting_config,
        serde_json::json!({"hypervisor": "tart", "cpus": 4, "memory_mb": 8192})
    );
    let nested = vm.connector_config.to_connector_config().unwrap();
    assert_eq!(nested.username, "admin");
    assert_eq!(
        nested.password.as_ref().unwrap().expose(),
        "nested-vm-password"
    );
    assert_eq!(nested.timeout, secs(120));
    assert_eq!(a.policy[0].idle_time, secs(24 * 3600));
    // The host key is read only when asked for, and its absence is a clear error.
    let e = a.connector_config.to_connector_config().unwrap_err();
    assert!(
        e.to_string().contains("/etc/gitlab-runner/mac-host.pem"),
        "{e}"
    );
}

#[test]
fn unused_gitlab_keys_are_warned_about_once_each() {
    let loaded = load("gitlab-extras.toml");
    let file = fixture("gitlab-extras.toml").display().to_string();
    let got: Vec<String> = loaded.warnings.iter().map(ToString::to_string).collect();
    // `disable_entrypoint_overwrite` (39), `oom_kill_disable` (40), `shm_size` (43),
    // `services` (46), `disable_cache` (41), the S3 cache (25) and `custom_build_dir` (23)
    // are honoured (issue 32).
    let expected = [
        "3:14: concurrent = 4 but the fleets hold 8 job slots",
        "5:1: `connection_max_age` at the top level is not used by flotilla; ignored",
        "7:18: listen_address `:9252` may be reachable from other machines: /metrics and \
         /debug/health are served there as GitLab Runner serves them, but the status page is \
         not without [flotilla] status_token",
        "8:1: `sentry_dsn` at the top level",
        "10:2: `session_server` at the top level",
        "18:3: `token_obtained_at` in [runners] is not used by flotilla; ignored",
        "19:3: `token_expires_at` in [runners]",
        "34:22: runner `registered-runner`: feature flag FF_USE_FASTZIP has no effect",
        "36:5: `tls_verify` in [runners.docker]",
        "44:5: `network_mtu` in [runners.docker]",
    ];
    assert_eq!(got.len(), expected.len(), "{got:#?}");
    for (g, e) in got.iter().zip(expected) {
        assert!(
            g.starts_with(&format!("{file}:{e}")),
            "{g}\n  does not start with {e}"
        );
    }
    // Sub-keys of an unused table are not reported one by one.
    assert!(
        !got.iter()
            .any(|w| w.contains("BucketName") || w.contains("session_timeout"))
    );
    // Nothing misleading: real GitLab keys are not "typos" of ours.
    assert!(!got.iter().any(|w| w.contains("did you mean")), "{got:#?}");
    // The keys flotilla does use were read.
    let c = &loaded.config;
    assert_eq!(c.check_interval, secs(3));
    assert_eq!(c.shutdown_timeout, secs(30));
    let r = &c.runners[0];
    assert_eq!((r.id, r.limit), (Some(5), 5));
    // output_limit is honoured (KiB, as GitLab reads it).
    assert!(r.output_limit.is_some());
    let d = r.docker.as_ref().unwrap();
    assert_eq!(d.pull_policy, vec![PullPolicy::IfNotPresent]);
    assert!(!d.privileged);
    assert_eq!(d.volumes, vec!["/cache"]);
}

#[test]
fn flotilla_extensions() {
    let loaded = load("flotilla-extensions.toml");
    assert_eq!(loaded.warnings, Vec::<Warning>::new());
    let c = &loaded.config;
    assert_eq!(
        c.flotilla.state_dir.as_deref(),
        Some(Path::new("/var/lib/flotilla"))
    );
    assert_eq!(c.listen_address.as_deref(), Some("127.0.0.1:9252"));
    assert_eq!(
        c.flotilla
            .status_token
            .as_ref()
            .map(|t| t.expose().as_str()),
        Some("status-page-token")
    );
    let fleet = &c.runners[0];
    assert_eq!(fleet.executor, Executor::Flotilla);
    assert_eq!(fleet.isolation(), IsolationLevel::Microvm);
    let local = &c.runners[1];
    assert_eq!(local.gitlab_credentials().map(|(u, _)| u), None);
    assert!(local.autoscaler.is_none());
    assert_eq!(local.isolation(), IsolationLevel::Shell);
}

#[test]
fn every_fixture_prints_redacted_and_reloads_identically() {
    for name in [
        "docker-autoscaler-aws.toml",
        "docker-autoscaler-aws-full.toml",
        "instance-policies.toml",
        "vm-isolation-macos.toml",
        "gitlab-extras.toml",
        "flotilla-extensions.toml",
    ] {
        let original = std::fs::read_to_string(fixture(name)).unwrap();
        let loaded = load(name);
        let printed = loaded.config.to_redacted_toml().unwrap();
        for secret in [
            "glrt-",
            "nested-vm-password",
            "{\"auths\"",
            "status-page-token",
        ] {
            assert!(
                !printed.contains(secret) || !original.contains(secret),
                "{name}: `{secret}` printed:\n{printed}"
            );
        }
        let again = Config::from_str(&printed, fixture(name))
            .unwrap_or_else(|e| panic!("{name}: printed config does not load:\n{e}\n{printed}"));
        // gitlab-extras: the sizing, the listen_address and the feature flag warnings stay;
        // vm-isolation-macos: the unused nesting_host, nesting_config and connector_config;
        // aws-full: reservation_throttling and state_storage; aws: shell = "sh".
        assert_eq!(
            again.warnings.len(),
            3 * usize::from(name == "gitlab-extras.toml" || name == "vm-isolation-macos.toml")
                + 2 * usize::from(name == "docker-autoscaler-aws-full.toml")
                + usize::from(name == "docker-autoscaler-aws.toml"),
            "{name}"
        );
        // Apart from the redacted secrets, nothing changed.
        let mut expected = loaded.config.clone();
        if expected.flotilla.status_token.is_some() {
            expected.flotilla.status_token = Some(REDACTED.to_string().into());
        }
        for r in &mut expected.runners {
            if r.token.is_some() {
                r.token = Some(REDACTED.to_string().into());
            }
            for e in &mut r.environment {
                if let Some((k, _)) = e.split_once('=')
                    && !k.starts_with("FF_")
                {
                    *e = format!("{k}={REDACTED}");
                }
            }
            if let Some(a) = &mut r.autoscaler
                && a.vm_isolation.connector_config.password.is_some()
            {
                a.vm_isolation.connector_config.password = Some(REDACTED.to_string().into());
            }
        }
        assert_eq!(again.config, expected, "{name}");
    }
}

#[test]
fn durations_print_in_go_syntax() {
    let loaded = load("docker-autoscaler-aws-full.toml");
    let printed = loaded.config.to_redacted_toml().unwrap();
    assert!(
        printed.contains("instance_acquire_timeout = \"10m0s\""),
        "{printed}"
    );
    assert!(printed.contains("idle_time = \"30m0s\""));
    assert!(printed.contains("shutdown_timeout = 300\n"));
    assert_eq!(format_go_duration(secs(5400)), "1h30m0s");
}

#[test]
fn debug_output_leaks_no_secret() {
    let text = r#"
concurrent = 1
[[runners]]
  url = "https://gitlab.example.com"
  token = "glrt-debug-secret"
  executor = "instance"
  environment = ["API_TOKEN=env-secret", "FF_NETWORK_PER_BUILD=true"]
  [runners.autoscaler]
    plugin = "hetzner"
    max_instances = 1
    [runners.autoscaler.plugin_config]
      name = "fleet"
      token = "hcloud-secret"
    [runners.autoscaler.connector_config]
      password = "connector-secret"
    [runners.autoscaler.vm_isolation]
      enabled = true
      nesting_host = "unix:///run/nesting.sock"
      [runners.autoscaler.vm_isolation.nesting_config]
        api_key = "nesting-secret"
"#;
    let loaded = Config::from_str(text, "debug.toml").unwrap();
    let debug = format!("{:?}", loaded.config);
    let printed = loaded.config.to_redacted_toml().unwrap();
    for secret in [
        "glrt-debug-secret",
        "env-secret",
        "hcloud-secret",
        "connector-secret",
        "nesting-secret",
    ] {
        assert!(!debug.contains(secret), "{secret} in {debug}");
        assert!(!printed.contains(secret), "{secret} in {printed}");
    }
    // Non-secrets stay readable.
    assert!(debug.contains("FF_NETWORK_PER_BUILD=true") && debug.contains("hetzner"));
    assert!(printed.contains("name = \"fleet\""));
    // The loaded values are intact for the code that needs them.
    let a = loaded.config.runners[0].autoscaler.as_ref().unwrap();
    assert_eq!(a.plugin_config["token"], "hcloud-secret");
}

/// Issue 32: every container option of `[runners.docker]` flotilla honours loads without a
/// warning and reaches the docker level's options (`shm_size`, `ulimit`, `tmpfs` ... were
/// accepted and dropped before).
#[test]
fn docker_container_options_load_and_are_used() {
    let loaded = load("docker-container-options.toml");
    assert_eq!(loaded.warnings, Vec::<Warning>::new());
    let runner = &loaded.config.runners[0];
    let docker = runner.docker.clone().unwrap();
    let options = docker.build(&runner.docker_context()).unwrap().options;
    let body = options.build(bollard::models::ContainerCreateBody::default());
    assert_eq!(body.hostname.as_deref(), Some("ci-build"));
    let host = body.host_config.unwrap();
    assert_eq!(host.shm_size, Some(268_435_456));
    assert_eq!(host.memory_swap, Some(2 << 30));
    assert_eq!(host.ulimits.unwrap().len(), 2);
    let service = options
        .service(bollard::models::ContainerCreateBody::default())
        .host_config
        .unwrap();
    assert_eq!(service.nano_cpus, Some(1_500_000_000));
    assert!(
        service
            .tmpfs
            .unwrap()
            .contains_key("/var/lib/postgresql/data")
    );
}

/// Public `config.toml` files, as their repositories hold them (source named at the top of
/// each, `tests/fixtures/public/`): the docker-executor ones load, every key flotilla does not
/// use is warned at its line with the reason, and the keys that shape jobs are read; a
/// third-party fleeting plugin this build lacks is refused by name, before any GitLab call.
#[test]
fn public_configs_load_or_are_refused_with_the_reason() {
    let warned_keys = |name: &str| -> Vec<String> {
        let loaded = load(&format!("public/{name}"));
        loaded
            .warnings
            .iter()
            .map(|w| {
                let text = w.to_string();
                let key = text.split('`').nth(1).unwrap_or_default().to_string();
                assert!(
                    text.contains("is not used") && text.contains(" ("),
                    "a warning without its reason: {text}"
                );
                key
            })
            .collect()
    };
    assert_eq!(
        warned_keys("webees-devops.toml"),
        ["session_server", "tls_verify", "tls_verify", "tls_verify"]
    );
    let loaded = load("public/webees-devops.toml");
    assert_eq!(loaded.config.runners.len(), 3);
    let docker = loaded.config.runners[0].docker.clone().unwrap();
    assert_eq!(
        docker.volumes,
        ["/var/run/docker.sock:/var/run/docker.sock", "/cache"]
    );

    assert_eq!(warned_keys("mritd-composes.toml"), ["tls_verify"]);
    let loaded = load("public/mritd-composes.toml");
    let r = &loaded.config.runners[0];
    assert_eq!(r.builds_dir.as_deref(), Some("/gitlab/runner-builds"));
    let docker = r.docker.clone().unwrap();
    assert_eq!(docker.extra_hosts, ["git.mritd.me:172.16.0.37"]);
    assert_eq!(docker.volumes.len(), 8);

    // `config check` refuses what `run` could not start (the registry of this build).
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["config", "check"])
        .arg(fixture("public/lavr-fleeting-yc.toml"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("plugin \"fleeting-plugin-yandexcloud\" is not available in this build"),
        "{stderr}"
    );
}
