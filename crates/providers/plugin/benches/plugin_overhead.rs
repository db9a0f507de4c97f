//! What a provider costs out of process: `update()` of a 1,000-instance group through the
//! example plugin (unix socket, and with AutoMTLS) side by side with the same group in
//! process (the reference), and the time from a plugin's SIGKILL to the first successful
//! call after its restart.
//!
//! `cargo bench -p flotilla-provider-plugin --bench plugin_overhead`
//! Targets (issue 17): `update()` through the plugin ≤ 2 ms p50; crash → first successful
//! call ≤ 1 s.

#[path = "../src/bin/flotilla-plugin-example/memory.rs"]
mod memory;

use flotilla_fleet::{InstanceGroup, ProviderConfig, Settings};
use flotilla_provider_plugin::{PluginGroup, PluginSettings};
use std::sync::Arc;
use std::time::{Duration, Instant};

const INSTANCES: u64 = 1000;
const CALLS: usize = 2000;
const CRASHES: usize = 20;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let p50 = percentile(&samples, 0.5);
    println!(
        "{name:<44} p50 {:>9.3} ms  p95 {:>9.3} ms  p99 {:>9.3} ms  max {:>9.3} ms  (n={})",
        p50.as_secs_f64() * 1e3,
        percentile(&samples, 0.95).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.last().unwrap().as_secs_f64() * 1e3,
        samples.len()
    );
    p50
}

async fn time_updates(group: &dyn InstanceGroup) -> Vec<Duration> {
    for _ in 0..50 {
        assert_eq!(group.update().await.unwrap().len() as u64, INSTANCES);
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let t = Instant::now();
        let list = group.update().await.unwrap();
        samples.push(t.elapsed());
        assert_eq!(list.len() as u64, INSTANCES);
    }
    samples
}

fn plugin_group(extra: serde_json::Value) -> PluginGroup {
    let mut config = serde_json::json!({
        "command": env!("CARGO_BIN_EXE_flotilla-plugin-example"),
        "config": {"provider": "memory", "instances": INSTANCES},
        "restart_backoff": 0,
    });
    if let (Some(c), serde_json::Value::Object(e)) = (config.as_object_mut(), extra) {
        c.extend(e);
    }
    PluginGroup::new(PluginSettings::from_config(&config).unwrap(), "bench", None)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    println!("update() of {INSTANCES} instances, {CALLS} calls each:");
    let plugin_config = serde_json::json!({"instances": INSTANCES});
    let in_process = memory::MemoryGroup::new(&ProviderConfig {
        plugin_config: &plugin_config,
        runner_name: "bench",
        state_dir: None,
    })
    .unwrap();
    in_process.init(&Settings::default()).await.unwrap();
    let reference = report("in process (reference)", time_updates(&in_process).await);

    let plain = plugin_group(serde_json::json!({}));
    plain.init(&Settings::default()).await.unwrap();
    let through = report(
        "through the plugin (unix socket)",
        time_updates(&plain).await,
    );

    let tls = plugin_group(serde_json::json!({"auto_mtls": true}));
    tls.init(&Settings::default()).await.unwrap();
    let through_tls = report(
        "through the plugin (unix socket, AutoMTLS)",
        time_updates(&tls).await,
    );
    tls.shutdown().await.unwrap();
    println!(
        "overhead at p50: {:.3} ms plain, {:.3} ms with AutoMTLS (target: through the plugin \
         <= 2 ms p50)",
        (through.saturating_sub(reference)).as_secs_f64() * 1e3,
        (through_tls.saturating_sub(reference)).as_secs_f64() * 1e3,
    );

    println!("\nSIGKILL of the plugin -> first successful update(), {CRASHES} crashes:");
    let group = Arc::new(plain);
    let mut recoveries = Vec::with_capacity(CRASHES);
    for _ in 0..CRASHES {
        let pid = group.plugin_pid().await.expect("running");
        let t = Instant::now();
        // SAFETY: kill(2) of the plugin this process started.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        loop {
            if group.update().await.is_ok() && group.plugin_pid().await != Some(pid) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        recoveries.push(t.elapsed());
    }
    report("crash -> first successful call", recoveries);
    println!("(target: <= 1 s; restart_backoff 0, so every restart is the first)");
    group.shutdown().await.unwrap();
}
