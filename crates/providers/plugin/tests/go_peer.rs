//! flotilla's go-plugin client against hashicorp's own code: a plugin built by this test
//! from Debian's go-plugin 1.0.1 (GOPATH mode, offline; `tests/go-peer/main.go`) serving
//! go-plugin's test service `grpctest.Test`.
//!
//! Checked against hashicorp's server: the cookie and `PLUGIN_*` environment, the
//! handshake line, the health service `plugin`, a call of the plugin's own service over
//! the connection, its hclog stderr in our log, AutoMTLS both ways, and
//! `GRPCController.Shutdown`. Debian's go-plugin 1.0.1 predates `GRPCStdio` (go-plugin
//! 1.2): stdio is checked against the Rust SDK and the Python example instead, and here
//! only that the host copes with its absence.

mod support;

use flotilla_plugin_protocol::Network;
use flotilla_plugin_protocol::handshake::{
    INSTANCE_GROUP_PROTOCOL_VERSION, MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE,
};
use flotilla_provider_plugin::logs::{Level, Source};
use flotilla_provider_plugin::process::{PluginCommand, ProcessError};
use flotilla_testkit::infra::{self, Infra};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use support::{Captured, gone_within};

/// go-plugin's `grpctest.TestRequest` (`test/grpc/test.proto`): `int32 Input = 1`.
#[derive(Clone, PartialEq, prost::Message)]
struct TestRequest {
    #[prost(int32, tag = "1")]
    input: i32,
}

/// `grpctest.TestResponse`: `int32 Output = 2`.
#[derive(Clone, PartialEq, prost::Message)]
struct TestResponse {
    #[prost(int32, tag = "2")]
    output: i32,
}

/// Builds the Go peer once per test binary, cached under `target/tmp` (rebuilt when
/// `main.go` is newer).
fn go_peer() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go-peer");
            let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("go-plugin-peer");
            let out = tmp.join("peer");
            let newer = |a: &Path, b: &Path| {
                let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
                m(a) > m(b)
            };
            if !out.exists() || newer(&src.join("main.go"), &out) {
                std::fs::create_dir_all(&tmp).unwrap();
                let status = std::process::Command::new("go")
                    .args(["build", "-o"])
                    .arg(&out)
                    .arg(".")
                    .current_dir(&src)
                    .env("GO111MODULE", "off")
                    .env(
                        "GOPATH",
                        format!("{}:{}", tmp.join("gopath").display(), infra::GOCODE),
                    )
                    .env("GOCACHE", tmp.join("cache"))
                    .env("GOFLAGS", "")
                    .env("CGO_ENABLED", "0")
                    .status()
                    .expect("go build");
                assert!(status.success(), "building the go-plugin peer failed");
            }
            out
        })
        .clone()
}

fn command(auto_mtls: bool) -> PluginCommand {
    PluginCommand {
        name: "go-peer".into(),
        program: go_peer(),
        args: vec![],
        env: vec![],
        cookie: (MAGIC_COOKIE_KEY.into(), MAGIC_COOKIE_VALUE.into()),
        versions: vec![INSTANCE_GROUP_PROTOCOL_VERSION],
        auto_mtls,
        start_timeout: Duration::from_secs(20),
    }
}

async fn double(channel: tonic::transport::Channel, n: i32) -> i32 {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<TestRequest, TestResponse>::default();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static("/grpctest.Test/Double");
    grpc.unary(tonic::Request::new(TestRequest { input: n }), path, codec)
        .await
        .unwrap()
        .into_inner()
        .output
}

async fn check_peer(auto_mtls: bool) {
    let log = Arc::new(Captured::default());
    let plugin = command(auto_mtls).start(log.clone()).await.expect("start");
    let h = plugin.handshake();
    assert_eq!((h.core_version, h.app_version), (1, 1));
    assert_eq!(h.network, Network::Unix);
    assert_eq!(h.protocol, "grpc");
    assert_eq!(h.server_cert.is_some(), auto_mtls, "{h:?}");
    // go-plugin's own hclog line, JSON on stderr, arrives with its level.
    let (level, text) = log.wait_for(Source::Stderr, "plugin address").await;
    assert_eq!(level, Level::Debug);
    assert!(text.contains("network=unix"), "{text}");
    if auto_mtls {
        log.wait_for(Source::Stderr, "configuring server automatic mTLS")
            .await;
    }

    assert_eq!(double(plugin.channel(), 21).await, 42);
    log.wait_for(Source::Stderr, "go peer doubling 21").await;
    // Debian's go-plugin 1.0.1 has no GRPCStdio: the host says so and goes on.
    log.wait_for(Source::Stderr, "no GRPCStdio service").await;

    let pid = plugin.pid();
    let ended = plugin.shutdown(Duration::from_secs(5)).await;
    assert_eq!(
        ended, "exit status 0",
        "stopped by GRPCController.Shutdown, not killed"
    );
    assert!(gone_within(pid, Duration::from_secs(2)));
}

#[tokio::test]
async fn infra_go_plugin_peer_handshake_health_call_and_shutdown() {
    if !infra::require(Infra::GoPlugin) {
        return;
    }
    check_peer(false).await;
}

#[tokio::test]
async fn infra_go_plugin_peer_auto_mtls() {
    if !infra::require(Infra::GoPlugin) {
        return;
    }
    check_peer(true).await;
}

#[tokio::test]
async fn infra_go_plugin_peer_refuses_a_host_without_the_cookie() {
    if !infra::require(Infra::GoPlugin) {
        return;
    }
    let mut c = command(false);
    c.cookie.1 = "wrong".into();
    let e = c
        .start(Arc::new(Captured::default()))
        .await
        .expect_err("started without the right cookie");
    assert!(
        matches!(&e, ProcessError::ExitedEarly { status, stderr }
            if status == "exit status 1" && stderr.contains("This binary is a plugin")),
        "{e:?}"
    );
}
