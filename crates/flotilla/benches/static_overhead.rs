//! What a job costs on a `static` pool over what it costs on this host's own shell isolation
//! (the embedded default, the `local` provider): `flotilla exec` of a pipeline of trivial
//! jobs, on each, side by side.
//!
//! ```text
//! cargo bench -p flotilla --bench static_overhead -- [ROUNDS]
//! ```
//!
//! The pool is one host on this machine: a container of the offline instance image whose sshd
//! is published on 127.0.0.1, reached over SSH with shell isolation, two slots (as many as the
//! embedded default has on this 2-core machine). Each round runs a 1-job and a 9-job pipeline
//! on both; the cost of a job is the slope, (median 9-job time − median 1-job time) / 8, so
//! that what a run pays once (starting the fleet, lending the host, the first SSH connection)
//! is left out, and the overhead is the difference of the slopes. Needs Docker; prints a notice
//! and measures nothing without it.

use flotilla_ssh_machine::GroupKey;
use flotilla_testkit::infra::{Infra, available};
use flotilla_testkit::ssh_hosts::SshHosts;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SIZES: [usize; 2] = [1, 9];

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Bench")
        .env("GIT_AUTHOR_EMAIL", "bench@flotilla.invalid")
        .env("GIT_COMMITTER_NAME", "Bench")
        .env("GIT_COMMITTER_EMAIL", "bench@flotilla.invalid")
        .stdout(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(ok, "git {args:?} failed");
}

/// A committed project whose pipeline has `jobs` jobs running `true`.
fn project(root: &Path, jobs: usize, config: &str) -> std::path::PathBuf {
    let dir = root.join(format!("p{jobs}"));
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "-b", "main"]);
    let mut yaml = String::from("stages: [test]\n");
    for j in 0..jobs {
        yaml.push_str(&format!("job{j}:\n  stage: test\n  script: [\"true\"]\n"));
    }
    std::fs::write(dir.join(".gitlab-ci.yml"), yaml).unwrap();
    std::fs::write(dir.join("static.toml"), config).unwrap();
    git(&dir, &["add", "-A"]);
    git(&dir, &["commit", "-q", "-m", "bench"]);
    dir
}

/// Runs `flotilla exec [--config static.toml]` in `dir`; its wall time.
fn exec(dir: &Path, on_pool: bool, jobs: usize) -> Duration {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flotilla"));
    cmd.arg("exec").current_dir(dir).env_remove("RUST_LOG");
    if on_pool {
        cmd.args(["--config", "static.toml"]);
    }
    let start = Instant::now();
    let out = cmd.output().expect("flotilla exec");
    let took = start.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Summary rows whose STATUS cell is `passed`.
    let passed = stdout
        .lines()
        .filter(|l| l.split("  ").map(str::trim).any(|c| c == "passed"))
        .count();
    assert!(
        out.status.success() && passed == jobs,
        "exec failed ({passed}/{jobs} passed):\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if !available(Infra::Docker) {
        eprintln!("static_overhead: no Docker engine; nothing measured");
        return;
    }
    let rounds: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(5);
    let root = tempfile::tempdir().unwrap();
    let key = GroupKey::generate("flotilla/bench").unwrap();
    let key_file = root.path().join("key");
    std::fs::write(&key_file, key.private_openssh.expose()).unwrap();
    let hosts = SshHosts::start("bench-static", 1, &key.public_openssh, false);
    let config = format!(
        r#"concurrent = 2
[[runners]]
  name = "bench-static"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "static"
    isolation = "shell"
    capacity_per_instance = 2
    max_instances = 1
    [runners.autoscaler.connector_config]
      username = "root"
      key_path = "{}"
    [runners.autoscaler.plugin_config]
      [[runners.autoscaler.plugin_config.hosts]]
        name = "bench-host"
        address = "127.0.0.1"
        port = {}
"#,
        key_file.display(),
        hosts.hosts[0].port
    );
    let dirs: Vec<_> = SIZES
        .iter()
        .map(|&n| project(root.path(), n, &config))
        .collect();
    // [on_pool][size] -> times
    let mut times = vec![vec![Vec::new(); SIZES.len()]; 2];
    for round in 0..rounds {
        for k in 0..4 {
            // Rotate the order so neither side always runs first.
            let (pool, size) = [(0, 0), (1, 0), (0, 1), (1, 1)][(k + round) % 4];
            let t = exec(&dirs[size], pool == 1, SIZES[size]);
            times[pool][size].push(t);
        }
    }
    let mut per_job = [0.0f64; 2];
    for (pool, name) in [
        "local (this host, shell)",
        "static pool (1 host over SSH, shell)",
    ]
    .iter()
    .enumerate()
    {
        let small = median(&mut times[pool][0]);
        let large = median(&mut times[pool][1]);
        per_job[pool] = (large.as_secs_f64() - small.as_secs_f64()) / (SIZES[1] - SIZES[0]) as f64;
        println!(
            "{name:<40} 1 job {:>7.1} ms   9 jobs {:>7.1} ms   per job {:>6.1} ms",
            small.as_secs_f64() * 1e3,
            large.as_secs_f64() * 1e3,
            per_job[pool] * 1e3
        );
    }
    println!(
        "static pool overhead per job over local shell isolation: {:.1} ms (medians of {rounds} rounds)",
        (per_job[1] - per_job[0]) * 1e3
    );
}
