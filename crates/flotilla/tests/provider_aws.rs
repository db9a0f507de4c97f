//! The `aws` provider in the real binary (built with `--features aws`): `flotilla run` against
//! the fake GitLab on an Auto Scaling group served by moto.
//!
//! moto's instances are not machines, so the job's connection goes to a container of the
//! instance image (the docker provider's, with sshd) through `plugin_config.
//! test_address_override`, a key meant for tests only: every instance of the group is
//! reached at that one address. Everything else is the provider's real path: GitLab's
//! `plugin_config` keys (`name`, `profile`, `config_file`, `credentials_file`) through the
//! standard AWS chain, `SetDesiredCapacity`, the listing, `DescribeInstances` for the
//! connection, and static credentials passed through.
#![cfg(feature = "aws")]

use crate::run_support;

use flotilla_ssh_machine::GroupKey;
use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::moto::{ACCESS_KEY, GroupSpec, Moto, REGION, SECRET_KEY};
use flotilla_testkit::ssh_hosts::SshHosts;
use run_support::Manager;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_run_a_job_on_an_auto_scaling_group_served_by_moto() {
    if !require(Infra::Moto) || !require(Infra::Docker) {
        return;
    }
    const TOKEN: &str = "glrt-aws-moto-token";
    let dir = tempfile::tempdir().unwrap();
    let moto = Moto::start().await.unwrap();
    moto.create_group(&GroupSpec::new("flotilla-ci", 2))
        .await
        .unwrap();

    let key = GroupKey::generate("flotilla/provider-aws-test").unwrap();
    std::fs::write(dir.path().join("key"), key.private_openssh.expose()).unwrap();
    let hosts = SshHosts::start("run-aws", 1, &key.public_openssh, false);

    // The shared AWS files, as a user of fleeting-plugin-aws has them, named by plugin_config.
    std::fs::write(
        dir.path().join("aws-config"),
        format!("[profile flotilla-test]\nregion = {REGION}\n"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("aws-credentials"),
        format!(
            "[flotilla-test]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n"
        ),
    )
    .unwrap();

    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_secs(2)).await;
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"concurrent = 2
check_interval = 1
shutdown_timeout = 30

[flotilla]
state_dir = "{state}"

[[runners]]
  name = "aws-moto"
  url = "{url}"
  token = "{TOKEN}"
  executor = "instance"
  builds_dir = "/builds/aws"
  [runners.autoscaler]
    plugin = "fleeting-plugin-aws"
    capacity_per_instance = 1
    max_instances = 1
    [runners.autoscaler.connector_config]
      username = "root"
      key_path = "{key}"
      use_static_credentials = true
    [runners.autoscaler.plugin_config]
      name = "flotilla-ci"
      profile = "flotilla-test"
      config_file = "{aws_config}"
      credentials_file = "{aws_credentials}"
      endpoint_url = "{endpoint}"
      test_address_override = "127.0.0.1:{port}"
    [[runners.autoscaler.policy]]
      idle_count = 1
      idle_time = "1h"
"#,
            state = dir.path().join("state").display(),
            url = gl.url(),
            key = dir.path().join("key").display(),
            aws_config = dir.path().join("aws-config").display(),
            aws_credentials = dir.path().join("aws-credentials").display(),
            endpoint = moto.endpoint(),
            port = hosts.hosts[0].port,
        ),
    )
    .unwrap();
    let m = Manager::start(&config, &[]);

    let job = gl.enqueue(
        TOKEN,
        JobBuilder::new("on-aws")
            .masked_variable("SECRET", "s3cr3t-aws-value")
            .script(["echo OUT-aws-$SECRET; hostname > /builds/aws/ran-here"]),
    );
    assert!(
        gl.wait_finished(&[job], Duration::from_secs(180)).await,
        "the job did not finish; manager log:\n{}",
        m.log_tail()
    );
    let j = gl.job(job).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}\n{}", m.log_tail());
    assert!(trace.contains("OUT-aws-[MASKED]"), "{trace}");
    assert!(!trace.contains("s3cr3t-aws-value"), "{trace}");
    // The instance is the ASG's (an EC2 id), reached at the container.
    let in_service = moto.in_service("flotilla-ci").await.unwrap();
    assert_eq!(
        in_service.len(),
        1,
        "the scaler raised the desired capacity to 1"
    );
    assert!(
        trace.contains(&format!("on instance {}", in_service[0])),
        "{trace}"
    );
    assert!(
        !hosts.exec(0, "cat /builds/aws/ran-here").trim().is_empty(),
        "the job ran in the container"
    );
    let log = m.log();
    // GitLab's plugin name selected the aws provider.
    assert!(log.contains("plugin aws,"), "{}", m.log_tail());
    assert!(!log.contains("s3cr3t-aws-value"));
}
