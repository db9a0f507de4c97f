//! flotilla's plugin host against the example plugin written with the Rust SDK: the
//! process protocol, the InstanceGroup service, stdio, AutoMTLS, TCP, crash restarts,
//! deadlines, and the plugin's end.

mod support;

use flotilla_fleet::{FleetError, InstanceGroup, State};
use flotilla_provider_plugin::logs::Source;
use serde_json::json;
use std::time::{Duration, Instant};
use support::{alive, gone_within, group, init, rust_plugin, signal, stop};

#[tokio::test]
async fn the_group_is_served_through_the_plugin_and_stopped_at_shutdown() {
    let (g, log) = group(
        rust_plugin(),
        json!({"config": {"provider": "memory", "instances": 3}}),
    );
    let info = init(&g).await;
    assert_eq!(info.id, "memory/runner-1");
    assert_eq!(info.max_size, usize::MAX);
    assert_eq!(info.build_info, "flotilla-plugin-example");

    let list = g.update().await.unwrap();
    assert_eq!(list.len(), 3);
    assert!(list.iter().all(|i| i.state == State::Running));
    assert_eq!(g.increase(2).await.unwrap(), 2);
    assert_eq!(g.update().await.unwrap().len(), 5);
    let done = g
        .decrease(&["m-0".to_string(), "nope".to_string()])
        .await
        .unwrap();
    assert_eq!(done, vec!["m-0".to_string()]);
    assert_eq!(g.update().await.unwrap().len(), 4);

    let ci = g.connect_info("m-1").await.unwrap();
    assert_eq!(ci.id, "m-1");
    assert_eq!(ci.internal_addr, "192.0.2.1:22");
    g.heartbeat("m-1").await.unwrap();
    assert!(
        matches!(g.heartbeat("m-0").await, Err(FleetError::InstanceNotFound(id)) if id == "m-0")
    );
    assert!(
        matches!(g.connect_info("zz").await, Err(FleetError::InstanceNotFound(id)) if id == "zz")
    );

    let pid = g.plugin_pid().await.expect("running");
    // In a process group of its own: a Ctrl-C at flotilla's terminal does not reach it.
    // SAFETY: getpgid of two live processes.
    let (own, theirs) = unsafe { (libc::getpgid(0), libc::getpgid(pid as i32)) };
    assert_eq!(theirs, pid as i32);
    assert_ne!(own, theirs);

    g.shutdown().await.unwrap();
    assert!(
        gone_within(pid, Duration::from_secs(5)),
        "plugin {pid} still runs"
    );
    assert!(
        g.update().await.is_err(),
        "a stopped plugin is not restarted"
    );
    drop(log);
}

#[tokio::test]
async fn grpc_controller_shutdown_ends_an_sdk_plugin_cleanly() {
    use flotilla_plugin_protocol::handshake::{MAGIC_COOKIE_KEY, MAGIC_COOKIE_VALUE};
    let command = flotilla_provider_plugin::process::PluginCommand {
        name: "sdk".into(),
        program: rust_plugin(),
        args: vec![],
        env: vec![],
        cookie: (MAGIC_COOKIE_KEY.into(), MAGIC_COOKIE_VALUE.into()),
        versions: vec![1],
        auto_mtls: false,
        start_timeout: Duration::from_secs(20),
    };
    let plugin = command
        .start(std::sync::Arc::new(support::Captured::default()))
        .await
        .unwrap();
    let pid = plugin.pid();
    // Exit status 0 means GRPCController.Shutdown stopped it; a kill would be a signal.
    assert_eq!(
        plugin.shutdown(Duration::from_secs(5)).await,
        "exit status 0"
    );
    assert!(gone_within(pid, Duration::from_secs(1)));
}

#[tokio::test]
async fn credentials_sent_to_the_plugin_do_not_show_in_the_groups_debug_output() {
    let (g, _log) = group(
        rust_plugin(),
        json!({"env": {"CLOUD_KEY": "env-secret-1"}, "config": {"instances": 1}}),
    );
    let mut settings = flotilla_fleet::Settings::default();
    settings.connector.password = Some(flotilla_fleet::Secret::new("pw-secret-2".into()));
    g.init(&settings).await.unwrap();
    let dbg = format!("{g:?}");
    assert!(dbg.contains("CLOUD_KEY"), "{dbg}");
    assert!(
        !dbg.contains("env-secret-1") && !dbg.contains("pw-secret-2"),
        "{dbg}"
    );
    g.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_plugins_stdout_and_stderr_reach_the_log_through_grpc_stdio() {
    let (g, log) = group(
        rust_plugin(),
        json!({"config": {"provider": "memory", "say": "hello from the plugin"}}),
    );
    init(&g).await;
    log.wait_for(Source::StdioStdout, "stdout: hello from the plugin")
        .await;
    log.wait_for(Source::StdioStderr, "stderr: hello from the plugin")
        .await;
    // Nothing but the handshake line went to the process's own stdout.
    assert!(
        !log.0
            .lock()
            .unwrap()
            .iter()
            .any(|(s, _, _)| *s == Source::Stdout),
        "{:?}",
        log.0.lock().unwrap()
    );
    g.shutdown().await.unwrap();
}

#[tokio::test]
async fn auto_mtls_and_tcp_work_together() {
    let (g, _log) = group(
        rust_plugin(),
        json!({"auto_mtls": true, "args": ["--tcp"], "config": {"instances": 2}}),
    );
    init(&g).await;
    assert_eq!(g.update().await.unwrap().len(), 2);
    g.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_killed_plugin_is_restarted_and_lists_the_same_instances() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("instances.json");
    let (g, _log) = group(
        rust_plugin(),
        json!({"config": {"provider": "memory", "instances": 2, "state_file": state}}),
    );
    init(&g).await;
    g.increase(1).await.unwrap();
    let before = g.update().await.unwrap();
    assert_eq!(before.len(), 3);
    let pid = g.plugin_pid().await.unwrap();

    signal(pid, libc::SIGKILL);
    assert!(gone_within(pid, Duration::from_secs(5)));
    // Calls fail (never hang) until the restarted plugin answers; the listing it gives is
    // the same: nothing was created or deleted by the crash.
    let started = Instant::now();
    let after = loop {
        match g.update().await {
            Ok(list) => break list,
            Err(e) => {
                assert!(started.elapsed() < Duration::from_secs(10), "{e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    assert_eq!(after, before);
    assert_eq!(g.restarts().await, 1);
    let new_pid = g.plugin_pid().await.unwrap();
    assert_ne!(new_pid, pid);
    g.shutdown().await.unwrap();
    assert!(gone_within(new_pid, Duration::from_secs(5)));
}

#[tokio::test]
async fn a_plugin_that_keeps_dying_is_restarted_with_backoff() {
    let (g, _log) = group(
        rust_plugin(),
        json!({"restart_backoff": 0.4, "restart_backoff_max": 5, "config": {"instances": 1}}),
    );
    init(&g).await;
    for round in 0..3 {
        let pid = g.plugin_pid().await.unwrap();
        signal(pid, libc::SIGKILL);
        assert!(gone_within(pid, Duration::from_secs(5)));
        let started = Instant::now();
        while g.update().await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let took = started.elapsed();
        // The first restart is immediate; the next ones wait 0.4 s, then 0.8 s.
        match round {
            0 => assert!(took < Duration::from_millis(400), "{took:?}"),
            1 => assert!(took >= Duration::from_millis(400), "{took:?}"),
            _ => assert!(took >= Duration::from_millis(800), "{took:?}"),
        }
    }
    assert_eq!(g.restarts().await, 3);
    g.shutdown().await.unwrap();
}

#[tokio::test]
async fn every_call_has_a_deadline_even_when_the_plugin_hangs() {
    let (g, _log) = group(
        rust_plugin(),
        json!({"call_timeout": 0.5, "config": {"instances": 1}}),
    );
    init(&g).await;
    let pid = g.plugin_pid().await.unwrap();
    stop(pid);
    let started = Instant::now();
    let e = g.update().await.unwrap_err();
    let took = started.elapsed();
    signal(pid, libc::SIGCONT);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(e.to_string().contains("did not answer within"), "{e}");
    // The plugin is alive and answers again.
    assert_eq!(g.update().await.unwrap().len(), 1);
    g.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_plugin_whose_configuration_is_refused_fails_init_with_its_message() {
    let (g, _log) = group(rust_plugin(), json!({"config": {"provider": "cloud"}}));
    let e = g.init(&Default::default()).await.unwrap_err();
    assert!(
        matches!(&e, FleetError::Config(m) if m.contains("this example serves")),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_program_that_is_no_plugin_is_refused_with_what_it_said() {
    let (g, _log) = group(
        "/bin/sh".into(),
        json!({"args": ["-c", "echo listening on 1234; sleep 30"]}),
    );
    let e = g.init(&Default::default()).await.unwrap_err().to_string();
    assert!(e.contains("unrecognized remote plugin message"), "{e}");
    let (g, _log) = group(
        "/bin/sh".into(),
        json!({"args": ["-c", "echo cannot read my config >&2; exit 4"]}),
    );
    let e = g.init(&Default::default()).await.unwrap_err().to_string();
    assert!(
        e.contains("exit status 4") && e.contains("cannot read my config"),
        "{e}"
    );
}

#[test]
fn the_sdk_refuses_to_run_without_the_magic_cookie() {
    let out = std::process::Command::new(rust_plugin())
        .env_remove("FLOTILLA_PLUGIN_MAGIC_COOKIE")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("This binary is a plugin"),
        "{out:?}"
    );
}

#[test]
fn the_sdk_exits_when_its_lifeline_closes() {
    // Started without flotilla's PR_SET_PDEATHSIG: only the SDK's own watch can end it.
    let mut child = std::process::Command::new(rust_plugin())
        .env(
            "FLOTILLA_PLUGIN_MAGIC_COOKIE",
            "7c4b1e9a-instance-group-d2f05c83",
        )
        .env("FLOTILLA_PLUGIN_LIFELINE", "stdin")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert!(line.starts_with("1|1|unix|"), "{line}");
    let pid = child.id();
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(pid));
    drop(child.stdin.take());
    let started = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "still running");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(3));
}
