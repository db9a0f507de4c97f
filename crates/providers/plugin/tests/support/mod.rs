//! Shared by the plugin provider's tests: a log that keeps the plugin's lines, and groups
//! over the example plugins.

#![allow(dead_code, unreachable_pub)]

use flotilla_fleet::{InstanceGroup, Settings};
use flotilla_provider_plugin::logs::{Level, PluginLog, Source};
use flotilla_provider_plugin::{PluginGroup, PluginSettings};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The Rust example plugin (`src/bin/flotilla-plugin-example.rs`).
pub fn rust_plugin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_flotilla-plugin-example"))
}

/// The Python example plugin.
pub fn python_plugin() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/example_plugin.py")
}

/// A plugin's lines, kept.
#[derive(Debug, Default)]
pub struct Captured(pub Mutex<Vec<(Source, Level, String)>>);

impl PluginLog for Captured {
    fn line(&self, _plugin: &str, source: Source, level: Level, text: &str) {
        self.0
            .lock()
            .unwrap()
            .push((source, level, text.to_string()));
    }
}

impl Captured {
    /// Waits up to 10 s for a line from `source` containing `needle` (asynchronously: the
    /// tasks reading the plugin run on the test's runtime).
    pub async fn wait_for(&self, source: Source, needle: &str) -> (Level, String) {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some((_, l, t)) = self
                .0
                .lock()
                .unwrap()
                .iter()
                .find(|(s, _, t)| *s == source && t.contains(needle))
            {
                return (*l, t.clone());
            }
            assert!(
                Instant::now() < until,
                "no {source} line with {needle:?}; got {:?}",
                self.0.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A plugin group over `command`, with `plugin_config` fields added to it.
pub fn group(command: PathBuf, extra: serde_json::Value) -> (Arc<PluginGroup>, Arc<Captured>) {
    let mut config = serde_json::json!({
        "command": command,
        "call_timeout": 5,
        "start_timeout": 20,
        "restart_backoff": 0.1,
        "restart_backoff_max": 1,
    });
    if let (Some(c), serde_json::Value::Object(e)) = (config.as_object_mut(), extra) {
        c.extend(e);
    }
    let settings = PluginSettings::from_config(&config).expect("settings");
    let log = Arc::new(Captured::default());
    let group = PluginGroup::new(settings, "runner-1", None).with_log(log.clone());
    (Arc::new(group), log)
}

/// Initialises `group` with default connector hints.
pub async fn init(group: &PluginGroup) -> flotilla_fleet::ProviderInfo {
    group.init(&Settings::default()).await.expect("init")
}

/// Whether process `pid` exists (a zombie counts as gone).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the command name in parentheses.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next());
            state != Some("Z")
        }
        Err(_) => false,
    }
}

/// Stops `pid` with SIGSTOP and waits until every one of its threads is stopped. The signal
/// alone is not enough: one thread takes it and then stops the others, and on a loaded
/// machine another thread can meanwhile still answer a request. A thread's state is the
/// field after its command name in `/proc/<pid>/task/<tid>/stat`, `T` when stopped by a
/// signal (proc(5)).
pub fn stop(pid: u32) {
    signal(pid, libc::SIGSTOP);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let tasks: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(Result::ok)
                    .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
                    .collect()
            })
            .unwrap_or_default();
        let stopped = !tasks.is_empty()
            && tasks.iter().all(|stat| {
                stat.rsplit(')')
                    .next()
                    .and_then(|r| r.split_whitespace().next())
                    == Some("T")
            });
        if stopped {
            return;
        }
        assert!(Instant::now() < until, "{pid} did not stop: {tasks:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits up to `limit` for `pid` to be gone.
pub fn gone_within(pid: u32, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    !alive(pid)
}

/// Sends `signal` to `pid`.
pub fn signal(pid: u32, signal: i32) {
    // SAFETY: kill with a pid and a signal number.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0, "kill {pid}");
}
