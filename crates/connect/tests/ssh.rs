//! The SSH connector against real OpenSSH in instance containers made by the docker provider.

use crate::common;

use async_trait::async_trait;
use common::{CountingSink, conformance, docker, fleet, within};
use flotilla_connect::docker_api::{DockerRoute, docker_client};
use flotilla_connect::docker_exec::DockerExecConnector;
use flotilla_connect::ssh::{
    CredentialSource, FileHostKeys, GroupCredentials, HostKeyStore, MAX_PACKET, MemoryHostKeys,
    SshConnector, SshOptions,
};
use flotilla_connect::{
    ConnectError, Connector, ConnectorExt, ExecRequest, ExitStatus, ForwardTarget,
};
use flotilla_fleet::{ConnectInfo, InstanceGroup, Secret};
use flotilla_provider_docker::GroupKey;
use flotilla_testkit::infra::{Infra, require};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn infra_ssh_conformance() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("conform", 1, false).await;
    let c = f.ssh(0).await;
    conformance::output_and_env(&c).await;
    conformance::stdin(&c, "bash").await;
    conformance::exit_statuses(&c, true).await;
    let out = c.output("kill -KILL $$").await.unwrap();
    assert_eq!(out.status.signal(), Some("KILL"));
    conformance::dial_stdio(&c).await;
    conformance::cancellation(&c, "flotilla-ssh-cancel").await;
    assert_eq!(
        c.connections_opened(),
        1,
        "everything shared one connection"
    );
}

#[tokio::test]
async fn infra_ssh_100_concurrent_commands_on_one_connection() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("concurrent", 1, false).await;
    let c = Arc::new(f.ssh(0).await);
    let runs = (0..100).map(|i| {
        let c = c.clone();
        async move {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let status = c
                .exec(
                    ExecRequest::new(
                        "sleep 0.5; echo \"out $N\"; echo \"err $N\" >&2; exit $((N % 7))",
                    )
                    .env("N", i.to_string())
                    .stdout(&mut out)
                    .stderr(&mut err),
                )
                .await
                .unwrap();
            assert_eq!(status, ExitStatus::Code(i % 7));
            assert_eq!(String::from_utf8(out).unwrap(), format!("out {i}\n"));
            assert_eq!(String::from_utf8(err).unwrap(), format!("err {i}\n"));
        }
    });
    within("100 concurrent commands", futures::future::join_all(runs)).await;
    assert_eq!(c.connections_opened(), 1);
    // sshd agrees: one established SSH connection (ours, through Docker's port proxy).
    let ss = c
        .output("ss -Htn state established '( sport = :22 )' | wc -l")
        .await
        .unwrap();
    assert_eq!(ss.stdout_str().trim(), "1", "{}", ss.stdout_str());
}

/// Peak resident memory of this process, in bytes (`VmHWM`), after resetting it when the
/// kernel allows.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

fn current_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test]
async fn infra_ssh_streams_100_mib_with_bounded_memory() {
    if !require(Infra::Docker) {
        return;
    }
    const TOTAL: u64 = 100 * 1024 * 1024;
    let f = fleet("stream", 1, false).await;
    let c = f.ssh(0).await;
    c.connect().await.unwrap();
    // Reset the peak so it measures this transfer only (Linux: "5" clears VmHWM).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = current_rss();
    // A slow consumer: it stalls every 16 writes, so the producer must be held back.
    let mut sink = CountingSink::slow(16);
    let mut err = Vec::new();
    let status = within(
        "streaming 100 MiB",
        c.exec(
            ExecRequest::new(format!("head -c {TOTAL} /dev/urandom; echo done >&2"))
                .stdout(&mut sink)
                .stderr(&mut err),
        ),
    )
    .await
    .unwrap();
    assert!(status.success());
    assert_eq!(sink.total, TOTAL, "every byte arrived");
    assert_eq!(err, b"done\n", "stderr separate from stdout");
    assert!(
        sink.max_write <= MAX_PACKET,
        "chunks of at most one packet: {}",
        sink.max_write
    );
    // Bounds: russh's per-channel queue holds at most channel_buffer_size packets.
    let options = SshOptions::default();
    let queue_bound = options.channel_buffer_size * MAX_PACKET;
    assert!(queue_bound <= 2 * 1024 * 1024, "{queue_bound}");
    let growth = peak_rss().saturating_sub(before);
    println!(
        "100 MiB streamed in {} writes; peak RSS growth {} KiB (queue bound {} KiB)",
        sink.writes,
        growth / 1024,
        queue_bound / 1024
    );
    assert!(
        growth < 48 * 1024 * 1024,
        "memory grew by {} MiB while streaming: output is being buffered",
        growth / (1024 * 1024)
    );
}

#[tokio::test]
async fn infra_ssh_dead_peer_fails_in_flight_commands_with_a_timeout() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("dead", 1, false).await;
    let c = f.ssh_with_keepalive(0, Duration::from_millis(500), 2).await;
    assert!(c.output("true").await.unwrap().status.success());

    let started = Arc::new(tokio::sync::Notify::new());
    let mut sink = common::StartedSink {
        started: started.clone(),
        data: Vec::new(),
    };
    let id = f.ids[0].clone();
    let exec = c.exec(ExecRequest::new("echo started; sleep 600").stdout(&mut sink));
    let pause = async {
        started.notified().await;
        docker(&["pause", &id]);
        tokio::time::Instant::now()
    };
    let (r, paused_at) = within("a command on a frozen instance", async {
        tokio::join!(exec, pause)
    })
    .await;
    let e = r.unwrap_err();
    println!("failed after {:?}: {e}", paused_at.elapsed());
    assert!(matches!(e, ConnectError::Timeout { .. }), "{e}");
    assert!(e.is_retryable());

    // After the instance thaws, the next command reconnects transparently.
    docker(&["unpause", &id]);
    let out = within("a command after the thaw", c.output("echo back"))
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "back\n");
    assert_eq!(c.connections_opened(), 2);
}

#[tokio::test]
async fn infra_ssh_killed_instance_fails_in_flight_commands_with_a_network_error() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("killed", 1, false).await;
    let c = f.ssh_with_keepalive(0, Duration::from_secs(1), 3).await;
    let started = Arc::new(tokio::sync::Notify::new());
    let mut sink = common::StartedSink {
        started: started.clone(),
        data: Vec::new(),
    };
    let id = f.ids[0].clone();
    let exec = c.exec(ExecRequest::new("echo started; sleep 600").stdout(&mut sink));
    let kill = async {
        started.notified().await;
        docker(&["kill", &id]);
    };
    let (r, ()) = within("a command on a killed instance", async {
        tokio::join!(exec, kill)
    })
    .await;
    let e = r.unwrap_err();
    assert!(
        matches!(
            e,
            ConnectError::Network { .. } | ConnectError::Timeout { .. }
        ),
        "{e}"
    );
    assert!(e.is_retryable());
    // A new command fails to connect, with a typed error, and does not hang.
    let e = within("a command on a dead instance", c.output("true"))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e}");
}

#[tokio::test]
async fn infra_ssh_reconnects_after_the_connection_drops() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("reconnect", 1, false).await;
    let c = f.ssh(0).await;
    assert!(c.output("true").await.unwrap().status.success());
    // Kill the sshd process serving our connection (the parent of the command's shell).
    let e = within(
        "a command killing its own connection",
        c.output("kill -9 $PPID; sleep 30"),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ConnectError::Network { .. }), "{e}");
    let out = within("the next command", c.output("echo again"))
        .await
        .unwrap();
    assert_eq!(out.stdout_str(), "again\n");
    assert_eq!(c.connections_opened(), 2);
}

#[tokio::test]
async fn infra_ssh_wrong_key_is_an_auth_error() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("wrongkey", 1, false).await;
    let mut info = f.info(0).await;
    info.config.key = Some(GroupKey::generate("stranger").unwrap().private_openssh);
    let c = SshConnector::new(info.clone());
    let e = c.output("true").await.unwrap_err();
    assert!(matches!(e, ConnectError::Auth { .. }), "{e}");
    assert!(!e.is_retryable());
    assert!(
        !e.to_string().contains("PRIVATE"),
        "no secrets in errors: {e}"
    );

    info.config.key = None;
    info.config.password = Some(Secret::new("not-the-password".into()));
    let e = SshConnector::new(info.clone())
        .output("true")
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectError::Auth { .. }), "{e}");
    assert!(!e.to_string().contains("not-the-password"), "{e}");

    info.config.password = None;
    let e = SshConnector::new(info).output("true").await.unwrap_err();
    assert!(matches!(e, ConnectError::Credentials(_)), "{e}");
}

#[tokio::test]
async fn infra_ssh_changed_host_key_is_refused() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("hostkey", 2, false).await;
    let store: Arc<dyn HostKeyStore> = Arc::new(MemoryHostKeys::new());
    let pinned_as = |id: &str| SshOptions {
        key_id: Some(id.into()),
        ..Default::default()
    };

    // Instance 0 is first seen under the id "web-1": its key is pinned.
    let first = SshConnector::new(f.info(0).await)
        .with_host_keys(store.clone())
        .with_options(pinned_as("web-1"));
    assert!(first.output("true").await.unwrap().status.success());
    assert!(
        store
            .pinned("web-1")
            .unwrap()
            .unwrap()
            .starts_with("ssh-ed25519 ")
    );

    // Another machine (its own host key) turns up behind the same id: refused.
    let impostor = SshConnector::new(f.info(1).await)
        .with_host_keys(store.clone())
        .with_options(pinned_as("web-1"));
    let e = impostor.output("true").await.unwrap_err();
    match &e {
        ConnectError::HostKeyMismatch {
            key_id,
            pinned,
            presented,
        } => {
            assert_eq!(key_id, "web-1");
            assert!(pinned.starts_with("SHA256:") && presented.starts_with("SHA256:"));
            assert_ne!(pinned, presented);
        }
        other => panic!("expected a host key mismatch, got {other}"),
    }
    assert!(!e.is_retryable());
    assert_eq!(impostor.connections_opened(), 0);

    // The same through a file-backed store, across store instances (a restart).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host_keys");
    let c = SshConnector::new(f.info(0).await)
        .with_host_keys(Arc::new(FileHostKeys::new(&path)))
        .with_options(pinned_as("db-1"));
    assert!(c.output("true").await.unwrap().status.success());
    let c = SshConnector::new(f.info(0).await)
        .with_host_keys(Arc::new(FileHostKeys::new(&path)))
        .with_options(pinned_as("db-1"));
    assert!(
        c.output("true").await.unwrap().status.success(),
        "same key accepted"
    );
    let e = SshConnector::new(f.info(1).await)
        .with_host_keys(Arc::new(FileHostKeys::new(&path)))
        .with_options(pinned_as("db-1"))
        .output("true")
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectError::HostKeyMismatch { .. }), "{e}");

    // A bogus pinned key is refused too.
    let bogus = GroupKey::generate("bogus").unwrap().public_openssh;
    let store = Arc::new(MemoryHostKeys::new());
    store.pin(&f.ids[0], &bogus).unwrap();
    let e = SshConnector::new(f.info(0).await)
        .with_host_keys(store)
        .output("true")
        .await
        .unwrap_err();
    assert!(matches!(e, ConnectError::HostKeyMismatch { .. }), "{e}");
}

/// Counts refreshes, delegating to the instance group.
#[derive(Debug)]
struct CountingSource {
    inner: GroupCredentials,
    calls: AtomicUsize,
}

#[async_trait]
impl CredentialSource for CountingSource {
    async fn refresh(&self, id: &str) -> Result<ConnectInfo, ConnectError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.refresh(id).await
    }
}

#[tokio::test]
async fn infra_ssh_expired_credentials_are_refreshed_before_connecting() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("refresh", 1, false).await;
    let group: Arc<dyn InstanceGroup> = f.group.clone();
    let source = Arc::new(CountingSource {
        inner: GroupCredentials(group),
        calls: AtomicUsize::new(0),
    });

    // Stale details: a key the instance does not accept, expired a minute ago.
    let mut stale = f.info(0).await;
    stale.config.key = Some(GroupKey::generate("old").unwrap().private_openssh);
    stale.expires = Some(SystemTime::now() - Duration::from_secs(60));
    let c = SshConnector::new(stale.clone()).with_credentials(source.clone());
    assert!(c.output("true").await.unwrap().status.success());
    assert_eq!(source.calls.load(Ordering::SeqCst), 1);
    assert_eq!(c.connect_info().expires, None, "fresh details in use");

    // Not expired: the source is not asked (and the bad key fails as it should).
    stale.expires = Some(SystemTime::now() + Duration::from_secs(3600));
    let c = SshConnector::new(stale).with_credentials(source.clone());
    assert!(matches!(
        c.output("true").await.unwrap_err(),
        ConnectError::Auth { .. }
    ));
    assert_eq!(source.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn infra_ssh_forwards_tcp_and_unix_sockets() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("forward", 1, false).await;
    let c = f.ssh(0).await;
    let mut s = c
        .forward(&ForwardTarget::Tcp {
            host: "127.0.0.1".into(),
            port: 22,
        })
        .await
        .unwrap();
    let mut banner = [0u8; 8];
    s.read_exact(&mut banner).await.unwrap();
    assert_eq!(&banner, b"SSH-2.0-");
    drop(s);

    // Refused targets are remote errors (a working unix forward is exercised by the Docker
    // socket route in the dial-stdio test).
    let e = c
        .forward(&ForwardTarget::Tcp {
            host: "127.0.0.1".into(),
            port: 1,
        })
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ConnectError::Remote { .. }), "{e}");
    let e = c
        .forward(&ForwardTarget::Unix("/nonexistent.sock".into()))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ConnectError::Remote { .. }), "{e}");
    assert_eq!(
        c.connections_opened(),
        1,
        "a refused forward keeps the connection"
    );
    assert!(c.output("true").await.unwrap().status.success());
}

/// Waits until the instance's inner dockerd has loaded its preloaded images.
async fn wait_inner_dockerd(c: &SshConnector) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while !c
        .output("test -f /run/flotilla-dockerd-ready")
        .await
        .unwrap()
        .status
        .success()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "inner dockerd not ready: {}",
            c.output("tail -n 20 /var/log/dockerd.log")
                .await
                .unwrap()
                .stdout_str()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test]
async fn infra_ssh_dial_stdio_carries_the_inner_docker_api() {
    if !require(Infra::Docker) {
        return;
    }
    let f = fleet("dialstdio", 1, true).await;
    let c: Arc<SshConnector> = Arc::new(f.ssh(0).await);
    wait_inner_dockerd(&c).await;

    let inner = within(
        "connecting bollard through dial-stdio",
        docker_client(c.clone(), DockerRoute::default(), 60),
    )
    .await
    .unwrap();
    assert_eq!(
        inner.client_version().to_string(),
        "1.41",
        "negotiated down to the inner engine's API"
    );
    let busybox = flotilla_testkit::images::busybox_image();
    let images = inner
        .list_images(None::<bollard::query_parameters::ListImagesOptions>)
        .await
        .unwrap();
    assert!(
        images.iter().any(|i| i.repo_tags.contains(&busybox)),
        "the inner daemon has the preloaded job image: {images:?}"
    );
    let outer = docker(&["ps", "-q"]);
    let containers = inner
        .list_containers(None::<bollard::query_parameters::ListContainersOptions>)
        .await
        .unwrap();
    assert!(
        containers.is_empty(),
        "the inner daemon, not the host's ({outer})"
    );
    let info = inner.info().await.unwrap();
    assert_ne!(info.id, None);

    // A job container on the inner daemon, driven through the tunnel, including exec (which
    // needs HTTP upgrades through the dial-stdio stream).
    let created = inner
        .create_container(
            None::<bollard::query_parameters::CreateContainerOptions>,
            bollard::models::ContainerCreateBody {
                image: Some(busybox.clone()),
                cmd: Some(vec!["sleep".into(), "300".into()]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    inner.start_container(&created.id, None).await.unwrap();
    let job = DockerExecConnector::new(inner.clone(), &created.id);
    let out = within(
        "exec in the inner container",
        job.output("echo from-inner; hostname"),
    )
    .await
    .unwrap();
    assert!(
        out.stdout_str().starts_with("from-inner\n"),
        "{}",
        out.stdout_str()
    );
    assert_eq!(
        inner
            .list_containers(None::<bollard::query_parameters::ListContainersOptions>)
            .await
            .unwrap()
            .len(),
        1
    );
    inner
        .remove_container(
            &created.id,
            Some(
                bollard::query_parameters::RemoveContainerOptionsBuilder::new()
                    .force(true)
                    .build(),
            ),
        )
        .await
        .unwrap();

    // The legacy route: the socket forwarded over SSH (direct-streamlocal).
    let via_socket = docker_client(
        c.clone(),
        DockerRoute::Socket("/var/run/docker.sock".into()),
        60,
    )
    .await
    .unwrap();
    let version = via_socket.version().await.unwrap();
    assert_eq!(version.api_version.as_deref(), Some("1.41"));

    // A raw dial-stdio stream speaks HTTP to the daemon.
    let mut s = c.dial_stdio("docker system dial-stdio").await.unwrap();
    s.write_all(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    within("a raw ping", s.read_to_string(&mut reply))
        .await
        .unwrap();
    assert!(
        reply.starts_with("HTTP/1.0 200") && reply.ends_with("OK"),
        "{reply}"
    );
    assert_eq!(c.connections_opened(), 1);
}

/// `[runners.autoscaler.connector_config] timeout`: an instance that takes the TCP connection
/// and never speaks SSH fails the connection with a timeout naming the configured time, and
/// the attempt does not hang (only loopback is dialled: a listener of this test).
#[tokio::test]
async fn a_silent_instance_fails_after_the_connectors_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let info = ConnectInfo {
        config: flotilla_fleet::ConnectorConfig {
            protocol_port: Some(port),
            username: "ci".into(),
            password: Some(Secret::new("not-used".into())),
            timeout: Duration::from_secs(1),
            ..flotilla_fleet::ConnectorConfig::default()
        },
        id: "silent".into(),
        external_addr: String::new(),
        internal_addr: "127.0.0.1".into(),
        expires: None,
    };
    let e = tokio::time::timeout(
        Duration::from_secs(30),
        SshConnector::new(info).output("true"),
    )
    .await
    .expect("the connector gave up on its own")
    .unwrap_err();
    assert!(
        matches!(e, ConnectError::Timeout { after, .. } if after == Duration::from_secs(1)),
        "{e}"
    );
    silent.abort();
}
