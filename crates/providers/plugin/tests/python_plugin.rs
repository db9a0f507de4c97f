//! flotilla's plugin host against the example plugin in Python (grpcio): a plugin in
//! another language, with its own gRPC library, serves the same protocol.

mod support;

use flotilla_fleet::{InstanceGroup, State};
use flotilla_provider_plugin::logs::Source;
use flotilla_testkit::infra::{self, Infra};
use serde_json::json;
use std::time::{Duration, Instant};
use support::{gone_within, group, init, python_plugin, signal};

#[tokio::test]
async fn infra_python_plugin_serves_the_group_with_stdio_restart_and_shutdown() {
    if !infra::require(Infra::PythonGrpc) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("instances.json");
    let (g, log) = group(
        python_plugin(),
        json!({"config": {"provider": "memory", "instances": 2, "state_file": state,
                          "say": "hello from python"}}),
    );
    let info = init(&g).await;
    assert_eq!(info.id, "memory/runner-1");
    assert_eq!(info.max_size, usize::MAX, "0 on the wire means unbounded");
    log.wait_for(Source::StdioStdout, "stdout: hello from python")
        .await;
    log.wait_for(Source::StdioStderr, "stderr: hello from python")
        .await;

    assert_eq!(g.increase(2).await.unwrap(), 2);
    let before = g.update().await.unwrap();
    assert_eq!(before.len(), 4);
    assert!(before.iter().all(|i| i.state == State::Running));
    assert_eq!(
        g.decrease(&["m-1".into()]).await.unwrap(),
        vec!["m-1".to_string()]
    );
    let ci = g.connect_info("m-2").await.unwrap();
    assert_eq!(ci.config.username, "ci");
    assert!(g.heartbeat("m-1").await.unwrap_err().is_unhealthy());
    let before = g.update().await.unwrap();

    let pid = g.plugin_pid().await.unwrap();
    signal(pid, libc::SIGKILL);
    assert!(gone_within(pid, Duration::from_secs(5)));
    let started = Instant::now();
    let after = loop {
        match g.update().await {
            Ok(list) => break list,
            Err(e) => {
                assert!(started.elapsed() < Duration::from_secs(20), "{e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert_eq!(after, before, "the crash changed nothing in the group");

    let pid = g.plugin_pid().await.unwrap();
    g.shutdown().await.unwrap();
    assert!(gone_within(pid, Duration::from_secs(5)));
}
