//! `flotilla exec` end to end, one feature at a time: the real binary on small pipelines in a
//! temporary git repository, on the embedded default (this host, shell isolation).

use crate::exec_support;

use exec_support::{Project, statuses};

const SELECTION: &str = r"
stages: [build, test, deploy]
compile:
  stage: build
  script: [echo compile]
assets:
  stage: build
  script: [echo assets]
unit:
  stage: test
  needs: [compile]
  script: [echo unit]
lint:
  stage: test
  needs: []
  script: [echo lint]
ship:
  stage: deploy
  script: [echo ship]
";

/// A named job runs alone, as gitlab-ci-local runs it, and says what it runs without;
/// `--needs` adds what it needs, transitively.
#[test]
fn named_jobs_run_alone_or_with_what_they_need() {
    let p = Project::with_pipeline(SELECTION);
    let run = p.exec(&["unit"]);
    run.expect_code(0);
    assert_eq!(run.statuses(), statuses(&[("unit", "passed")]));
    assert!(
        run.stderr
            .contains("unit runs without compile, which it needs or takes artifacts from (--needs runs them too)"),
        "{run}"
    );
    assert_eq!(p.logs().len(), 1, "no other job ran");

    let run = p.exec(&["--needs", "unit"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("compile", "passed"), ("unit", "passed")])
    );

    let run = p.exec(&["lint", "compile"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("compile", "passed"), ("lint", "passed")])
    );

    // With --needs, a job without `needs` waits for every job of the stages before it.
    let run = p.exec(&["--needs", "ship"]);
    run.expect_code(0);
    assert_eq!(run.statuses().len(), 5, "{run}");
    let run = p.exec(&["ship"]);
    run.expect_code(0);
    assert_eq!(run.statuses(), statuses(&[("ship", "passed")]));

    let run = p.exec(&["nope"]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("cannot select job `nope`: no such job"),
        "{run}"
    );
}

#[test]
fn stage_option_runs_that_stage_and_with_needs_what_it_waits_for() {
    let p = Project::with_pipeline(SELECTION);
    let run = p.exec(&["--stage", "test"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("unit", "passed"), ("lint", "passed")])
    );
    let run = p.exec(&["--needs", "--stage", "test"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("compile", "passed"),
            ("unit", "passed"),
            ("lint", "passed")
        ])
    );
    let run = p.exec(&["--stage", "build"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("compile", "passed"), ("assets", "passed")])
    );
    let run = p.exec(&["--stage", "qa"]);
    run.expect_code(2);
    assert!(run.stderr.contains("cannot select stage `qa`"), "{run}");
}

/// Flags a gitlab-ci-local user knows: `--file`, `--cwd`, `--list-json`, `--concurrency`;
/// and a `.flotilla.toml` in the project is the fleet when no `--config` is given.
#[test]
fn gitlab_ci_local_flags_and_a_discovered_fleet() {
    let p = Project::with_pipeline(SELECTION);
    p.write(
        "other-ci.yml",
        "only-here:\n  script: [echo from the other file]\n",
    );
    p.commit("another pipeline file");
    let outside = p.outside();
    let run = exec_support::Run::of(
        std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args([
                "exec",
                "--cwd",
                p.path().to_str().unwrap(),
                "--file",
                "other-ci.yml",
            ])
            .current_dir(&outside),
    );
    run.expect_code(0);
    assert_eq!(run.statuses(), statuses(&[("only-here", "passed")]));

    let list = p.exec(&["--list-json"]);
    list.expect_code(0);
    let jobs: serde_json::Value = serde_json::from_str(&list.stdout).expect("JSON");
    let unit = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["name"] == "unit")
        .unwrap();
    assert_eq!(unit["stage"], "test");
    assert_eq!(unit["needs"], serde_json::json!(["compile"]));
    assert_eq!(unit["isolation"], "shell");
    assert_eq!(
        p.exec(&["--list", "--json"]).stdout,
        list.stdout,
        "--list --json is the same"
    );

    // One slot: jobs run one after the other. Each job marks its start and end in a file
    // outside the project; the marks, not the display's lines (a job's slot is free before
    // its end is printed), show whether the two overlapped.
    let marks = outside.join("marks");
    let script = |name: &str| {
        format!(
            "{name}:\n  script:\n    - echo start {name} >> {m}\n    - sleep 0.3\n    - echo end {name} >> {m}\n",
            m = marks.display()
        )
    };
    let one_slot = Project::with_pipeline(&format!("{}{}", script("first"), script("second")));
    let run = one_slot.exec(&["--concurrency", "1"]);
    run.expect_code(0);
    let written = std::fs::read_to_string(&marks).expect("the jobs' marks");
    let lines: Vec<&str> = written.lines().collect();
    assert_eq!(lines.len(), 4, "{written}");
    assert!(
        lines[0].starts_with("start") && lines[1].starts_with("end"),
        "the second job starts after the first ends: {lines:?}"
    );

    // A fleet file in the project is used when no --config is given.
    p.write(
        ".flotilla.toml",
        "concurrent = 1\n[[runners]]\n  name = \"project-fleet\"\n  executor = \"flotilla\"\n",
    );
    let run = p.exec(&["lint"]);
    run.expect_code(0);
    assert!(run.stderr.contains("using the fleet of"), "{run}");
    assert!(p.log("lint").contains("  on project-fleet"), "{run}");
}

#[test]
fn list_prints_the_compiled_pipeline_and_runs_nothing() {
    let p = Project::with_pipeline(&format!(
        "{SELECTION}\nmanual-job:\n  stage: deploy\n  when: manual\n  script: [echo m]\n\
         flaky:\n  stage: test\n  allow_failure: {{exit_codes: [3, 4]}}\n  script: [exit 3]\n"
    ));
    let run = p.exec(&["--list"]);
    run.expect_code(0);
    let lines: Vec<Vec<String>> = run
        .stdout
        .lines()
        .take_while(|l| {
            !l.starts_with("not in this pipeline") && !l.starts_with("manual (not run)")
        })
        .map(|l| {
            l.split("  ")
                .map(str::trim)
                .filter(|c| !c.is_empty())
                .map(str::to_string)
                .collect()
        })
        .collect();
    let expected: Vec<Vec<&str>> = vec![
        vec![
            "JOB",
            "STAGE",
            "WHEN",
            "NEEDS",
            "ALLOW FAILURE",
            "ISOLATION",
        ],
        vec![
            "compile",
            "build",
            "on_success",
            "(stages before)",
            "no",
            "shell",
        ],
        vec![
            "assets",
            "build",
            "on_success",
            "(stages before)",
            "no",
            "shell",
        ],
        vec!["unit", "test", "on_success", "compile", "no", "shell"],
        vec!["lint", "test", "on_success", "-", "no", "shell"],
        vec![
            "flaky",
            "test",
            "on_success",
            "(stages before)",
            "exit codes 3,4",
            "shell",
        ],
        vec![
            "ship",
            "deploy",
            "on_success",
            "(stages before)",
            "no",
            "shell",
        ],
        vec![
            "manual-job",
            "deploy",
            "manual (not run)",
            "(stages before)",
            "yes",
            "shell",
        ],
    ];
    assert_eq!(lines, expected, "{run}");
    // Manual jobs are listed, marked as not run, and not hidden among the excluded ones.
    assert!(
        run.stdout
            .contains("manual (not run): a manual job; `flotilla exec --manual`"),
        "{run}"
    );
    assert!(
        !run.stdout.contains("not in this pipeline: manual-job"),
        "{run}"
    );
    assert!(p.pipelines().is_empty(), "--list runs nothing");
    // With --manual the manual job is listed as one that runs.
    let run = p.exec(&["--list", "--manual"]);
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("manual-job ") && l.contains(" manual ")),
        "{run}"
    );
    assert!(!run.stdout.contains("not run"), "{run}");
}

#[test]
fn exec_files_stay_out_of_git_status_and_latest_points_at_the_last_run() {
    let p = Project::with_pipeline("only-job:\n  script: [echo hello]\n");
    p.commit("pipeline");
    p.exec(&[]).expect_code(0);
    let second = p.exec(&[]);
    second.expect_code(0);
    let status = std::process::Command::new("git")
        .arg("-C")
        .arg(p.path())
        .args(["status", "--porcelain", "--untracked-files=all"])
        .output()
        .unwrap();
    assert!(status.status.success());
    assert_eq!(
        String::from_utf8_lossy(&status.stdout),
        "",
        ".flotilla/ must not show in git status"
    );
    let runs = p.pipelines();
    assert_eq!(runs.len(), 2, "{runs:?}");
    let latest = p.path().join(".flotilla/logs/latest");
    assert_eq!(
        std::fs::read_link(&latest).unwrap(),
        std::path::PathBuf::from(runs[1].file_name().unwrap()),
        "latest is a relative link to the last run"
    );
    assert!(
        latest.join("01-only-job.log").is_file(),
        "{:?}",
        std::fs::read_dir(&latest).unwrap().collect::<Vec<_>>()
    );
    assert!(
        second
            .stdout
            .contains(&format!("logs: {}", runs[1].display())),
        "{second}"
    );
}

#[test]
fn warnings_come_with_errors_and_name_the_skipped_include() {
    let p = Project::with_pipeline(
        "include:\n  - template: Security/SAST.gitlab-ci.yml\n\nstages: [build, test, deploy]\nsast:\n  variables:\n    SAST_EXCLUDED_PATHS: vendor\n\nbuild:\n  stage: compile\n  script: [echo]\n",
    );
    let run = p.exec(&[]);
    run.expect_code(2);
    let warning = run
        .stderr
        .find("warning: .gitlab-ci.yml:2:5: include:template is not supported")
        .unwrap_or_else(|| panic!("{run}"));
    let error = run
        .stderr
        .find("error: .gitlab-ci.yml:10:10: jobs:build chosen stage `compile` does not exist; available stages are .pre, build, test, deploy, .post (this may come from an include that local runs skip: include:template `Security/SAST.gitlab-ci.yml` at .gitlab-ci.yml:2:5)")
        .unwrap_or_else(|| panic!("{run}"));
    assert!(warning < error, "the warning first: {run}");
    assert!(
        run.stderr.contains(
            "jobs:sast has no script: it may add to a job of a skipped include; it is left out"
        ),
        "{run}"
    );
}

#[test]
fn variables_from_the_command_line_reach_jobs_and_rules() {
    let p = Project::with_pipeline(
        r#"
variables:
  GREETING: hello
greet:
  script: ['echo "greeting is $GREETING, mode ${MODE:-unset}"']
feature:
  rules:
    - if: $FEATURE == "on" && $GREETING == "hi"
  script: ['echo "feature job sees FEATURE=$FEATURE"']
"#,
    );
    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(run.statuses(), statuses(&[("greet", "passed")]));
    assert!(p.log("greet").contains("\ngreeting is hello, mode unset"));

    let run = p.exec(&[
        "--variable",
        "GREETING=hi",
        "--variable",
        "FEATURE=on",
        "--variable",
        "MODE=a=b",
    ]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("greet", "passed"), ("feature", "passed")])
    );
    assert!(p.log("greet").contains("\ngreeting is hi, mode a=b"));
    assert!(p.log("feature").contains("\nfeature job sees FEATURE=on"));
}

#[test]
fn manual_jobs_run_only_when_asked() {
    let p = Project::with_pipeline(
        r#"
build:
  stage: build
  script: [echo build]
deploy:
  stage: deploy
  when: manual
  script: ['echo "deploying, CI_JOB_MANUAL=$CI_JOB_MANUAL"']
"#,
    );
    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(run.statuses(), statuses(&[("build", "passed")]));
    let run = p.exec(&["--manual"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("build", "passed"), ("deploy", "passed")])
    );
    assert!(p.log("deploy").contains("\ndeploying, CI_JOB_MANUAL=true"));
    // Naming a manual job without --manual says why it cannot run.
    let run = p.exec(&["deploy"]);
    run.expect_code(2);
    assert!(run.stderr.contains("it is not in this pipeline"), "{run}");
}

/// A manual job in `rules` may not fail unless it says so, so it blocks: the later stages
/// wait for it, while jobs with `needs` go on (docs.gitlab.com/ci/jobs/job_control/#types-of-manual-jobs;
/// `allow_failure` defaults to false for `rules: when: manual`). A `when: manual` job keyword
/// allows failure by default and blocks nothing.
#[test]
fn a_blocking_manual_job_holds_the_later_stages() {
    let p = Project::with_pipeline(
        r"
stages: [build, approve, release]
early:
  stage: build
  script: [echo early]
approval:
  stage: approve
  rules:
    - when: manual
  script: [echo approved]
optional:
  stage: approve
  when: manual
  script: [echo optional]
ship:
  stage: release
  script: [echo shipped]
notes:
  stage: release
  needs: [early]
  script: [echo notes]
",
    );
    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("early", "passed"), ("notes", "passed")])
    );
    assert!(
        run.stderr.contains(
            "jobs:ship is left out: it waits for the manual job `approval` of an earlier \
             stage, which may not fail and has not run"
        ),
        "{run}"
    );
    let run = p.exec(&["--manual"]);
    run.expect_code(0);
    assert_eq!(run.statuses().len(), 5, "{run}");

    // Without the blocking one, the keyword's manual job holds nothing.
    let p = Project::with_pipeline(
        r"
stages: [approve, release]
optional:
  stage: approve
  when: manual
  script: [echo optional]
ship:
  stage: release
  script: [echo shipped]
",
    );
    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(run.statuses(), statuses(&[("ship", "passed")]));
}

/// `retry:when` and `retry:exit_codes` are either-or (GitLab `lib/gitlab/ci/build/auto_retry.rb`:
/// `retry_on_reason_or_always? || retry_on_exit_code?`): a script failure with a listed exit
/// code is retried though `when` names another reason.
#[test]
fn retry_on_a_listed_exit_code_whatever_when_says() {
    let p = Project::with_pipeline(
        r#"
flaky:
  retry:
    max: 1
    when: [runner_system_failure]
    exit_codes: [3]
  script:
    - |
      if [ -e "$MARKER" ]; then echo "second attempt passes"; else touch "$MARKER"; exit 3; fi
"#,
    );
    let marker = p.outside().join("attempted");
    let run = p.exec(&["--variable", &format!("MARKER={}", marker.display())]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("flaky", "passed (2 attempts)")])
    );
}

#[test]
fn follow_streams_one_jobs_log_to_the_terminal() {
    let p = Project::with_pipeline(
        r"
quiet:
  stage: build
  script: [echo from-quiet]
loud:
  stage: test
  script:
    - echo first line of loud
    - echo second line of loud
",
    );
    let run = p.exec(&["--follow", "loud"]);
    run.expect_code(0);
    assert!(run.stdout.contains("[loud] first line of loud\n"), "{run}");
    assert!(run.stdout.contains("[loud] second line of loud\n"), "{run}");
    assert!(run.stdout.contains("[loud] Running with flotilla"), "{run}");
    assert!(!run.stdout.contains("from-quiet"), "{run}");
    // The summary still follows.
    assert_eq!(
        run.statuses(),
        statuses(&[("quiet", "passed"), ("loud", "passed")])
    );
    // The log file has it all too.
    assert!(p.log("loud").contains("\nsecond line of loud"));
}

#[test]
fn a_failed_job_fails_the_pipeline_and_skips_what_waits_for_it() {
    let p = Project::with_pipeline(
        r"
stages: [build, test, deploy]
build:
  stage: build
  script:
    - echo about to fail
    - exit 7
other:
  stage: build
  script: [echo fine]
test:
  stage: test
  script: [echo never]
deploy:
  stage: deploy
  script: [echo never]
",
    );
    let run = p.exec(&[]);
    run.expect_code(1);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("build", "failed"),
            ("other", "passed"),
            ("test", "skipped"),
            ("deploy", "skipped"),
        ])
    );
    assert!(run.stdout.contains("pipeline failed in "), "{run}");
    assert!(run.stderr.contains("build: failed (exit code 7)"), "{run}");
    let line = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("log of the first failed job: "))
        .unwrap_or_else(|| panic!("no log pointer in {run}"));
    let log = std::fs::read_to_string(line).unwrap();
    assert!(log.contains("\nabout to fail"), "{log}");
    assert!(log.contains("exit code 7"), "{log}");
    assert_eq!(p.logs().len(), 2, "skipped jobs have no log");
}

#[test]
fn allowed_failures_do_not_fail_the_pipeline() {
    let p = Project::with_pipeline(
        r"
may-fail:
  stage: build
  allow_failure: true
  script: [exit 1]
code-three:
  stage: build
  allow_failure:
    exit_codes: [3]
  script: [exit 3]
after:
  stage: test
  script: [echo after]
",
    );
    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("may-fail", "failed (allowed)"),
            ("code-three", "failed (allowed)"),
            ("after", "passed"),
        ])
    );
    assert!(run.stdout.contains("pipeline passed"), "{run}");

    // An exit code outside `exit_codes` is a real failure.
    p.write(
        ".gitlab-ci.yml",
        "code-four:\n  allow_failure:\n    exit_codes: [3]\n  script: [exit 4]\n",
    );
    let run = p.exec(&[]);
    run.expect_code(1);
    assert_eq!(run.statuses(), statuses(&[("code-four", "failed")]));
}

#[test]
fn setup_errors_exit_2_and_name_the_place() {
    let p = Project::with_pipeline(
        "build:\n  script: [echo]\ntest:\n  needs: [missing]\n  script: [echo]\n",
    );
    let run = p.exec(&[]);
    run.expect_code(2);
    assert!(
        run.stderr.contains("error: .gitlab-ci.yml:4:"),
        "file:line:col: {run}"
    );
    assert!(run.stderr.contains("missing"), "{run}");
    assert!(run.stdout.is_empty(), "{run}");
    assert!(p.pipelines().is_empty(), "nothing ran");

    p.write(".gitlab-ci.yml", "build:\n  script: [echo\n");
    let run = p.exec(&[]);
    run.expect_code(2);
    assert!(run.stderr.contains("error: .gitlab-ci.yml:"), "{run}");

    p.write(
        ".gitlab-ci.yml",
        "build:\n  stage: nowhere\n  script: [echo]\n",
    );
    let run = p.exec(&["--list"]);
    run.expect_code(2);
    assert!(run.stderr.contains("error: .gitlab-ci.yml:2:10"), "{run}");

    // A configuration that cannot load is a setup error too.
    p.write(".gitlab-ci.yml", "build:\n  script: [echo]\n");
    p.write("bad.toml", "[[runners]]\nname = 1\n");
    let run = p.exec(&["--config", "bad.toml"]);
    run.expect_code(2);
    assert!(run.stderr.contains("bad.toml"), "{run}");

    // No pipeline at all.
    let empty = Project::empty();
    let run = empty.exec(&[]);
    run.expect_code(2);
    assert!(run.stderr.contains("has no .gitlab-ci.yml"), "{run}");
}

#[test]
fn jobs_see_the_working_tree_with_uncommitted_changes_but_not_ignored_files() {
    let p = Project::with_pipeline(
        r#"
look:
  script:
    - cat tracked.txt
    - cat untracked.txt
    - test ! -e secret.env && echo "no secret.env"
    - test ! -e target && echo "no target dir"
    - test -d .git && echo "a .git of its own"
    - test ! -e .flotilla && echo "no .flotilla"
    - test -f .gitignore && echo "gitignore present"
    - test "$CI_PROJECT_DIR" = "$(pwd)" && echo "CI_PROJECT_DIR is the build dir"
"#,
    );
    p.write(".gitignore", "secret.env\ntarget/\n");
    p.write("tracked.txt", "committed\n");
    p.commit("files");
    p.write("tracked.txt", "changed but not committed\n");
    p.write("untracked.txt", "never added\n");
    p.write("secret.env", "TOKEN=do-not-copy\n");
    p.write("target/debug/big", "build output\n");
    let run = p.exec(&[]);
    run.expect_code(0);
    let log = p.log("look");
    for line in [
        "\nchanged but not committed\n",
        "\nnever added\n",
        "\nno secret.env\n",
        "\nno target dir\n",
        "\na .git of its own\n",
        "\nno .flotilla\n",
        "\ngitignore present\n",
        "\nCI_PROJECT_DIR is the build dir\n",
    ] {
        assert!(log.contains(line), "{line:?} in {log}");
    }
    assert!(!log.contains("do-not-copy"), "{log}");
}

#[test]
fn predefined_variables_come_from_the_repository() {
    let p = Project::with_pipeline(
        r#"
vars:
  script:
    - echo "sha=$CI_COMMIT_SHA"
    - echo "branch=$CI_COMMIT_BRANCH ref=$CI_COMMIT_REF_NAME"
    - echo "job=$CI_JOB_NAME stage=$CI_JOB_STAGE pipeline=$CI_PIPELINE_ID"
    - echo "title=$CI_COMMIT_TITLE"
"#,
    );
    let sha = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(p.path())
        .output()
        .unwrap();
    let sha = String::from_utf8(sha.stdout).unwrap().trim().to_string();
    let run = p.exec(&[]);
    run.expect_code(0);
    let pipeline_id = p.pipelines()[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let log = p.log("vars");
    for line in [
        format!("\nsha={sha}\n"),
        "\nbranch=main ref=main\n".to_string(),
        format!("\njob=vars stage=test pipeline={pipeline_id}\n"),
        "\ntitle=the pipeline\n".to_string(),
    ] {
        assert!(log.contains(&line), "{line:?} in {log}");
    }
}

#[test]
fn a_job_over_its_timeout_fails() {
    let p = Project::with_pipeline(
        r"
slow:
  timeout: 1s
  script:
    - echo started
    - sleep 30
    - echo never printed
",
    );
    let started = std::time::Instant::now();
    let run = p.exec(&[]);
    run.expect_code(1);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(25),
        "the job was stopped, not waited for"
    );
    assert_eq!(run.statuses(), statuses(&[("slow", "failed")]));
    let log = p.log("slow");
    assert!(log.contains("\nstarted\n"), "{log}");
    assert!(!log.contains("\nnever printed"), "{log}");
    assert!(log.contains("took longer than"), "{log}");
    // The summary says why, not only that it failed.
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("slow failed: ") && l.contains("took longer than")),
        "{}",
        run.stdout
    );
}

#[test]
fn retry_runs_a_failed_job_again() {
    let p = Project::with_pipeline(
        r#"
flaky:
  retry: 2
  script:
    - |
      if [ -e "$MARKER" ]; then
        echo "second attempt passes"
      else
        touch "$MARKER"
        echo "first attempt fails"
        exit 1
      fi
never-retried:
  retry:
    max: 2
    when: [runner_system_failure]
  allow_failure: true
  script: [echo fails once, exit 1]
"#,
    );
    // The marker lives outside the build directory, so it survives between attempts.
    let marker = p.outside().join("attempted");
    let run = p.exec(&["--variable", &format!("MARKER={}", marker.display())]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("flaky", "passed (2 attempts)"),
            ("never-retried", "failed (allowed)"),
        ])
    );
    assert!(marker.exists());
    assert!(run.stderr.contains("started flaky (attempt 2)"), "{run}");
    let log = p.log("flaky");
    let first = log
        .find("first attempt fails")
        .expect("first attempt in the log");
    let second = log
        .find("second attempt passes")
        .expect("second attempt in the log");
    assert!(first < second, "{log}");
    assert_eq!(p.log("never-retried").matches("\nfails once").count(), 1);
}

const ON_FAILURE: &str = r#"
stages: [build, test, cleanup]
build:
  stage: build
  script: ['test "$BREAK" != yes']
test:
  stage: test
  script: [echo testing]
notify:
  stage: test
  when: on_failure
  script: [echo something failed]
tidy:
  stage: cleanup
  when: always
  script: [echo tidying up]
"#;

#[test]
fn on_failure_and_always_jobs() {
    let p = Project::with_pipeline(ON_FAILURE);
    let run = p.exec(&["--variable", "BREAK=yes"]);
    run.expect_code(1);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("build", "failed"),
            ("test", "skipped"),
            ("notify", "passed"),
            ("tidy", "passed"),
        ])
    );
    assert!(p.log("notify").contains("\nsomething failed"));
    assert!(p.log("tidy").contains("\ntidying up"));

    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("build", "passed"),
            ("test", "passed"),
            ("notify", "skipped"),
            ("tidy", "passed"),
        ])
    );
    assert!(
        run.stderr
            .contains("notify: skipped: when: on_failure and nothing failed"),
        "{run}"
    );
}

#[test]
fn after_script_runs_after_a_failure_and_sees_it() {
    let p = Project::with_pipeline(
        r#"
job:
  script: [echo main, exit 2]
  after_script: ['echo "after_script: status $CI_JOB_STATUS"']
"#,
    );
    let run = p.exec(&[]);
    run.expect_code(1);
    let log = p.log("job");
    assert!(log.contains("\nafter_script: status failed"), "{log}");
}

#[test]
fn artifacts_override_the_working_tree_in_dependency_order() {
    let p = Project::with_pipeline(
        r#"
stages: [build, test]
first:
  stage: build
  script: ['echo "from first" > config.txt', 'echo first > only-first.txt']
  artifacts: {paths: [config.txt, only-first.txt]}
second:
  stage: build
  script: ['echo "from second" > config.txt']
  artifacts: {paths: [config.txt]}
both:
  stage: test
  dependencies: [first, second]
  script: ['echo "both sees $(cat config.txt), $(cat only-first.txt)"']
reversed:
  stage: test
  dependencies: [second, first]
  script: ['echo "reversed sees $(cat config.txt)"']
none:
  stage: test
  dependencies: []
  script: ['echo "none sees $(cat config.txt)"', 'test ! -e only-first.txt && echo "no artifacts"']
no-artifacts-need:
  stage: test
  needs: [{job: first, artifacts: false}]
  script: ['test ! -e only-first.txt && echo "needs without artifacts"']
"#,
    );
    p.write("config.txt", "from the working tree\n");
    p.commit("config");
    let run = p.exec(&[]);
    run.expect_code(0);
    assert!(p.log("both").contains("\nboth sees from second, first\n"));
    assert!(p.log("reversed").contains("\nreversed sees from first\n"));
    let none = p.log("none");
    assert!(
        none.contains("\nnone sees from the working tree\n"),
        "{none}"
    );
    assert!(none.contains("\nno artifacts\n"), "{none}");
    assert!(
        p.log("no-artifacts-need")
            .contains("\nneeds without artifacts\n")
    );
}

#[test]
fn an_interrupt_cancels_running_jobs_after_their_after_script() {
    let p = Project::with_pipeline(
        r"
stages: [a, b]
slow:
  stage: a
  script: [echo going to sleep, sleep 60]
  after_script: [echo after_script ran]
later:
  stage: b
  script: [echo never]
",
    );
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .arg("exec")
        .current_dir(p.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the job's script runs, then interrupt as a terminal's Ctrl-C would.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !p.pipelines().first().is_some_and(|d| {
        std::fs::read_to_string(d.join("01-slow.log")).is_ok_and(|l| l.contains("\ngoing to sleep"))
    }) {
        assert!(
            std::time::Instant::now() < deadline,
            "the job never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = child.wait_with_output().unwrap();
    let run = exec_support::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    // 130, as a shell reports a command ended by Ctrl-C (gitlab-ci-local does the same).
    run.expect_code(130);
    assert_eq!(
        run.statuses(),
        statuses(&[("slow", "canceled"), ("later", "canceled")])
    );
    let log = p.log("slow");
    assert!(log.contains("\nafter_script ran"), "{log}");
    assert!(log.contains("Job failed: canceled"), "{log}");
}

#[test]
fn a_job_asking_for_a_level_its_runner_does_not_offer_fails_at_once_and_names_the_offered_ones() {
    let p = Project::with_pipeline(
        r"
plain:
  script: [echo plain]
boxed:
  variables:
    FLOTILLA_ISOLATION: vm
  script: [echo must not run]
",
    );
    let list = p.exec(&["--list"]);
    list.expect_code(0);
    assert!(
        // The embedded default offers shell, and microvm where this host can boot VMs.
        list.stdout.contains(" vm (not offered: shell"),
        "{list}"
    );
    let run = p.exec(&[]);
    run.expect_code(1);
    assert_eq!(
        run.statuses(),
        statuses(&[("plain", "passed"), ("boxed", "failed")])
    );
    let log = p.log("boxed");
    assert!(
        log.contains(
            "the job asks for isolation level \"vm\" (FLOTILLA_ISOLATION), which this \
             runner does not offer; it offers: shell"
        ),
        "{log}"
    );
    assert!(!log.contains("must not run"), "it never ran: {log}");
    assert!(
        run.stdout
            .lines()
            .any(|l| l.starts_with("boxed failed: ")
                && l.contains("asks for isolation level \"vm\"")),
        "the summary says why: {}",
        run.stdout
    );
    // The same level named on the command line is honoured the same way.
    let run = p.exec(&["--variable", "FLOTILLA_ISOLATION=shell", "plain"]);
    run.expect_code(0);
}

#[test]
fn infra_cgroup_exec_runs_each_job_at_the_level_it_asks_for() {
    if !flotilla_testkit::infra::require(flotilla_testkit::infra::Infra::Cgroups) {
        return;
    }
    let top = format!("flotilla-exec-test-{}", std::process::id());
    let p = Project::with_pipeline(
        r#"
plain:
  script: [cat /proc/self/cgroup, 'echo "slot=$GITLAB_RUNNER_SLOT_CGROUP."']
boxed:
  variables:
    FLOTILLA_ISOLATION: cgroup
  script: [cat /proc/self/cgroup, 'echo "slot=$GITLAB_RUNNER_SLOT_CGROUP."']
hog:
  variables:
    FLOTILLA_ISOLATION: cgroup
  script:
    - x=$(head -c 100000000 /dev/zero | tr '\0' a)
    - echo survived
"#,
    );
    p.write(
        "fleet.toml",
        &format!(
            r#"
[[runners]]
  name = "levels"
  executor = "flotilla"
  slot_cgroup_template = "{top}/slot-${{slot}}"
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 2
    isolation = ["shell", "cgroup"]
  [runners.cgroup]
    memory = "48Mi"
    pids = 128
"#
        ),
    );
    p.commit("config");
    let config = p.path().join("fleet.toml");
    let list = p.exec(&["--config", config.to_str().unwrap(), "--list"]);
    list.expect_code(0);
    assert!(
        list.stdout
            .lines()
            .any(|l| l.starts_with("boxed ") && l.trim_end().ends_with("cgroup")),
        "{list}"
    );
    let run = p.exec(&["--config", config.to_str().unwrap()]);
    let memory_dir = std::path::Path::new("/sys/fs/cgroup/memory").join(&top);
    let _ = std::fs::remove_dir(&memory_dir);
    for h in ["cpu", "pids"] {
        let _ = std::fs::remove_dir(std::path::Path::new("/sys/fs/cgroup").join(h).join(&top));
    }
    let _ = std::fs::remove_dir(std::path::Path::new("/sys/fs/cgroup").join(&top));
    run.expect_code(1);
    assert_eq!(
        run.statuses(),
        statuses(&[("plain", "passed"), ("boxed", "passed"), ("hog", "failed")])
    );
    let slot_path = |log: &str| log.lines().any(|l| l.contains(&format!("/{top}/slot-")));
    assert!(!slot_path(&p.log("plain")), "shell: {}", p.log("plain"));
    assert!(slot_path(&p.log("boxed")), "cgroup: {}", p.log("boxed"));
    assert!(p.log("boxed").contains("Using cgroup isolation"));
    // The cgroup level tells the job its slot's cgroup; shell (no use_slot_cgroups) does not.
    assert!(
        p.log("boxed").contains(&format!("slot={top}/slot-")),
        "{}",
        p.log("boxed")
    );
    assert!(p.log("plain").contains("slot=."), "{}", p.log("plain"));
    let hog = p.log("hog");
    assert!(hog.contains("killed: memory limit 48 MiB of slot"), "{hog}");
    assert!(!hog.contains("\nsurvived"), "{hog}");
}

#[test]
fn infra_exec_instance_level_gives_each_job_the_whole_instance() {
    if !flotilla_testkit::infra::require(flotilla_testkit::infra::Infra::Docker) {
        return;
    }
    let p = Project::with_pipeline(
        r#"
whole:
  variables:
    FLOTILLA_ISOLATION: instance
  script: [echo "on the instance"]
"#,
    );
    let group = format!("exec-instance-{}", std::process::id());
    let _guard = flotilla_testkit::containers::LabelGuard::new(format!("flotilla.group={group}"));
    p.write(
        "fleet.toml",
        &format!(
            r#"
[[runners]]
  name = "whole"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = 1
    max_use_count = 1
    isolation = "instance"
    delete_instances_on_shutdown = true
    shutdown_deletion_interval = "1s"
    [runners.autoscaler.plugin_config]
      name = "{group}"
      image = "{image}"
    [runners.autoscaler.connector_config]
      username = "root"
"#,
            image = flotilla_testkit::images::instance_image()
        ),
    );
    p.commit("config");
    let config = p.path().join("fleet.toml");
    let run = p.exec(&["--config", config.to_str().unwrap()]);
    run.expect_code(0);
    let log = p.log("whole");
    assert!(log.contains("Using instance isolation"), "{log}");
    assert!(log.contains("the whole instance is the job's"), "{log}");
    assert!(log.contains("on the instance"), "{log}");
}

#[test]
fn exec_instance_level_is_refused_where_it_cannot_be_kept() {
    let p = Project::with_pipeline("whole:\n  script: [echo hi]\n");
    // Two jobs to an instance would share it: configuration refuses that, saying where.
    p.write(
        "shared.toml",
        r#"
[[runners]]
  name = "whole"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 2
    isolation = "instance"
"#,
    );
    let config = p.path().join("shared.toml");
    let run = p.exec(&["--config", config.to_str().unwrap()]);
    assert_ne!(run.code, 0, "{run}");
    assert!(run.stderr.contains("capacity_per_instance"), "{run}");

    // This host cannot be thrown away after a job (issue 27: a used-up local instance stayed
    // marked for removal for ever, and the next job waited for a slot that never came).
    p.write(
        "local.toml",
        r#"
[[runners]]
  name = "whole"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 1
    max_use_count = 1
    isolation = "instance"
"#,
    );
    let config = p.path().join("local.toml");
    let run = p.exec(&["--config", config.to_str().unwrap()]);
    assert_ne!(run.code, 0, "{run}");
    assert!(
        run.stderr.contains(
            "max_use_count = 1 cannot be used with plugin \"local\": its instances (this \
             host) cannot be thrown away"
        ),
        "{run}"
    );
}

/// `rules:changes` in a local run compare against the merge base of the default branch and
/// HEAD, uncommitted and untracked files included, and the run says so; without git history
/// to ask they hold (issue 35, item 7).
#[test]
fn rules_changes_compare_against_the_default_branch() {
    let p = Project::with_pipeline(
        r"
docs:
  rules:
    - changes: [docs/**/*]
  script: [echo docs]
code:
  rules:
    - changes: [src/*.rs]
  script: [echo code]
untracked:
  rules:
    - changes: [notes.txt]
  script: [echo notes]
",
    );
    p.write("src/main.rs", "fn main() {}\n");
    p.commit("code on main");
    p.git(&["checkout", "-q", "-b", "feature"]);
    p.write("docs/guide.md", "# guide\n");
    p.commit("docs on the branch");
    p.write("notes.txt", "untracked\n");
    let run = p.exec(&["--list"]);
    run.expect_code(0);
    assert!(
        run.stderr.contains(
            "note: rules:changes compare against the merge base of main and HEAD, uncommitted \
             and untracked files included: 2 changed files"
        ),
        "{run}"
    );
    let rows = run.stdout.clone();
    assert!(rows.contains("\ndocs "), "{run}");
    assert!(rows.contains("\nuntracked "), "{run}");
    assert!(
        !rows.contains("\ncode "),
        "src/main.rs did not change on the branch: {run}"
    );
    assert!(!run.stderr.contains("cannot be known"), "{run}");
}

/// `--input` gives the main file's `spec:inputs` values, read as their types read them, and
/// `--component-path` is where `include: component` is read from (issue 35, items 2 and 8).
#[test]
fn inputs_and_components_from_the_command_line() {
    let p = Project::with_pipeline(
        r#"
spec:
  inputs:
    greeting:
      default: hello
    count:
      type: number
      default: 1
---
include:
  - component: $CI_SERVER_FQDN/acme/ci/hello@1.0.0
    inputs:
      who: "$[[ inputs.greeting ]] world"
main:
  parallel: $[[ inputs.count ]]
  script: ['echo "$[[ inputs.greeting ]] from main"']
"#,
    );
    let components = p.outside();
    std::fs::create_dir_all(components.join("acme/ci/templates")).unwrap();
    std::fs::write(
        components.join("acme/ci/templates/hello.yml"),
        "spec:\n  inputs:\n    who:\n---\nhello:\n  script: ['echo \"component says $[[ inputs.who ]]\"']\n",
    )
    .unwrap();
    let run = p.exec(&[
        "--input",
        "greeting=hi",
        "--input",
        "count=2",
        "--component-path",
        components.to_str().unwrap(),
    ]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("hello", "passed"),
            ("main 1/2", "passed"),
            ("main 2/2", "passed")
        ])
    );
    assert!(
        p.log("hello").contains("\ncomponent says hi world"),
        "{run}"
    );
    assert!(
        run.stderr.contains("note: ") && run.stderr.contains("hello.yml"),
        "{run}"
    );
    let run = p.exec(&["--input", "count=many", "--list"]);
    run.expect_code(2);
    assert!(
        run.stderr
            .contains("`count` input: provided value is not a number"),
        "{run}"
    );
}

/// Every job's lines reach the terminal as they come, after the job's name, with GitLab's
/// section markers taken out and no colour codes in a pipe; `--quiet` keeps them in the logs
/// only; the summary says why each job failed (issue 33).
#[test]
fn every_jobs_output_streams_readably_and_failures_say_why() {
    let p = Project::with_pipeline(
        r"
greet:
  script: [echo hello from greet]
count:
  script:
    - echo one
    - echo two
broken:
  script: [exit 3]
",
    );
    let run = p.exec(&[]);
    run.expect_code(1);
    for line in [
        "[greet] hello from greet",
        "[count] one",
        "[count] two",
        "[greet] Executing \"step_script\" stage of the job script",
        "[greet]   on this host (flotilla exec)",
    ] {
        assert!(
            run.stdout.lines().any(|l| l == line),
            "{line:?} missing: {run}"
        );
    }
    assert!(!run.stdout.contains("section_start"), "{run}");
    assert!(!run.stdout.contains('\x1b'), "no colours in a pipe: {run}");
    assert!(
        run.stdout
            .lines()
            .any(|l| l == "broken failed: exit code 3"),
        "{run}"
    );
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("greet", "passed"),
            ("count", "passed"),
            ("broken", "failed")
        ])
    );

    let quiet = p.exec(&["--quiet"]);
    quiet.expect_code(1);
    assert!(!quiet.stdout.contains("[greet]"), "{quiet}");
    assert!(
        quiet.stdout.contains("broken failed: exit code 3"),
        "{quiet}"
    );
}

/// After a run each job's artifacts are in `.flotilla/artifacts/<job>/`, and
/// `--artifacts-to-source` copies them into the working tree too, as gitlab-ci-local does
/// (issue 33).
#[test]
fn artifacts_are_kept_after_the_run_and_copied_to_source_on_request() {
    let p = Project::with_pipeline(
        r"
build:
  script:
    - mkdir -p out
    - echo made by build > out/result.txt
  artifacts:
    paths: [out/]
no-artifacts:
  script: [echo nothing]
",
    );
    let run = p.exec(&[]);
    run.expect_code(0);
    let kept = p.path().join(".flotilla/artifacts/build/out/result.txt");
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap_or_default(),
        "made by build\n",
        "{run}"
    );
    assert!(!p.path().join(".flotilla/artifacts/no-artifacts").exists());
    assert!(
        !p.path().join("out").exists(),
        "not in the tree unless asked"
    );
    assert!(run.stderr.contains("artifacts of 1 job(s) in"), "{run}");

    let run = p.exec(&["--artifacts-to-source"]);
    run.expect_code(0);
    assert_eq!(
        std::fs::read_to_string(p.path().join("out/result.txt")).unwrap_or_default(),
        "made by build\n",
        "{run}"
    );
    // `.flotilla/` stays out of git status; the copied files are the user's to commit.
    let status = std::process::Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(p.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&status.stdout).trim(), "?? out/");
}
