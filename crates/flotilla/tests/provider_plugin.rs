//! The `plugin` provider in the real binary: `flotilla exec` of `examples/hello` and
//! `flotilla run` against the fake GitLab with the provider in a separate process (the
//! example plugins wrapping this host, reached by the local connector), and the plugin's
//! end when flotilla is killed with SIGKILL.

#![cfg(feature = "plugin")]

use crate::exec_support;
use crate::run_support;

use exec_support::{Project, statuses};
use flotilla_testkit::fake_gitlab::{FakeJobState, JobBuilder};
use flotilla_testkit::infra::{Infra, require};
use run_support::Manager;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The Rust example plugin, built beside the flotilla binary (cargo builds it with the
/// workspace; a run of this crate's tests alone builds it here).
fn rust_plugin() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let bin =
            Path::new(env!("CARGO_BIN_EXE_flotilla")).with_file_name("flotilla-plugin-example");
        let status = std::process::Command::new(env!("CARGO"))
            .args([
                "build",
                "--quiet",
                "-p",
                "flotilla-provider-plugin",
                "--bin",
                "flotilla-plugin-example",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo build");
        assert!(status.success() && bin.exists(), "no {}", bin.display());
        bin
    })
    .clone()
}

fn python_plugin() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../providers/plugin/python/example_plugin.py")
}

/// A runner table whose provider is `plugin` run from `command`, serving this host.
fn plugin_runner(name: &str, executor: &str, command: &Path, extra: &str) -> String {
    format!(
        r#"[[runners]]
  name = "{name}"
  executor = "{executor}"
{extra}  [runners.autoscaler]
    plugin = "plugin"
    isolation = "shell"
    capacity_per_instance = 2
    [runners.autoscaler.plugin_config]
      command = "{command}"
      call_timeout = 10
      start_timeout = 30
      [runners.autoscaler.plugin_config.config]
        provider = "local"
"#,
        command = command.display()
    )
}

#[test]
fn hello_example_runs_through_a_plugin_provider() {
    let p = Project::example("hello");
    p.write(
        "config.toml",
        &plugin_runner("plugin-exec", "flotilla", &rust_plugin(), ""),
    );
    let run = p.exec(&["--config", "config.toml"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("build", "passed"), ("test", "passed")])
    );
    assert!(
        run.stderr.contains("plugin plugin, shell isolation"),
        "{run}"
    );
    let build = p.log("build");
    assert!(build.contains("hello from build on Linux"), "{build}");
    assert!(p.log("test").contains("the working tree is here"));
}

/// The processes whose parent is `parent`, with their command names.
fn children(parent: u32) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_string();
        let rest: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        if rest.get(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent) && rest[0] != "Z" {
            found.push((pid, comm));
        }
    }
    found
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().next())
            != Some("Z")
    })
}

async fn run_a_job_then_kill_flotilla(command: &Path, plugin_comm: &str, tag: &str) {
    let token = format!("glrt-plugin-{tag}-token");
    let dir = tempfile::tempdir().unwrap();
    let gl = run_support::fake_gitlab(&[token.as_str()], Duration::from_secs(1)).await;
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "concurrent = 2\ncheck_interval = 1\nshutdown_timeout = 30\n\n[flotilla]\n\
             state_dir = \"{state}\"\n\n{runner}",
            state = dir.path().join("state").display(),
            runner = plugin_runner(
                &format!("plugin-run-{tag}"),
                "instance",
                command,
                &format!("  url = \"{}\"\n  token = \"{token}\"\n", gl.url()),
            ),
        ),
    )
    .unwrap();
    let mut m = Manager::start(&config, &[]);
    let ok = gl.enqueue(
        &token,
        JobBuilder::new("through-plugin")
            .masked_variable("SECRET", "s3cr3t-plugin-value")
            .script(["echo OUT-plugin-$SECRET on $(uname -s)"]),
    );
    let failing = gl.enqueue(&token, JobBuilder::new("fails").script(["exit 3"]));
    assert!(
        gl.wait_finished(&[ok, failing], Duration::from_secs(120))
            .await,
        "jobs did not finish; manager log:\n{}",
        m.log_tail()
    );
    let j = gl.job(ok).unwrap();
    let trace = j.trace_text();
    assert_eq!(j.state, FakeJobState::Success, "{trace}");
    assert!(trace.contains("OUT-plugin-[MASKED] on Linux"), "{trace}");
    assert!(!trace.contains("s3cr3t-plugin-value"), "{trace}");
    let f = gl.job(failing).unwrap();
    assert_eq!(f.state, FakeJobState::Failed);
    assert_eq!(f.final_update.unwrap().exit_code, Some(3));

    // The plugin is flotilla's child; SIGKILL flotilla, and it must go too.
    let plugins: Vec<u32> = children(m.pid())
        .into_iter()
        .filter(|(_, comm)| comm.starts_with(plugin_comm))
        .map(|(pid, _)| pid)
        .collect();
    assert_eq!(
        plugins.len(),
        1,
        "one plugin process under flotilla: {:?}",
        children(m.pid())
    );
    // A plugin started through `with_grandchild` left a process of its own running.
    let grandchild: Option<u32> =
        std::fs::read_to_string(format!("{}.grandchild", command.display()))
            .ok()
            .map(|pid| pid.trim().parse().expect("a pid"));
    if let Some(pid) = grandchild {
        assert!(alive(pid), "the plugin's child {pid} runs before the kill");
    }
    m.kill9().await;
    let started = Instant::now();
    while alive(plugins[0]) || grandchild.is_some_and(alive) {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "plugin {} (or its child {grandchild:?}) outlived flotilla's kill -9",
            plugins[0]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!m.log().contains(&token), "the token leaked");
    assert!(
        !m.log().contains("s3cr3t-plugin-value"),
        "a masked variable leaked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_through_a_rust_plugin_and_no_plugin_outlives_a_killed_flotilla() {
    // comm is cut to 15 characters by the kernel.
    run_a_job_then_kill_flotilla(&rust_plugin(), "flotilla-plugin", "rust").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_run_through_the_python_plugin_and_no_plugin_outlives_a_killed_flotilla() {
    if !require(Infra::PythonGrpc) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let plugin = with_grandchild(dir.path(), &python_plugin());
    run_a_job_then_kill_flotilla(&plugin, "python", "python").await;
}

/// A script that starts a long `sleep` of its own (its pid in `<script>.grandchild`), then
/// becomes `plugin`: a plugin leaving a child behind. The parent-death signal reaches only
/// the plugin; the child must die with flotilla too.
fn with_grandchild(dir: &Path, plugin: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("plugin-with-child");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nsleep 600 </dev/null >/dev/null 2>&1 &\necho $! > \"$0.grandchild\"\nexec {} \"$@\"\n",
            plugin.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}
