//! The local connector: real bash processes on this host.

use crate::common;

use common::conformance;
use flotilla_connect::local::LocalConnector;
use flotilla_connect::{ConnectError, Connector, ConnectorExt, ForwardTarget};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn output_and_env() {
    conformance::output_and_env(&LocalConnector::new()).await;
}

#[tokio::test]
async fn stdin() {
    conformance::stdin(&LocalConnector::new(), "bash").await;
}

#[tokio::test]
async fn exit_statuses() {
    conformance::exit_statuses(&LocalConnector::new(), true).await;
}

#[tokio::test]
async fn streaming_with_bounded_chunks() {
    conformance::streaming(&LocalConnector::new(), 64 * 1024 * 1024).await;
}

#[tokio::test]
async fn cancellation_kills_the_process_group() {
    let marker = format!("flotilla-local-cancel-{}", std::process::id());
    conformance::cancellation(&LocalConnector::new(), &marker).await;
}

#[tokio::test]
async fn dial_stdio() {
    conformance::dial_stdio(&LocalConnector::new()).await;
}

#[tokio::test]
async fn working_dir_and_shell() {
    let dir = tempfile::tempdir().unwrap();
    let c = LocalConnector::new().with_working_dir(dir.path());
    let out = c.output("pwd").await.unwrap();
    assert_eq!(
        std::path::Path::new(out.stdout_str().trim())
            .canonicalize()
            .unwrap(),
        dir.path().canonicalize().unwrap()
    );
    let c = LocalConnector::new().with_shell("/nonexistent/shell");
    let e = c.output("true").await.unwrap_err();
    assert!(matches!(e, ConnectError::Io { .. }), "{e}");
}

#[tokio::test]
async fn forward_to_local_sockets() {
    let c = LocalConnector::new();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = tcp.local_addr().unwrap().port();
    tokio::spawn(async move {
        let (mut s, _) = tcp.accept().await.unwrap();
        s.write_all(b"tcp-hello").await.unwrap();
    });
    let mut s = c
        .forward(&ForwardTarget::Tcp {
            host: "127.0.0.1".into(),
            port,
        })
        .await
        .unwrap();
    let mut got = String::new();
    s.read_to_string(&mut got).await.unwrap();
    assert_eq!(got, "tcp-hello");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sock");
    let unix = tokio::net::UnixListener::bind(&path).unwrap();
    tokio::spawn(async move {
        let (mut s, _) = unix.accept().await.unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.unwrap();
        s.write_all(&buf).await.unwrap();
    });
    let mut s = c
        .forward(&ForwardTarget::Unix(path.to_str().unwrap().into()))
        .await
        .unwrap();
    s.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    s.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");

    let e = c
        .forward(&ForwardTarget::Unix("/nonexistent/sock".into()))
        .await
        .err()
        .unwrap();
    assert!(matches!(e, ConnectError::Network { .. }), "{e}");
}
