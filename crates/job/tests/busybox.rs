//! A minimal instance: nothing but busybox (ash, tar, find...) on the PATH. Job images for
//! docker isolation may have no bash and no GNU tools.

use crate::common;

use common::{Harness, job};
use flotilla_fleet::Secret;
use flotilla_job::model::{Artifact, ArtifactsFile, Cache, CachePolicy, Dependency, When};
use flotilla_job::{JobCancel, LocalEnvironment, Outcome, RunOptions, Variable};
use std::path::{Path, PathBuf};

fn busybox() -> Option<PathBuf> {
    ["/usr/bin/busybox", "/bin/busybox"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// A directory holding busybox applets only.
fn busybox_bin(root: &Path, busybox: &Path) -> PathBuf {
    let bin = root.join("bb-bin");
    std::fs::create_dir_all(&bin).unwrap();
    for applet in [
        "sh",
        "tar",
        "find",
        "mkdir",
        "chmod",
        "rm",
        "cat",
        "ls",
        "sha256sum",
        "head",
        "ln",
        "readlink",
        "test",
        "echo",
        "printf",
        "sleep",
        "stat",
        "dirname",
    ] {
        std::os::unix::fs::symlink(busybox, bin.join(applet)).unwrap();
    }
    bin
}

fn env(h: &Harness, bin: &Path, name: &str) -> LocalEnvironment {
    LocalEnvironment::new(h.builds(), h.project(name))
        .with_shell(vec![bin.join("sh").to_string_lossy().into_owned()])
        .with_env("PATH", bin.to_string_lossy())
}

#[tokio::test]
async fn jobs_scripts_artifacts_and_caches_work_with_busybox_only() {
    let Some(bb) = busybox() else {
        eprintln!("!!!!!!!! SKIPPED: busybox is not installed here");
        return;
    };
    let h = Harness::new();
    let bin = busybox_bin(h.root.path(), &bb);
    let long = format!("out/{}/{}.txt", "d".repeat(90), "f".repeat(80));

    let mut build = job(
        1,
        &[
            "set -o | grep -q pipefail && echo has-pipefail",
            "false | true || echo pipefail-works",
            "mkdir -p out/sub \"$(dirname \"$LONG\")\"",
            "echo hello > out/a.txt && echo deep > \"$LONG\"",
            "head -c 4096 /dev/urandom > out/sub/blob && sha256sum out/sub/blob",
            "ln -s a.txt out/link",
            "printf '%s|' \"$NASTY\"",
            "cat \"$FILE_VAR\"",
        ],
    );
    build.variables.push(Variable::new("LONG", long.clone()));
    build
        .variables
        .push(Variable::new("NASTY", "it's $x \"q\" \\ ✓\nline2").raw());
    build
        .variables
        .push(Variable::new("FILE_VAR", "from a file\n").file());
    build.artifacts = vec![Artifact {
        paths: vec!["out".into()],
        when: When::OnSuccess,
        ..Default::default()
    }];
    build.cache = vec![Cache {
        key: "bb".into(),
        paths: vec!["out/sub".into()],
        policy: CachePolicy::PullPush,
        ..Default::default()
    }];
    let (r, trace) = h
        .run_in(
            &env(&h, &bin, "build"),
            &build,
            &JobCancel::new(),
            RunOptions::default(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(trace.contains("pipefail-works\n"), "{trace}");
    assert!(trace.contains("it's $x \"q\" \\ ✓\nline2|"), "{trace}");
    assert!(trace.contains("from a file\n"), "{trace}");
    assert!(trace.contains("Created cache bb"), "{trace}");
    let digest = trace
        .lines()
        .find(|l| l.ends_with("out/sub/blob") && !l.contains('$'))
        .unwrap()
        .to_string();

    let mut test = job(
        2,
        &[
            "cat out/a.txt \"$LONG\"",
            "sha256sum out/sub/blob",
            "readlink out/link",
        ],
    );
    test.variables.push(Variable::new("LONG", long));
    test.dependencies = vec![Dependency {
        id: 1,
        name: "build".into(),
        token: Secret::new("dependency-token-1".into()),
        artifacts_file: Some(ArtifactsFile::default()),
    }];
    test.cache = vec![Cache {
        key: "bb".into(),
        paths: vec!["out/sub".into()],
        policy: CachePolicy::Pull,
        ..Default::default()
    }];
    let (r, trace) = h
        .run_in(
            &env(&h, &bin, "test"),
            &test,
            &JobCancel::new(),
            RunOptions::default(),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(trace.contains("Successfully extracted cache bb"), "{trace}");
    assert!(trace.contains("hello\ndeep\n"), "{trace}");
    assert!(trace.contains(&format!("{digest}\n")), "{trace}");
    assert!(trace.contains("a.txt\n"), "{trace}");
}
