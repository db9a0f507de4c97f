//! The static pool against real OpenSSH servers: three containers of the offline instance
//! image, reached with a key through flotilla's SSH connector. One of them freezes (its port
//! still accepts, sshd says nothing) and thaws: it is reported, given back, skipped, and lent
//! again once it answers.

use flotilla_connect::ConnectorExt;
use flotilla_connect::ssh::SshConnector;
use flotilla_fleet::{ConnectorConfig, FleetError, InstanceGroup, Settings, State};
use flotilla_provider_static::{StaticGroup, StaticSettings};
use flotilla_ssh_machine::GroupKey;
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::ssh_hosts::SshHosts;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_static_pool_on_real_sshd_hosts() {
    if !require(Infra::Docker) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let key = GroupKey::generate("flotilla/static-test").unwrap();
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, key.private_openssh.expose()).unwrap();
    let hosts = SshHosts::start("static-provider", 3, &key.public_openssh, false);
    let config: Vec<_> = hosts
        .hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            serde_json::json!({"name": format!("host-{i}"), "address": "127.0.0.1", "port": h.port,
                               "username": "root", "key_file": key_file, "max_slots": 3 + i})
        })
        .collect();
    let g = StaticGroup::new(
        StaticSettings::from_plugin_config(&serde_json::json!({
            "name": "real", "hosts": config, "probe_timeout": 2, "unreachable_after": 1,
        }))
        .unwrap(),
    );
    let info = g
        .init(&Settings {
            connector: ConnectorConfig::default(),
        })
        .await
        .unwrap();
    assert_eq!(info.capabilities.max_slots_per_instance, Some(3));
    assert_eq!(g.increase(3).await.unwrap(), 3);
    let listing = g.update().await.unwrap();
    assert_eq!(listing.len(), 3);
    assert!(
        listing.iter().all(|i| i.state == State::Running),
        "{listing:?}"
    );

    // Each lent host is reached with its credentials, and is the host it says it is.
    for (i, h) in hosts.hosts.iter().enumerate() {
        let id = format!("host-{i}");
        let connector = SshConnector::new(g.connect_info(&id).await.unwrap());
        let out = connector.output("hostname").await.unwrap();
        assert!(out.status.success(), "{id}: {}", out.stderr_str());
        assert!(
            h.container.starts_with(out.stdout_str().trim()),
            "{id} answered as {:?}, expected container {}",
            out.stdout_str(),
            h.container
        );
    }

    // host-1 freezes.
    hosts.pause(1);
    let listing = g.update().await.unwrap();
    let frozen = listing.iter().find(|i| i.id == "host-1").unwrap();
    assert_eq!(frozen.state, State::Timeout, "{listing:?}");
    assert!(matches!(
        g.heartbeat("host-1").await,
        Err(FleetError::InstanceUnhealthy { .. })
    ));
    g.heartbeat("host-0").await.unwrap();
    assert_eq!(g.decrease(&["host-1".into()]).await.unwrap(), ["host-1"]);
    let e = g.increase(1).await.unwrap_err();
    assert!(e.to_string().contains("host-1"), "{e}");

    // It thaws and is lent again.
    hosts.unpause(1);
    assert_eq!(g.increase(1).await.unwrap(), 1);
    let listing = g.update().await.unwrap();
    assert_eq!(listing.len(), 3);
    assert!(
        listing.iter().all(|i| i.state == State::Running),
        "{listing:?}"
    );
    let connector = SshConnector::new(g.connect_info("host-1").await.unwrap());
    assert!(connector.output("true").await.unwrap().status.success());
}
