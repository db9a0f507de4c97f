//! The static pool against hosts that only send an SSH banner (listeners on 127.0.0.1 that
//! can be stopped and started again on the same port): lending in order, a host that stops
//! answering reported and given back, skipped while silent, lent again once it answers, and
//! the lent hosts found again by a restarted provider.

use flotilla_fleet::{
    ConnectorConfig, FleetError, InstanceGroup, InstanceStatus, Secret, Settings, State,
};
use flotilla_provider_static::{StaticGroup, StaticSettings};
use std::net::SocketAddr;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A host that answers with an SSH banner while it runs.
struct FakeHost {
    addr: SocketAddr,
    task: Option<JoinHandle<()>>,
}

impl FakeHost {
    async fn start() -> FakeHost {
        let mut h = FakeHost {
            addr: "127.0.0.1:0".parse().unwrap(),
            task: None,
        };
        h.up().await;
        h
    }

    /// Answers (again) on its port.
    async fn up(&mut self) {
        let l = TcpListener::bind(self.addr).await.unwrap();
        self.addr = l.local_addr().unwrap();
        self.task = Some(tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\r\n").await;
            }
        }));
    }

    /// Stops answering: connections are refused.
    async fn down(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
            let _ = t.await;
        }
    }
}

fn settings(hosts: &[&FakeHost], state_file: &std::path::Path) -> StaticSettings {
    let hosts: Vec<_> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| {
            serde_json::json!({"name": format!("h{i}"), "address": "127.0.0.1", "port": h.addr.port()})
        })
        .collect();
    StaticSettings::from_plugin_config(&serde_json::json!({
        "name": "fake", "hosts": hosts, "probe_timeout": 2, "unreachable_after": 2,
        "state_file": state_file,
    }))
    .unwrap()
}

fn connector() -> Settings {
    Settings {
        connector: ConnectorConfig {
            username: "ci".into(),
            password: Some(Secret::new("pw".into())),
            ..ConnectorConfig::default()
        },
    }
}

fn running(ids: &[&str]) -> Vec<InstanceStatus> {
    ids.iter()
        .map(|id| InstanceStatus::new(*id, State::Running))
        .collect()
}

#[tokio::test]
async fn hosts_are_lent_given_back_skipped_while_silent_and_lent_again() {
    let mut hosts = Vec::new();
    for _ in 0..3 {
        hosts.push(FakeHost::start().await);
    }
    let dir = tempfile::tempdir().unwrap();
    let state_file = dir.path().join("pool.json");
    let g = StaticGroup::new(settings(&hosts.iter().collect::<Vec<_>>(), &state_file));
    let info = g.init(&connector()).await.unwrap();
    assert_eq!(info.id, "static/fake");
    assert_eq!(info.max_size, 3);
    assert!(info.capabilities.fixed_pool);
    assert!(!info.capabilities.can_retire_instances());
    assert!(g.update().await.unwrap().is_empty(), "nothing lent yet");

    assert_eq!(g.increase(2).await.unwrap(), 2);
    assert_eq!(g.update().await.unwrap(), running(&["h0", "h1"]));
    let ci = g.connect_info("h1").await.unwrap();
    assert_eq!(
        ci.dial_addr(),
        format!("127.0.0.1:{}", hosts[1].addr.port())
    );
    assert_eq!(ci.config.username, "ci");
    g.heartbeat("h0").await.unwrap();
    assert!(matches!(
        g.heartbeat("h2").await,
        Err(FleetError::InstanceNotFound(_))
    ));

    // h1 stops answering: still running after one failed probe, timeout after two, and its
    // heartbeat says unhealthy.
    hosts[1].down().await;
    assert_eq!(g.update().await.unwrap(), running(&["h0", "h1"]));
    let listing = g.update().await.unwrap();
    assert_eq!(listing[1], InstanceStatus::new("h1", State::Timeout));
    assert!(matches!(
        g.heartbeat("h1").await,
        Err(FleetError::InstanceUnhealthy { .. })
    ));

    // The fleet gives it back and asks for two more: only h2 answers.
    assert_eq!(g.decrease(&["h1".into()]).await.unwrap(), ["h1"]);
    assert_eq!(g.increase(2).await.unwrap(), 1);
    assert_eq!(g.update().await.unwrap(), running(&["h0", "h2"]));
    // Nothing free answers: an error, so that the fleet backs off.
    let e = g.increase(1).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("no free host of the pool answers: h1"),
        "{e}"
    );

    // h1 answers again and is lent again.
    hosts[1].up().await;
    assert_eq!(g.increase(1).await.unwrap(), 1);
    assert_eq!(g.update().await.unwrap(), running(&["h0", "h1", "h2"]));
    assert_eq!(g.increase(1).await.unwrap(), 0, "the pool is all lent");

    // A restarted provider finds the same hosts lent; giving back what is not in the pool
    // does nothing.
    g.shutdown().await.unwrap();
    let again = StaticGroup::new(settings(&hosts.iter().collect::<Vec<_>>(), &state_file));
    again.init(&connector()).await.unwrap();
    assert_eq!(again.update().await.unwrap(), running(&["h0", "h1", "h2"]));
    assert_eq!(
        again
            .decrease(&["h0".into(), "elsewhere".into()])
            .await
            .unwrap(),
        ["h0"]
    );
    assert_eq!(again.update().await.unwrap(), running(&["h1", "h2"]));
}
