//! Artifacts and caches through the local stores, with real tar and real files.

use crate::common;

use common::{Harness, has_section, job};
use flotilla_fleet::Secret;
use flotilla_job::model::{Artifact, ArtifactsFile, Cache, CachePolicy, Dependency, When};
use flotilla_job::{CacheKey, FailureReason, JobCancel, Outcome, Variable};
use std::io::{Read, Write};

fn zip_names(path: &std::path::Path) -> Vec<String> {
    let mut z = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    let mut names: Vec<String> = (0..z.len())
        .map(|i| z.by_index(i).unwrap().name().unwrap().to_string())
        .collect();
    names.sort();
    names
}

fn dependency_on(id: i64) -> Dependency {
    Dependency {
        id,
        name: format!("job-{id}"),
        token: Secret::new(format!("dep-token-{id}")),
        artifacts_file: Some(ArtifactsFile {
            filename: "artifacts.zip".into(),
            size: 1,
        }),
    }
}

#[tokio::test]
async fn artifacts_pass_from_one_job_to_the_next() {
    for h in Harness::both() {
        let mut build = job(
            100,
            &[
                "mkdir -p out/sub out/tmp",
                "echo 'hello artifact' > out/a.txt",
                "head -c 65536 /dev/urandom > out/sub/blob.bin",
                "sha256sum out/sub/blob.bin",
                "printf '#!/bin/sh\\necho run\\n' > out/run.sh && chmod 755 out/run.sh",
                "echo object > out/skip.o",
                "echo scratch > out/tmp/scratch.txt",
                "ln -s out/a.txt link",
                "echo 'not an artifact' > other.txt",
                "mkdir -p 'odd name' && echo odd > \"odd name/it's.txt\"",
            ],
        );
        build.artifacts = vec![Artifact {
            name: "build-output".into(),
            paths: vec!["out/".into(), "link".into(), "odd name".into()],
            exclude: vec!["**/*.o".into(), "out/tmp/*".into()],
            when: When::OnSuccess,
            ..Default::default()
        }];
        let (r, trace) = h.run("build", &build).await;
        assert_eq!(r.outcome, Outcome::Success, "{trace}");
        assert!(
            has_section(&trace, "upload_artifacts_on_success"),
            "{trace}"
        );
        let stored = h.artifacts.archive_path(100, "archive");
        assert_eq!(
            zip_names(&stored),
            [
                "link",
                "odd name/it's.txt",
                "out/a.txt",
                "out/run.sh",
                "out/sub/blob.bin"
            ]
        );
        let digest = trace
            .lines()
            .find(|l| l.ends_with("out/sub/blob.bin") && !l.contains('$'))
            .unwrap()
            .to_string();

        let mut test = job(
            101,
            &[
                "cat out/a.txt",
                "sha256sum out/sub/blob.bin",
                "test -x out/run.sh && ./out/run.sh",
                "readlink link",
                "cat \"odd name/it's.txt\"",
                "test ! -e out/skip.o && test ! -e other.txt && echo excluded-ok",
            ],
        );
        test.dependencies = vec![dependency_on(100)];
        let (r, trace) = h.run("test", &test).await;
        assert_eq!(r.outcome, Outcome::Success, "{trace}");
        assert!(
            trace.contains("Downloading artifacts for job-100 (100) succeeded"),
            "{trace}"
        );
        assert!(trace.contains("hello artifact\n"));
        assert!(
            trace.contains(&format!("{digest}\n")),
            "same content: {digest}"
        );
        assert!(trace.contains("run\n"));
        assert!(trace.contains("out/a.txt\n"));
        assert!(trace.contains("odd\n"));
        assert!(trace.contains("excluded-ok\n"), "{trace}");
    }
}

#[tokio::test]
async fn on_failure_artifacts_are_uploaded_only_when_the_job_fails() {
    let h = Harness::new();
    let mut j = job(110, &["echo log > debug.log", "exit 1"]);
    j.artifacts = vec![
        Artifact {
            paths: vec!["debug.log".into()],
            when: When::OnFailure,
            artifact_type: "archive".into(),
            ..Default::default()
        },
        Artifact {
            paths: vec!["*.log".into()],
            when: When::OnSuccess,
            artifact_type: "junit".into(),
            ..Default::default()
        },
    ];
    let (r, trace) = h.run("f", &j).await;
    assert!(!r.outcome.is_success());
    assert!(
        has_section(&trace, "upload_artifacts_on_failure"),
        "{trace}"
    );
    assert_eq!(
        zip_names(&h.artifacts.archive_path(110, "archive")),
        ["debug.log"]
    );
    assert!(!h.artifacts.archive_path(110, "junit").exists());
}

#[tokio::test]
async fn artifact_paths_escaping_the_project_are_refused_and_links_kept_as_links() {
    for h in Harness::both() {
        std::fs::write(h.builds().join("outside.txt"), "secret outside\n").unwrap();
        let mut j = job(
            120,
            &[
                "echo fine > ok.txt",
                "ln -s ../outside.txt escape-link",
                "ln -s /etc/passwd absolute-link",
                "mkdir -p d && ln -s ../../outside.txt d/deep-link",
            ],
        );
        j.artifacts = vec![Artifact {
            paths: vec![
                "ok.txt".into(),
                "../outside.txt".into(),
                "/etc/passwd".into(),
                "escape-link".into(),
                "absolute-link".into(),
                "d".into(),
            ],
            ..Default::default()
        }];
        let (r, trace) = h.run("t", &j).await;
        assert_eq!(r.outcome, Outcome::Success, "{trace}");
        assert!(
            trace.contains("../outside.txt: escapes the project directory through `..`; ignored"),
            "{trace}"
        );
        assert!(
            trace.contains(
                "/etc/passwd: is an absolute path outside the project directory; ignored"
            ),
            "{trace}"
        );
        // Links go in as links wherever they point, as GitLab Runner archives them (`os.Lstat`
        // in `commands/helpers/file_archiver.go`); what they point to does not.
        let archive = h.artifacts.archive_path(120, "archive");
        assert_eq!(
            zip_names(&archive),
            ["absolute-link", "d/deep-link", "escape-link", "ok.txt"]
        );
        let mut z = zip::ZipArchive::new(std::fs::File::open(&archive).unwrap()).unwrap();
        for (name, target) in [
            ("escape-link", "../outside.txt"),
            ("absolute-link", "/etc/passwd"),
            ("d/deep-link", "../../outside.txt"),
        ] {
            let mut entry = z.by_name(name).unwrap();
            assert!(entry.is_symlink(), "{name}");
            let mut read = String::new();
            std::io::Read::read_to_string(&mut entry, &mut read).unwrap();
            assert_eq!(read, target, "{name}");
        }
        assert!(!trace.contains("not archived"), "{trace}");
    }
}

/// A zip entry to write: (name, content or link target, is a symbolic link).
type ZipEntry<'a> = (&'a str, &'a str, bool);

/// Writes a zip with the given entries.
fn write_zip(path: &std::path::Path, entries: &[ZipEntry]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut z = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    let opts = zip::write::SimpleFileOptions::default();
    for (name, content, link) in entries {
        if *link {
            z.add_symlink(*name, *content, opts).unwrap();
        } else {
            z.start_file(*name, opts).unwrap();
            z.write_all(content.as_bytes()).unwrap();
        }
    }
    z.finish().unwrap();
}

#[tokio::test]
async fn zip_slip_archives_are_refused_before_anything_is_extracted() {
    let cases: &[(&str, &[ZipEntry], &str)] = &[
        (
            "parent",
            &[("good.txt", "good", false), ("../evil.txt", "evil", false)],
            "\"../evil.txt\" escapes the project directory",
        ),
        (
            "absolute",
            &[
                ("good.txt", "good", false),
                ("/tmp/flotilla-evil.txt", "evil", false),
            ],
            "is an absolute path",
        ),
        (
            "an entry under the archive's own link",
            &[
                ("good.txt", "good", false),
                ("link", "/tmp", true),
                ("link/flotilla-evil.txt", "evil", false),
            ],
            "lies under the archive's own symbolic link \"link\"",
        ),
    ];
    for (i, (what, entries, message)) in cases.iter().enumerate() {
        for h in Harness::both() {
            let dep_id = 200 + i as i64;
            write_zip(&h.artifacts.archive_path(dep_id, "archive"), entries);
            let mut j = job(300 + i as i64, &["echo script ran"]);
            j.dependencies = vec![dependency_on(dep_id)];
            let (r, trace) = h.run("z", &j).await;
            assert_eq!(
                r.outcome,
                Outcome::Failed {
                    reason: FailureReason::ScriptFailure,
                    exit_code: None
                },
                "{what}: {trace}"
            );
            assert!(trace.contains(message), "{what}: {trace}");
            assert!(trace.contains("the archive is refused"), "{what}: {trace}");
            assert!(!trace.contains("script ran\n"), "{what}: {trace}");
            assert!(
                !h.project("z").join("good.txt").exists(),
                "{what}: nothing extracted"
            );
            assert!(!h.builds().join("evil.txt").exists());
        }
    }
    assert!(!std::path::Path::new("/tmp/flotilla-evil.txt").exists());
}

/// Runs a job needing the dependencies `ids` in the environment `env`.
async fn run_with_dependencies(h: &Harness, env: &str, id: i64, ids: &[i64]) -> (Outcome, String) {
    let mut j = job(id, &["echo script ran"]);
    j.dependencies = ids.iter().map(|d| dependency_on(*d)).collect();
    let (r, trace) = h.run(env, &j).await;
    (r.outcome, trace)
}

#[tokio::test]
async fn links_are_extracted_as_links_and_nothing_is_written_through_one() {
    for h in Harness::both() {
        let outside = h.root.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let outside_s = outside.to_str().unwrap();
        // A link pointing out is kept as a link, as GitLab Runner keeps it (a virtualenv's
        // interpreter): alone it writes nothing outside.
        write_zip(
            &h.artifacts.archive_path(500, "archive"),
            &[
                ("ok.txt", "ok", false),
                ("venv/bin/python", "/usr/bin/python3", true),
                ("esc", outside_s, true),
            ],
        );
        // A later dependency's file through that link.
        write_zip(
            &h.artifacts.archive_path(501, "archive"),
            &[("esc/evil.txt", "evil", false)],
        );
        // A chain where every link, read alone, stays inside: a/b -> .. is the project, then
        // a/b/c -> .. is the project's parent once a/b is followed on disk.
        write_zip(
            &h.artifacts.archive_path(502, "archive"),
            &[("a/b", "..", true)],
        );
        write_zip(
            &h.artifacts.archive_path(503, "archive"),
            &[("a/b/c", "..", true)],
        );
        write_zip(
            &h.artifacts.archive_path(504, "archive"),
            &[("a/b/c/evil.txt", "evil", false)],
        );

        let (outcome, trace) = run_with_dependencies(&h, "l", 510, &[500]).await;
        assert!(outcome.is_success(), "{trace}");
        let project = h.project("l");
        assert_eq!(
            std::fs::read_to_string(project.join("ok.txt")).unwrap(),
            "ok"
        );
        assert_eq!(
            std::fs::read_link(project.join("venv/bin/python")).unwrap(),
            std::path::Path::new("/usr/bin/python3")
        );
        assert_eq!(std::fs::read_link(project.join("esc")).unwrap(), outside);

        let (outcome, trace) = run_with_dependencies(&h, "l", 511, &[500, 501]).await;
        assert!(!outcome.is_success(), "{trace}");
        assert!(
            trace.contains("\"esc\" is a symbolic link on disk leading out of the destination"),
            "{trace}"
        );
        assert!(!trace.contains("script ran\n"), "{trace}");
        assert!(
            !outside.join("evil.txt").exists(),
            "written through the link"
        );

        let (outcome, trace) = run_with_dependencies(&h, "c", 512, &[502, 503, 504]).await;
        assert!(!outcome.is_success(), "{trace}");
        assert!(
            trace.contains("\"a/b/c\" is a symbolic link on disk leading out"),
            "{trace}"
        );
        assert!(
            !h.builds().join("evil.txt").exists(),
            "written through the chain"
        );
    }
}

#[tokio::test]
async fn a_project_directory_a_job_replaced_by_a_link_is_never_extracted_into() {
    for h in Harness::both() {
        let outside = h.root.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        write_zip(
            &h.artifacts.archive_path(520, "archive"),
            &[("evil.txt", "evil", false)],
        );
        // The first job leaves its project directory as a link to somewhere else, as a job at
        // the docker level can in the directory the instance's helper later extracts into.
        let swap = format!("cd .. && rm -rf p && ln -s {} p", outside.to_str().unwrap());
        let (r, trace) = h.run("p", &job(521, &[&swap])).await;
        assert!(r.outcome.is_success(), "{trace}");
        assert!(h.project("p").is_symlink());

        let (outcome, trace) = run_with_dependencies(&h, "p", 522, &[520]).await;
        assert!(!outcome.is_success(), "{trace}");
        assert!(
            trace.contains("is a symbolic link on disk leading out of the destination"),
            "{trace}"
        );
        assert!(
            !outside.join("evil.txt").exists(),
            "extracted through the link"
        );
    }
}

#[tokio::test]
async fn a_missing_dependency_archive_fails_the_job() {
    let h = Harness::new();
    let mut j = job(400, &["echo script ran"]);
    j.dependencies = vec![dependency_on(399)];
    let (r, trace) = h.run("m", &j).await;
    assert!(!r.outcome.is_success());
    assert!(
        trace.contains("no artifacts found for job-399 (399)"),
        "{trace}"
    );
    // A dependency without artifacts is skipped.
    let mut j = job(401, &["echo script ran"]);
    j.dependencies = vec![Dependency {
        artifacts_file: None,
        ..dependency_on(399)
    }];
    let (r, _) = h.run("m2", &j).await;
    assert!(r.outcome.is_success());
}

fn cache(key: &str, policy: CachePolicy, fallback: &[&str]) -> Cache {
    Cache {
        key: key.into(),
        policy,
        paths: vec!["vendor/".into()],
        when: When::OnSuccess,
        fallback_keys: fallback.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_cache_is_shared_between_jobs_with_a_fallback_key() {
    for h in Harness::both() {
        // Job A: pull-push on main; nothing to restore yet, saves vendor/.
        let mut a = job(
            500,
            &[
                "test ! -e vendor/lib.txt",
                "mkdir -p vendor && echo cached-v1 > vendor/lib.txt",
            ],
        );
        a.cache = vec![cache(
            "deps-$CI_COMMIT_REF_SLUG",
            CachePolicy::PullPush,
            &[],
        )];
        let (r, trace) = h.run("a", &a).await;
        assert_eq!(r.outcome, Outcome::Success, "{trace}");
        assert!(trace.contains("No cache found for deps-main"), "{trace}");
        assert!(trace.contains("Created cache deps-main"), "{trace}");
        let key = |k: &str| CacheKey {
            project: "group/project".into(),
            project_id: 1,
            key: k.into(),
        };
        assert!(h.cache.archive_path(&key("deps-main")).exists());

        // Job B: another branch, another directory, pull only; falls back to deps-main.
        let mut b = job(
            501,
            &["cat vendor/lib.txt", "echo changed > vendor/lib.txt"],
        );
        b.git_info.git_ref = "feature/x".into();
        b.cache = vec![cache(
            "deps-$CI_COMMIT_REF_SLUG",
            CachePolicy::Pull,
            &["deps-main"],
        )];
        let (r, trace) = h.run("b", &b).await;
        assert_eq!(r.outcome, Outcome::Success, "{trace}");
        assert!(
            trace.contains("No cache found for deps-feature-x"),
            "{trace}"
        );
        assert!(
            trace.contains("Successfully extracted cache deps-main"),
            "{trace}"
        );
        assert!(trace.contains("cached-v1\n"), "{trace}");
        assert!(
            !has_section(&trace, "archive_cache"),
            "pull never saves: {trace}"
        );
        assert!(!h.cache.archive_path(&key("deps-feature-x")).exists());

        // Job C: push only, fails: the default `when: on_success` does not save.
        let mut c = job(
            502,
            &["mkdir -p vendor && echo v2 > vendor/lib.txt", "exit 1"],
        );
        c.cache = vec![cache("deps-main", CachePolicy::Push, &[])];
        let (r, trace) = h.run("c", &c).await;
        assert!(!r.outcome.is_success());
        assert!(
            !trace.contains("Checking cache"),
            "push never restores: {trace}"
        );
        let mut content = String::new();
        zip::ZipArchive::new(std::fs::File::open(h.cache.archive_path(&key("deps-main"))).unwrap())
            .unwrap()
            .by_name("vendor/lib.txt")
            .unwrap()
            .read_to_string(&mut content)
            .unwrap();
        assert_eq!(content, "cached-v1\n");

        // ... but `when: always` does, and CACHE_FALLBACK_KEY is honoured on restore.
        let mut d = job(
            503,
            &["cat vendor/lib.txt", "echo v3 > vendor/lib.txt", "exit 1"],
        );
        d.cache = vec![Cache {
            when: When::Always,
            ..cache("other", CachePolicy::PullPush, &[])
        }];
        d.variables
            .push(Variable::new("CACHE_FALLBACK_KEY", "deps-main"));
        let (r, trace) = h.run("d", &d).await;
        assert!(!r.outcome.is_success());
        assert!(trace.contains("cached-v1\n"), "{trace}");
        assert!(has_section(&trace, "archive_cache_on_failure"), "{trace}");
        assert!(h.cache.archive_path(&key("other")).exists());
    }
}

#[tokio::test]
async fn cache_problems_are_warnings_not_failures() {
    let h = Harness::new();
    // A corrupt archive, and a key that is not allowed.
    let bad = h.cache.archive_path(&CacheKey {
        project: "group/project".into(),
        project_id: 1,
        key: "corrupt".into(),
    });
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, "this is not a zip").unwrap();
    let mut j = job(600, &["echo script ran"]);
    j.cache = vec![
        cache("corrupt", CachePolicy::Pull, &[]),
        cache("a/b", CachePolicy::PullPush, &[]),
    ];
    let (r, trace) = h.run("w", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(
        trace.contains("WARNING: extracting cache corrupt"),
        "{trace}"
    );
    assert!(trace.contains("cache key \"a/b\" contains `/`"), "{trace}");
    assert!(trace.contains("script ran\n"));
}

/// `artifacts:reports` travel in their own formats (Rails' `Enums::Ci::JobArtifact`
/// `REPORT_TYPES`): `junit` and `dotenv` as one gzip member per file, `codequality` as the raw
/// file; a raw report matching two files fails the job instead of uploading one of them.
#[tokio::test]
async fn reports_are_uploaded_as_gzip_members_or_a_raw_file() {
    for h in Harness::both() {
        let mut build = job(
            300,
            &[
                "mkdir -p reports",
                "echo '<testsuite a/>' > reports/a.xml",
                "echo '<testsuite b/>' > reports/b.xml",
                "echo 'BUILD_VERSION=1.2.3' > build.env",
                "echo '[]' > gl-code-quality-report.json",
            ],
        );
        let report = |kind: &str, format: &str, name: &str, paths: &[&str]| Artifact {
            name: name.into(),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            when: When::Always,
            artifact_type: kind.into(),
            artifact_format: format.into(),
            ..Default::default()
        };
        build.artifacts = vec![
            report("junit", "gzip", "junit.xml", &["reports/*.xml"]),
            report("dotenv", "gzip", ".env", &["build.env"]),
            report(
                "codequality",
                "raw",
                "gl-code-quality-report.json",
                &["gl-code-quality-report.json"],
            ),
        ];
        let (r, trace) = h.run("reports", &build).await;
        assert_eq!(r.outcome, Outcome::Success, "{trace}");
        let read_gz = |kind: &str| {
            let bytes = std::fs::read(h.artifacts.archive_path(300, kind)).unwrap();
            let mut s = String::new();
            flate2::read::MultiGzDecoder::new(&bytes[..])
                .read_to_string(&mut s)
                .unwrap();
            s
        };
        assert_eq!(read_gz("junit"), "<testsuite a/>\n<testsuite b/>\n");
        assert_eq!(read_gz("dotenv"), "BUILD_VERSION=1.2.3\n");
        assert_eq!(
            std::fs::read(h.artifacts.archive_path(300, "codequality")).unwrap(),
            b"[]\n"
        );

        let mut two = job(301, &["echo 1 > a.json", "echo 2 > b.json"]);
        two.artifacts = vec![report("codequality", "raw", "x.json", &["*.json"])];
        let (r, trace) = h.run("raw-two", &two).await;
        assert!(!r.outcome.is_success(), "{trace}");
        assert!(
            trace.contains("a raw artifact is one file, but 2 matched"),
            "{trace}"
        );
    }
}

/// Where the helper's files are this process's own, artifacts travel without `tar`, `find`
/// or `xargs`: a PATH without them passes them on all the same, while the commands' way
/// fails there (so the job's files really are handled in this process).
#[tokio::test]
async fn helper_file_work_here_needs_no_tar_find_or_xargs() {
    let h = Harness::new();
    let bin = h.root.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["bash", "sh", "mkdir", "rm", "cat", "chmod", "kill"] {
        let found = ["/usr/bin", "/bin"]
            .iter()
            .map(|d| std::path::Path::new(d).join(tool))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("no {tool}"));
        std::os::unix::fs::symlink(found, bin.join(tool)).unwrap();
    }
    let path = bin.to_str().unwrap().to_string();
    let mut build = job(700, &["mkdir -p out", "echo passed-on > out/a.txt"]);
    build.artifacts = vec![Artifact {
        paths: vec!["out/".into()],
        when: When::OnSuccess,
        ..Default::default()
    }];
    let mut test = job(701, &["cat out/a.txt"]);
    test.dependencies = vec![dependency_on(700)];
    for here in [true, false] {
        let env = |name: &str| {
            h.env(name)
                .with_env("PATH", &path)
                .with_helper_files_here(here)
        };
        let (r, trace) = h
            .run_in(&env("b"), &build, &JobCancel::new(), Default::default())
            .await;
        if !here {
            assert!(!r.outcome.is_success(), "tar was found: {trace}");
            continue;
        }
        assert_eq!(r.outcome, Outcome::Success, "{trace}");
        let (r, trace) = h
            .run_in(&env("t"), &test, &JobCancel::new(), Default::default())
            .await;
        assert_eq!(r.outcome, Outcome::Success, "{trace}");
        assert!(trace.contains("passed-on\n"), "{trace}");
    }
}
