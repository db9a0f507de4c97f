//! `.gitlab-ci.yml` written to exhaust the compiler: alias bombs, `!reference` amplified at
//! every level, includes that are each a bomb, nesting 10,000 levels deep, a 50 MB file, a
//! large template copied by thousands of jobs and `parallel` instances. Each is refused with
//! GitLab's kind of message within a bound, memory staying small (issue 31, item 2).
//!
//! Each test runs in its own process under nextest and caps its address space at 2 GiB first,
//! so that a defence put back out fails the test instead of exhausting the machine. The time
//! and peak RSS of each case are printed (`--no-capture` shows them).

use flotilla_ci::{CompileOptions, compile};
use std::path::Path;
use std::time::{Duration, Instant};

/// The address space a case may use.
const ADDRESS_SPACE: u64 = 2 << 30;

/// Peak resident memory of this process, from `/proc/self/status`.
fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib / 1024
}

fn cap_memory() {
    let limit = libc::rlimit {
        rlim_cur: ADDRESS_SPACE,
        rlim_max: ADDRESS_SPACE,
    };
    // SAFETY: setrlimit with a valid pointer to a filled rlimit.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_AS, &limit) };
    assert_eq!(rc, 0, "setrlimit");
}

/// Writes `files` into a new project, compiles it and checks the error holds `expected`.
fn refused(case: &str, files: Vec<(String, String)>, expected: &str) {
    cap_memory();
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let (took, error) = run_on_a_small_stack(dir.path());
    let rss = peak_rss_mib();
    println!("{case}: refused in {took:?}, peak RSS {rss} MiB: {error}");
    assert!(error.contains(expected), "{case}: {error}");
    // Generous against the debug build's speed: the cases took minutes or never ended before.
    assert!(took < Duration::from_secs(10), "{case}: {took:?}");
    assert!(rss < 256, "{case}: peak RSS {rss} MiB");
}

/// Compiles on a thread with a 256 KiB stack: a loader that recursed per nesting level would
/// overflow it.
fn run_on_a_small_stack(dir: &Path) -> (Duration, String) {
    let dir = dir.to_path_buf();
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let start = Instant::now();
            let error = match compile(&CompileOptions::new(&dir)) {
                Ok(p) => format!("compiled with {} jobs", p.jobs.len()),
                Err(e) => e.to_string(),
            };
            (start.elapsed(), error)
        })
        .unwrap()
        .join()
        .unwrap()
}

#[test]
fn a_string_aliased_200_000_times() {
    let big = "x".repeat(1 << 20);
    let mut text = format!("variables:\n  BIG: &big \"{big}\"\nbomb: [");
    for _ in 0..200_000 {
        text.push_str("*big,");
    }
    text.push_str("]\njob:\n  script: echo\n");
    refused(
        "1 MiB string aliased 200,000 times",
        vec![(".gitlab-ci.yml".into(), text)],
        "the parsed YAML is too big",
    );
}

#[test]
fn a_reference_amplified_ten_times_at_nine_levels() {
    let mut text = format!(".l0: [\"{}\"]\n", "y".repeat(100));
    for level in 1..10 {
        let refs = vec![format!("!reference [.l{}]", level - 1); 10].join(", ");
        text.push_str(&format!(".l{level}: [{refs}]\n"));
    }
    text.push_str("job:\n  script: [!reference [.l9]]\n");
    refused(
        "!reference amplified 10^9 times",
        vec![(".gitlab-ci.yml".into(), text)],
        "the configuration expands to more than 64 MiB",
    );
}

#[test]
fn one_hundred_and_fifty_includes_each_a_bomb() {
    let piece = "z".repeat(64 << 10);
    let mut bomb = format!(".piece: &p \"{piece}\"\n.bomb: [");
    for _ in 0..190 {
        bomb.push_str("*p,");
    }
    bomb.push_str("]\n");
    let mut files = vec![];
    let mut main = String::from("include:\n");
    for i in 0..150 {
        main.push_str(&format!("  - local: b{i}.yml\n"));
        files.push((format!("b{i}.yml"), bomb.clone()));
    }
    main.push_str("job:\n  script: echo\n");
    files.push((".gitlab-ci.yml".to_string(), main));
    refused(
        "150 includes, each a 12 MiB alias bomb",
        files,
        "the configuration expands to more than 64 MiB",
    );
}

#[test]
fn nesting_ten_thousand_levels_deep() {
    let text = format!("job:\n  script: echo\nx:\n{}1\n", "- ".repeat(10_000));
    refused(
        "10,000-deep nesting",
        vec![(".gitlab-ci.yml".into(), text)],
        "the YAML nests too deep: more than 100 levels",
    );
    let flow = format!(
        "job:\n  script: echo\nx: {}{}\n",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    refused(
        "10,000-deep flow nesting",
        vec![(".gitlab-ci.yml".into(), flow)],
        // libyaml keeps its state on the heap, so the flow form reaches the same limit.
        "the YAML nests too deep: more than 100 levels",
    );
}

#[test]
fn a_fifty_megabyte_file() {
    let mut text = String::from("job:\n  script: echo\nvariables:\n");
    let mut i = 0u64;
    while text.len() < 50_000_000 {
        text.push_str(&format!("  KEY_{i:08}: value-{i:08}-padding-padding\n"));
        i += 1;
    }
    refused(
        "50 MB file",
        vec![(".gitlab-ci.yml".into(), text)],
        "the parsed YAML is too big",
    );
}

#[test]
fn a_large_template_extended_by_two_thousand_jobs() {
    let mut text = format!(".t:\n  variables:\n    BIG: \"{}\"\n", "t".repeat(1 << 20));
    for i in 0..2_000 {
        text.push_str(&format!("job{i}:\n  extends: .t\n  script: echo\n"));
    }
    refused(
        "1 MiB template extended by 2,000 jobs",
        vec![(".gitlab-ci.yml".into(), text)],
        "the configuration expands to more than 64 MiB",
    );
}

#[test]
fn a_large_default_copied_into_every_parallel_instance() {
    let mut text = format!("default:\n  before_script: [\"{}\"]\n", "d".repeat(1 << 20));
    for i in 0..2_000 {
        text.push_str(&format!("job{i}:\n  parallel: 200\n  script: echo\n"));
    }
    refused(
        "1 MiB default x 2,000 jobs x parallel: 200",
        vec![(".gitlab-ci.yml".into(), text)],
        "the configuration expands to more than 64 MiB",
    );
}
