//! Fuzzing extraction (proptest): sequences of one to three zip archives made of files,
//! directories and symbolic links with names and targets from a hostile alphabet (`..`, `.`,
//! absolute paths, links to links), extracted in turn into one project directory, as a job's
//! dependencies or caches are. Whatever each extraction answers, no file may appear outside
//! the project directory afterwards.
//!
//! `FUZZ_CASES` sets the number of cases (default 256; each extraction runs real `tar`);
//! `FUZZ_SEED` replays a run.

use flotilla_job::LocalEnvironment;
use flotilla_job::archive::extract_zip;
use flotilla_job::trace::trace_channel;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use std::io::Write;
use std::path::{Path, PathBuf};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Clone)]
enum Kind {
    File,
    Dir,
    Link(usize),
}

#[derive(Debug, Clone)]
struct Entry {
    name: Vec<usize>,
    kind: Kind,
}

/// Name components: `..` and `.` among plain ones; few plain names, so that later entries
/// often go through an earlier entry's link.
const PARTS: &[&str] = &["a", "b", "..", "."];

/// Link targets; `@` stands for the directory outside the project.
const TARGETS: &[&str] = &[
    ".", "..", "../..", "../../..", "a", "b/..", "@", "@/x", "a/b",
];

fn entry() -> impl Strategy<Value = Entry> {
    (
        prop::collection::vec(0..PARTS.len(), 1..4),
        prop_oneof![
            3 => Just(Kind::File),
            1 => Just(Kind::Dir),
            3 => (0..TARGETS.len()).prop_map(Kind::Link),
        ],
    )
        .prop_map(|(name, kind)| Entry { name, kind })
}

fn archives() -> impl Strategy<Value = Vec<Vec<Entry>>> {
    prop::collection::vec(prop::collection::vec(entry(), 1..6), 2..5)
}

fn write_zip(path: &Path, entries: &[Entry], outside: &Path) {
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default();
    for e in entries {
        let name: Vec<&str> = e.name.iter().map(|i| PARTS[*i]).collect();
        let name = name.join("/");
        let _ = match &e.kind {
            Kind::File => z
                .start_file(name.as_str(), opts)
                .and_then(|()| z.write_all(b"written").map_err(Into::into)),
            Kind::Dir => z.add_directory(name.as_str(), opts),
            Kind::Link(t) => {
                let target = TARGETS[*t].replace('@', outside.to_str().unwrap());
                z.add_symlink(name.as_str(), target, opts)
            }
        };
    }
    z.finish().unwrap();
}

/// Every file (not directory, not link) under `dir`, links not followed.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(read) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in read.flatten() {
            let meta = std::fs::symlink_metadata(e.path()).unwrap();
            if meta.is_dir() {
                pending.push(e.path());
            } else if meta.is_file() {
                out.push(e.path());
            }
        }
    }
    out
}

/// Runs the archives in turn, once with the helper's file work as commands and once in this
/// process; the files outside the project afterwards, of either.
fn extract_all(archives: &[Vec<Entry>]) -> Vec<PathBuf> {
    let mut escaped = extract_all_in(archives, false);
    escaped.extend(extract_all_in(archives, true));
    escaped
}

fn extract_all_in(archives: &[Vec<Entry>], files_here: bool) -> Vec<PathBuf> {
    let root = tempfile::tempdir().unwrap();
    let builds = root.path().join("builds");
    let project = builds.join("p");
    let outside = root.path().join("outside");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("sentinel"), "untouched").unwrap();
    let env = LocalEnvironment::new(&builds, &project).with_helper_files_here(files_here);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (log, mut reader) = trace_channel(64);
        let drain = tokio::spawn(async move { while reader.recv().await.is_some() {} });
        for (i, entries) in archives.iter().enumerate() {
            let zip = root.path().join(format!("a{i}.zip"));
            write_zip(&zip, entries, &outside);
            let _ = extract_zip(
                &env,
                project.to_str().unwrap(),
                &zip,
                &log,
                &CancellationToken::new(),
            )
            .await;
            std::fs::remove_file(&zip).unwrap();
        }
        drop(log);
        let _ = drain.await;
    });
    let mut escaped: Vec<PathBuf> = files_under(root.path())
        .into_iter()
        .filter(|f| !f.starts_with(&project))
        .filter(|f| *f != outside.join("sentinel"))
        .collect();
    if std::fs::read_to_string(outside.join("sentinel"))
        .ok()
        .as_deref()
        != Some("untouched")
    {
        escaped.push(outside.join("sentinel"));
    }
    escaped
}

#[test]
fn no_sequence_of_archives_writes_outside_the_project() {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand_seed);
    eprintln!("extract fuzz: {cases} cases, FUZZ_SEED={seed}");
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &bytes),
    );
    let result = runner.run(&archives(), |archives| {
        let escaped = extract_all(&archives);
        prop_assert!(
            escaped.is_empty(),
            "written outside the project: {escaped:?} by {archives:?}"
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}\nreplay with FUZZ_SEED={seed}");
    }
}

fn rand_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

/// The chain that wrote outside before the on-disk check, as a fixed case: every link alone
/// stays inside (`a/b -> ..`, then `a/b/b -> ..`, which on disk is the project's `b`, then a
/// file `a/b/b/a`, which is the builds directory's `a`).
#[test]
fn the_chain_of_links_that_escaped_is_held() {
    let chain = vec![
        vec![Entry {
            name: vec![0, 1],
            kind: Kind::Link(1),
        }],
        vec![Entry {
            name: vec![0, 1, 1],
            kind: Kind::Link(1),
        }],
        vec![Entry {
            name: vec![0, 1, 1, 0],
            kind: Kind::File,
        }],
    ];
    assert_eq!(extract_all(&chain), Vec::<PathBuf>::new());
}
