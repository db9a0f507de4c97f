//! Round trip of `true` on a warm flotilla SSH connection, side by side with the OpenSSH
//! client on a warm ControlMaster connection to the same instance; and the time from
//! `increase(1)` to an instance that answers SSH.
//!
//! `cargo bench -p flotilla-connect --bench ssh_roundtrip` (needs Docker and the offline
//! instance image; skips with a message otherwise).

#[path = "../tests/common/mod.rs"]
mod common;

use flotilla_connect::ssh::SshConnector;
use flotilla_connect::{Connector, ConnectorExt};
use flotilla_fleet::{InstanceGroup, Settings, State};
use flotilla_provider_docker::{DockerGroup, DockerSettings, GROUP_LABEL};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const N: usize = 200;
const STARTS: usize = 5;

fn stats(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let p50 = samples[samples.len() / 2];
    let p90 = samples[samples.len() * 9 / 10];
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!(
        "{name:<44} n={:<4} p50={:>9.3?} mean={:>9.3?} p90={:>9.3?} min={:>9.3?}",
        samples.len(),
        p50,
        mean,
        p90,
        samples[0]
    );
    p50
}

fn openssh(args: &[String]) -> std::process::ExitStatus {
    Command::new("ssh")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("the OpenSSH client (ssh) must be installed")
}

async fn round_trips() {
    let f = common::fleet("bench-rt", 1, false).await;
    let info = f.info(0).await;
    let (host, port) = flotilla_connect::ssh::dial_target(info.dial_addr(), 22);

    // flotilla: one warm connection.
    let c = SshConnector::new(info.clone());
    assert!(c.output("true").await.unwrap().status.success());

    // OpenSSH: the same instance and key, a warm ControlMaster.
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, info.config.key.as_ref().unwrap().expose()).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let control = dir.path().join("cm");
    let base: Vec<String> = [
        "-o",
        "ControlMaster=auto",
        "-o",
        &format!("ControlPath={}", control.display()),
        "-o",
        "ControlPersist=60",
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
        "-i",
        key.to_str().unwrap(),
        "-p",
        &port.to_string(),
        &format!("root@{host}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut cmd = base.clone();
    cmd.push("true".into());
    assert!(
        openssh(&cmd).success(),
        "OpenSSH could not reach the instance"
    );

    // Interleaved, so both see the same machine conditions.
    let mut ours = Vec::with_capacity(N);
    let mut theirs = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        let out = c.output("true").await.unwrap();
        ours.push(t.elapsed());
        assert!(out.status.success());

        let t = Instant::now();
        let st = tokio::task::block_in_place(|| openssh(&cmd));
        theirs.push(t.elapsed());
        assert!(st.success());
    }
    println!("\nround trip of `true` on a warm connection to the same instance:");
    let a = stats("flotilla (russh, one connection)", ours);
    let b = stats("OpenSSH client (ControlMaster, warm)", theirs);
    println!(
        "ratio OpenSSH p50 / flotilla p50 = {:.2}x ({})",
        b.as_secs_f64() / a.as_secs_f64(),
        if a <= b {
            "flotilla is at least as fast"
        } else {
            "flotilla is SLOWER"
        }
    );
    assert_eq!(c.connections_opened(), 1);

    let mut exit = base;
    exit.splice(0..0, ["-O".to_string(), "exit".to_string()]);
    openssh(&exit);
}

async fn startup() {
    let name = format!("b{}-startup", std::process::id());
    let _cleanup = common::Cleanup::new(format!("{GROUP_LABEL}={name}"));
    let group = Arc::new(
        DockerGroup::new(DockerSettings::new(
            &name,
            flotilla_testkit::images::instance_image(),
        ))
        .unwrap(),
    );
    group.init(&Settings::default()).await.unwrap();
    let mut to_running = Vec::new();
    let mut to_ssh = Vec::new();
    for _ in 0..STARTS {
        let before: Vec<String> = group
            .update()
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect();
        let t = Instant::now();
        assert_eq!(group.increase(1).await.unwrap(), 1);
        let id = loop {
            let listing = group.update().await.unwrap();
            if let Some(s) = listing
                .iter()
                .find(|s| !before.contains(&s.id) && s.state == State::Running)
            {
                break s.id.clone();
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "no instance came up"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        to_running.push(t.elapsed());
        let c = SshConnector::new(group.connect_info(&id).await.unwrap());
        assert!(c.output("true").await.unwrap().status.success());
        to_ssh.push(t.elapsed());
        c.close().await;
        group.decrease(&[id]).await.unwrap();
    }
    println!("\ntime from increase(1) to an instance:");
    stats("reported running by update (sshd banner seen)", to_running);
    stats("first `true` over SSH succeeded", to_ssh);
}

fn main() {
    if !flotilla_testkit::infra::available(flotilla_testkit::infra::Infra::Docker) {
        println!("ssh_roundtrip: skipped, no Docker engine here");
        return;
    }
    if Command::new("ssh").arg("-V").output().is_err() {
        println!("ssh_roundtrip: skipped, no OpenSSH client here");
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        round_trips().await;
        startup().await;
    });
}
