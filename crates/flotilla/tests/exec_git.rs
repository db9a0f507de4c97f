//! `flotilla exec` gives each job the build directory GitLab Runner would: a git repository at
//! the pipeline's commit (`shells/abstract.go`, `writeRefspecFetchCmd` and the checkout after
//! it), honouring `GIT_STRATEGY`, `GIT_DEPTH`, `GIT_CHECKOUT` and the submodule variables, with
//! the working tree's uncommitted changes on top; and `hooks:pre_get_sources_script` runs
//! before the sources are fetched (docs.gitlab.com/ci/yaml/#hooks).

use crate::exec_support;

use exec_support::{Project, statuses};

/// A project with 25 commits, a tag on the 24th, and the pipeline.
fn history(yaml: &str) -> Project {
    let p = Project::with_pipeline(yaml);
    for i in 1..=23 {
        p.write("counter.txt", &format!("{i}\n"));
        p.commit(&format!("commit {i}"));
    }
    p.git(&["tag", "-a", "v1.0", "-m", "release 1.0"]);
    p.write("counter.txt", "24\n");
    p.commit("commit 24");
    p
}

#[test]
fn a_job_gets_the_commit_as_a_repository_with_the_working_tree_on_top() {
    let p = history(
        r#"
inspect:
  script:
    - test "$(git rev-parse HEAD)" = "$CI_COMMIT_SHA"
    - echo "branch=$(git rev-parse --abbrev-ref HEAD)"
    - echo "describe=$(git describe --tags)"
    - echo "depth=$(git rev-list --count HEAD)"
    - echo "pipeline-ref=$(git rev-parse refs/pipelines/$CI_PIPELINE_ID)"
    - echo "remote-branch=$(git rev-parse refs/remotes/origin/main)"
    - "git status --porcelain | sort | sed 's/^/status: /'"
    - echo made > built.bin
  artifacts:
    untracked: true
deep:
  variables:
    GIT_DEPTH: "0"
    GIT_FETCH_EXTRA_FLAGS: "--prune"
  script:
    - echo "depth=$(git rev-list --count HEAD)"
    - test ! -f .git/shallow
shallow:
  variables:
    GIT_DEPTH: "1"
  script:
    - echo "depth=$(git rev-list --count HEAD)"
    - echo "tags=$(git tag | wc -l)"
after:
  stage: test
  needs: [inspect]
  script:
    - cat built.bin
    - 'test "$(cat uncommitted.txt)" = "not committed"'
"#,
    );
    p.write("counter.txt", "changed, not committed\n");
    p.write("uncommitted.txt", "not committed");
    let run = p.exec(&[]);
    run.expect_code(0);

    let inspect = p.log("inspect");
    // GitLab checks out a detached HEAD at the commit.
    assert!(inspect.contains("\nbranch=HEAD\n"), "{inspect}");
    // GitLab's default depth for a new project is 20; tags in that history come along.
    assert!(inspect.contains("\ndepth=20\n"), "{inspect}");
    assert!(inspect.contains("\ndescribe=v1.0-1-g"), "{inspect}");
    for line in ["pipeline-ref=", "remote-branch="] {
        let value = inspect
            .lines()
            .find_map(|l| l.strip_prefix(line))
            .unwrap_or_else(|| panic!("{line}: {inspect}"));
        assert_eq!(value.len(), 40, "{line}{value}");
    }
    // The uncommitted changes, as `git status` in the project lists them.
    assert!(inspect.contains("\nstatus:  M counter.txt\n"), "{inspect}");
    assert!(
        inspect.contains("\nstatus: ?? uncommitted.txt\n"),
        "{inspect}"
    );
    assert!(
        inspect.contains("Checking out ") && inspect.contains("as detached HEAD (ref is main)"),
        "{inspect}"
    );
    assert!(
        inspect.contains("Applying the working tree's 2 uncommitted changes on top"),
        "{inspect}"
    );
    // `artifacts:untracked` lists what git does not track: the job's file and the new one.
    assert!(inspect.contains("(2 files"), "{inspect}");
    let after = p.log("after");
    assert!(after.contains("\nmade\n"), "{after}");

    let deep = p.log("deep");
    assert!(deep.contains("\ndepth=25\n"), "{deep}");
    // What a local fetch cannot take is said in the log, not dropped.
    assert!(
        deep.contains("GIT_FETCH_EXTRA_FLAGS is not applied"),
        "{deep}"
    );
    let shallow = p.log("shallow");
    assert!(shallow.contains("\ndepth=1\n"), "{shallow}");
    assert!(shallow.contains("\ntags=0\n"), "{shallow}");
}

#[test]
fn strategies_checkout_and_hooks_behave_as_on_gitlab() {
    let p = Project::with_pipeline(
        r#"
stages: [first, second]
default:
  hooks:
    pre_get_sources_script:
      - echo "hook ran in $(pwd)"
seed:
  stage: first
  hooks:
    pre_get_sources_script: echo "own hook"
  script:
    - echo leftover > leftover.txt
none:
  stage: second
  dependencies: []
  variables:
    GIT_STRATEGY: none
  script:
    - echo "strategy=$GIT_STRATEGY"
    - test -z "$(ls -A)"
empty:
  stage: second
  dependencies: []
  variables:
    GIT_STRATEGY: empty
  script:
    - test -z "$(ls -A)"
no-checkout:
  stage: second
  dependencies: []
  variables:
    GIT_CHECKOUT: "false"
  script:
    - test -d .git
    - test ! -e .gitlab-ci.yml
    - git rev-parse --verify refs/pipelines/$CI_PIPELINE_ID
no-hook:
  stage: second
  dependencies: []
  inherit:
    default: false
  script:
    - test -e .gitlab-ci.yml
bad:
  stage: second
  variables:
    GIT_STRATEGY: teleport
  script:
    - echo never
"#,
    );
    let run = p.exec(&[]);
    run.expect_code(1);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("seed", "passed"),
            ("none", "passed"),
            ("empty", "passed"),
            ("no-checkout", "passed"),
            ("no-hook", "passed"),
            ("bad", "failed"),
        ])
    );
    // The job's own hook replaces the default's, and runs before the sources are fetched.
    let seed = p.log("seed");
    let hook = seed.find("\nown hook\n").expect(&seed);
    let fetch = seed.find("Fetching changes").expect(&seed);
    assert!(hook < fetch, "{seed}");
    assert!(!seed.contains("hook ran"), "{seed}");
    let none = p.log("none");
    assert!(none.contains("hook ran in "), "{none}");
    assert!(none.contains("\nstrategy=none\n"), "{none}");
    assert!(none.contains("Skipping Git repository setup"), "{none}");
    assert!(
        p.log("empty")
            .contains("Skipping Git repository setup and creating an empty build directory")
    );
    assert!(p.log("no-checkout").contains("Skipping Git checkout"));
    assert!(!p.log("no-hook").contains("hook ran"));
    let bad = p.log("bad");
    assert!(bad.contains("unknown GIT_STRATEGY \"teleport\""), "{bad}");
}

#[test]
fn submodules_are_empty_unless_a_strategy_asks_for_them() {
    // lib is a submodule of the project, and lib/inner one of lib.
    let inner = Project::with_pipeline("x:\n  script: [\"true\"]\n");
    inner.write("inner.txt", "from the nested submodule\n");
    inner.commit("inner");
    let sub = Project::with_pipeline("x:\n  script: [\"true\"]\n");
    sub.write("lib.txt", "from the submodule\n");
    let add = |p: &Project, url: &std::path::Path, at: &str| {
        let url = url.to_string_lossy().into_owned();
        p.git(&[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &url,
            at,
        ]);
    };
    add(&sub, inner.path(), "inner");
    sub.commit("lib with a nested submodule");
    let p = Project::with_pipeline(
        r#"
plain:
  script:
    - test -d lib
    - test -z "$(ls -A lib)"
normal:
  variables:
    GIT_SUBMODULE_STRATEGY: normal
  script:
    - cat lib/lib.txt
    - test -d lib/inner
    - test -z "$(ls -A lib/inner)"
recursive:
  variables:
    GIT_SUBMODULE_STRATEGY: recursive
  script:
    - cat lib/lib.txt
    - cat lib/inner/inner.txt
"#,
    );
    add(&p, sub.path(), "lib");
    p.git(&[
        "-c",
        "protocol.file.allow=always",
        "submodule",
        "update",
        "-q",
        "--init",
        "--recursive",
    ]);
    p.commit("a submodule");
    let run = p.exec(&[]);
    run.expect_code(0);
    assert!(p.log("normal").contains("\nfrom the submodule\n"));
    assert!(p.log("recursive").contains("\nfrom the nested submodule\n"));
}

#[test]
fn a_directory_that_is_no_repository_still_gets_its_files() {
    let p = Project::with_pipeline(
        "files:\n  script:\n    - test -e .gitlab-ci.yml\n    - test ! -e .git\n",
    );
    std::fs::remove_dir_all(p.path().join(".git")).unwrap();
    let run = p.exec(&[]);
    run.expect_code(0);
    let files = p.log("files");
    assert!(
        files.contains("not in a git repository: the build directory holds the project's files"),
        "{files}"
    );
}
