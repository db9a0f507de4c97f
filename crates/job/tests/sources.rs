//! get_sources against a real local git repository.

use crate::common;

use common::{Harness, git, job};
use flotilla_fleet::Secret;
use flotilla_job::{Outcome, Variable};
use std::path::Path;

/// A repository with two commits on main; returns (repo dir, first sha, second sha).
fn make_repo(root: &Path) -> (std::path::PathBuf, String, String) {
    let repo = root.join("origin");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    std::fs::write(repo.join("a.txt"), "v1\n").unwrap();
    git(&repo, &["add", "a.txt"]);
    git(&repo, &["commit", "-q", "-m", "first"]);
    let first = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::write(repo.join("a.txt"), "v2\n").unwrap();
    std::fs::write(repo.join("b.txt"), "new\n").unwrap();
    git(&repo, &["add", "a.txt", "b.txt"]);
    git(&repo, &["commit", "-q", "-m", "second"]);
    let second = git(&repo, &["rev-parse", "HEAD"]);
    (repo, first, second)
}

fn git_job(id: i64, url: &str, sha: &str, strategy: &str) -> flotilla_job::JobPayload {
    let mut j = job(id, &["git rev-parse HEAD", "cat a.txt", "ls"]);
    j.git_info.repo_url = Secret::new(url.to_string());
    j.git_info.sha = sha.to_string();
    j.variables = vec![Variable::new("GIT_STRATEGY", strategy)];
    j
}

#[tokio::test]
async fn clone_fetch_and_none_check_out_exact_commits() {
    let h = Harness::new();
    let (repo, first, second) = make_repo(h.root.path());
    let url = repo.to_str().unwrap();
    let project = h.project("g");

    // clone: the first commit, although main is at the second.
    let (r, trace) = h.run("g", &git_job(1, url, &first, "clone")).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(trace.contains(&format!("{first}\n")), "{trace}");
    assert!(trace.contains(&format!(
        "Checking out {} as detached HEAD (ref is main)",
        &first[..8]
    )));
    assert_eq!(
        std::fs::read_to_string(project.join("a.txt")).unwrap(),
        "v1\n"
    );
    assert!(!project.join("b.txt").exists());
    // No credentials were stored in the repository's config.
    let config = std::fs::read_to_string(project.join(".git/config")).unwrap();
    assert!(!config.contains("helper"), "{config}");

    // fetch: reuses the repository, moves to the second commit, cleans untracked files.
    std::fs::write(project.join("stray.txt"), "left over\n").unwrap();
    let (r, trace) = h.run("g", &git_job(2, url, &second, "fetch")).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(
        trace.contains("Reinitialized existing Git repository"),
        "{trace}"
    );
    assert!(trace.contains(&format!("{second}\n")), "{trace}");
    assert_eq!(
        std::fs::read_to_string(project.join("a.txt")).unwrap(),
        "v2\n"
    );
    assert!(
        !project.join("stray.txt").exists(),
        "git clean -ffdx removed it"
    );

    // none: the directory is left exactly as it is.
    std::fs::write(project.join("a.txt"), "local edit\n").unwrap();
    let (r, trace) = h.run("g", &git_job(3, url, &first, "none")).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(trace.contains("Skipping Git repository setup"));
    assert!(trace.contains("local edit\n"), "{trace}");

    // empty: an empty directory.
    let mut j = git_job(4, url, &first, "empty");
    j.steps[0].script = vec!["ls -A".into()];
    let (r, trace) = h.run("g", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(std::fs::read_dir(&project).unwrap().next().is_none());
}

#[tokio::test]
async fn shallow_fetch_over_a_file_url() {
    let h = Harness::new();
    let (repo, _first, second) = make_repo(h.root.path());
    let url = format!("file://{}", repo.display());
    let mut j = git_job(5, &url, &second, "clone");
    j.variables.push(Variable::new("GIT_DEPTH", "1"));
    j.steps[0].script = vec!["git rev-list --count HEAD".into(), "cat a.txt".into()];
    let (r, trace) = h.run("s", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(trace.contains("Fetching changes with git depth set to 1..."));
    assert!(trace.contains("\n1\n"), "only one commit fetched: {trace}");
    assert!(trace.contains("v2\n"));
}

#[tokio::test]
async fn a_missing_commit_fails_get_sources() {
    let h = Harness::new();
    let (repo, _, _) = make_repo(h.root.path());
    let j = git_job(
        6,
        repo.to_str().unwrap(),
        "1111111111111111111111111111111111111111",
        "clone",
    );
    let (r, trace) = h.run("m", &j).await;
    assert!(
        matches!(
            r.outcome,
            Outcome::Failed {
                reason: flotilla_job::FailureReason::ScriptFailure,
                ..
            }
        ),
        "{trace}"
    );
    assert!(trace.contains("getting the sources failed"), "{trace}");
    assert!(
        !trace.contains("$ git rev-parse HEAD"),
        "the script must not run: {trace}"
    );
}

/// An archive in the local store under `id` holding `files` (`name`, `content`).
fn store_archive(h: &Harness, id: i64, files: &[(&str, &str)]) -> u64 {
    let path = h.artifacts.archive_path(id, "archive");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
    for (name, content) in files {
        zip.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        std::io::Write::write_all(&mut zip, content.as_bytes()).unwrap();
    }
    zip.finish().unwrap();
    std::fs::metadata(&path).unwrap().len()
}

fn local_job(id: i64, size: u64, post_hook: &str) -> flotilla_job::JobPayload {
    use flotilla_job::model::{
        ArtifactsFile, Dependency, HOOK_POST_GET_SOURCES, HOOK_PRE_GET_SOURCES, Hook, LocalSources,
    };
    let mut j = job(id, &["cat from-the-archive.txt", "test ! -e stale.txt"]);
    // A strategy that would fetch from a remote: the local sources replace it.
    j.variables = vec![Variable::new("GIT_STRATEGY", "fetch")];
    j.hooks = vec![
        Hook {
            name: HOOK_PRE_GET_SOURCES.into(),
            script: vec!["echo pre-hook-$((1+1))".into()],
        },
        Hook {
            name: HOOK_POST_GET_SOURCES.into(),
            script: vec![post_hook.into()],
        },
    ];
    j.local_sources = Some(LocalSources {
        archive: Some(Dependency {
            id: -3,
            name: "sources".into(),
            token: Secret::new(String::new()),
            artifacts_file: Some(ArtifactsFile {
                filename: "sources.zip".into(),
                size,
            }),
        }),
        notices: vec!["the local notice".into()],
    });
    j
}

/// A local run's sources (`LocalSources`): the build directory is emptied and the archive
/// extracted instead of a fetch; the pre hook runs before, the post hook after the extraction
/// and in the project directory, as `writeGetSourcesScript` orders them.
#[tokio::test]
async fn local_sources_replace_the_fetch_between_the_hooks() {
    let h = Harness::new();
    let size = store_archive(&h, -3, &[("from-the-archive.txt", "archived content\n")]);
    let project = h.project("l");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("stale.txt"), "left by an earlier job\n").unwrap();

    let (r, trace) = h
        .run(
            "l",
            &local_job(1, size, "echo post-hook-sees-$(cat from-the-archive.txt)"),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    let pre = trace.find("\npre-hook-2\n").expect(&trace);
    let notice = trace.find("the local notice").expect(&trace);
    let post = trace
        .find("\npost-hook-sees-archived content\n")
        .expect(&trace);
    let script = trace.find("\narchived content\n").expect(&trace);
    assert!(pre < notice && notice < post && post < script, "{trace}");
    assert!(!trace.contains("Fetching changes"), "{trace}");

    // A failing post hook fails the sources stage, and the script never runs.
    let (r, trace) = h.run("l", &local_job(2, size, "exit 4")).await;
    assert!(matches!(r.outcome, Outcome::Failed { .. }), "{trace}");
    assert!(
        trace.contains("getting the sources failed with exit code 4"),
        "{trace}"
    );
    assert!(!trace.contains("\narchived content\n"), "{trace}");
}

/// The runner's `pre_get_sources_script` runs before the job's own pre hook and its
/// `post_get_sources_script` after the job's post hook, as GitLab Runner orders them
/// (`writeGetSourcesScript`).
#[tokio::test]
async fn the_runners_get_sources_scripts_frame_the_jobs_hooks() {
    let h = Harness::new();
    let size = store_archive(&h, -3, &[("from-the-archive.txt", "archived content\n")]);
    let options = flotilla_job::RunOptions {
        pre_get_sources_script: Some("echo runner-pre".into()),
        post_get_sources_script: Some("echo runner-post".into()),
        ..flotilla_job::RunOptions::default()
    };
    let (r, trace) = h
        .run_with(
            "rs",
            &local_job(1, size, "echo job-post"),
            &flotilla_job::JobCancel::new(),
            options,
        )
        .await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    let at = |s: &str| {
        trace
            .find(s)
            .unwrap_or_else(|| panic!("{s} missing: {trace}"))
    };
    assert!(at("\nrunner-pre\n") < at("\npre-hook-2\n"), "{trace}");
    assert!(at("\npre-hook-2\n") < at("\njob-post\n"), "{trace}");
    assert!(at("\njob-post\n") < at("\nrunner-post\n"), "{trace}");
}
