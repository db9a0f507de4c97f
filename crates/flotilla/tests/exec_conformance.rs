//! GitLab's job contract through `flotilla exec`, on the shell, cgroup and docker levels: every
//! case of `flotilla_conformance` as one job of one pipeline, each job's status, exit code and
//! log checked against what GitLab gives it. The job crate's `conformance` test judges the
//! stage scripts against GitLab Runner's own script form; this one judges the whole path (the
//! `.gitlab-ci.yml` compiler, the job runner, the level) the way a user meets it.

use crate::exec_support;

use exec_support::{Project, Run};
use flotilla_conformance::{CASES, Case, Expect, PIPELINES, header, pipeline_yaml};
use flotilla_testkit::infra::{Infra, require};

/// The exit code of the log's `Job failed: exit code N` line.
fn failed_code(log: &str) -> Option<i32> {
    const LINE: &str = "Job failed: exit code ";
    let at = log.rfind(LINE)? + LINE.len();
    let digits: String = log[at..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// What is wrong with one job of the run, if anything.
fn verdict(case: &Case, status: Option<&String>, log: &str) -> Vec<String> {
    let mut wrong = Vec::new();
    let want = match case.expect {
        Expect::Passed => "passed",
        Expect::Failed(_) | Expect::TimedOut => "failed",
        Expect::Allowed(_) => "failed (allowed)",
    };
    if status.map(String::as_str) != Some(want) {
        wrong.push(format!("status {status:?}, expected {want:?}"));
    }
    match case.expect {
        Expect::Passed => {
            if !log.contains("Job succeeded") {
                wrong.push("no `Job succeeded`".into());
            }
        }
        Expect::Failed(code) | Expect::Allowed(code) => {
            let got = failed_code(log);
            if got != Some(code) {
                wrong.push(format!("`Job failed: exit code` {got:?}, expected {code}"));
            }
        }
        Expect::TimedOut => {
            if !log.contains("Job failed:") || log.contains("Job failed: exit code") {
                wrong.push("not failed by a timeout".into());
            }
        }
    }
    wrong.extend(case.output_problems(log));
    wrong
}

/// Runs every case that holds in the level's shell (`bash`: the level runs bash) and checks
/// each job; `config` is the runner's `config.toml`, if any; `environment` is `shared` or
/// `disposable`, as GitLab Runner's executor of that kind says (`CI_SHARED_ENVIRONMENT`,
/// `CI_DISPOSABLE_ENVIRONMENT`: gitlab-runner `common/build.go` `GetSharedEnvVariable`).
fn conform(level: &str, bash: bool, config: Option<String>, environment: &str) {
    let cases = CASES.iter().filter(|c| c.holds_in(bash)).collect();
    conform_cases(level, cases, config, environment);
}

/// [`conform`] on `cases`.
fn conform_cases(level: &str, cases: Vec<&Case>, config: Option<String>, environment: &str) {
    let p = Project::with_pipeline(&pipeline_yaml(&header(), cases.iter().copied()));
    // The config stays out of the project, whose working tree the jobs get.
    let config_path = p.outside().join("conformance.toml");
    let config_arg = config_path.to_string_lossy().into_owned();
    let mut args = vec![];
    if let Some(config) = &config {
        std::fs::write(&config_path, config).expect("config written");
        args.extend(["--config", config_arg.as_str()]);
    }
    let run: Run = p.exec(&args);
    let statuses = run.statuses();
    let mut failures = Vec::new();
    for case in &cases {
        let log = p.log(case.name);
        let wrong = verdict(case, statuses.get(case.name), &log);
        if !wrong.is_empty() {
            failures.push(format!(
                "{} ({}): {}\n--- log ---\n{log}",
                case.name,
                case.source,
                wrong.join("; ")
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{level}: {} of {} jobs differ from GitLab:\n\n{}\n\n{run}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
    let kind = p.log("predefined-shared-or-disposable");
    let isolation = level.split(' ').next().unwrap_or(level);
    assert!(
        kind.contains(&format!("Using {isolation} isolation")),
        "{level}: the job ran at another level: {kind}"
    );
    assert!(
        kind.contains(&format!("\nenvironment-is-{environment}\n")),
        "{level} should be {environment}: {kind}"
    );
    // Some jobs fail, so the pipeline does.
    run.expect_code(1);
    eprintln!("{level}: {} cases hold", cases.len());
}

#[test]
fn every_case_holds_at_the_shell_level() {
    conform("shell (the embedded default)", true, None, "shared");
}

#[test]
fn infra_every_case_holds_at_the_cgroup_level() {
    if !require(Infra::Cgroups) {
        return;
    }
    let config = r#"
concurrent = 4
[[runners]]
  name = "conformance-cgroup"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "local"
    isolation = "cgroup"
    capacity_per_instance = 4
    max_instances = 1
"#;
    conform("cgroup", true, Some(config.to_owned()), "shared");
}

/// The docker level on this host's engine, every job in the busybox image.
fn docker_config() -> String {
    let busybox = flotilla_testkit::images::busybox_image();
    format!(
        r#"
concurrent = 4
[[runners]]
  name = "conformance-docker"
  executor = "flotilla"
  [runners.docker]
    image = "{busybox}"
    pull_policy = "if-not-present"
  [runners.autoscaler]
    plugin = "local"
    isolation = "docker"
    capacity_per_instance = 4
    max_instances = 1
"#
    )
}

#[test]
fn infra_every_case_holds_at_the_docker_level() {
    if !require(Infra::Docker) {
        return;
    }
    // The busybox image has no bash: its jobs run in busybox's sh, as on GitLab.
    conform(
        "docker (busybox image)",
        false,
        Some(docker_config()),
        "disposable",
    );
}

#[test]
fn infra_every_pipeline_case_holds_at_the_docker_level() {
    if !require(Infra::Docker) {
        return;
    }
    pipelines_conform("docker (busybox image)", Some(&docker_config()));
}

#[test]
fn infra_a_sample_of_cases_holds_at_the_microvm_level() {
    if !require(Infra::Qemu) || !require(Infra::Docker) {
        return;
    }
    let busybox = flotilla_testkit::images::busybox_image();
    let state = tempfile::Builder::new()
        .prefix("fl-conformance-microvm-")
        .tempdir_in("/tmp")
        .expect("state dir");
    let config = format!(
        r#"
concurrent = 2
[[runners]]
  name = "conformance-microvm"
  executor = "flotilla"
  [runners.docker]
    image = "{busybox}"
    pull_policy = "if-not-present"
  [runners.autoscaler]
    plugin = "local"
    isolation = "microvm"
    capacity_per_instance = 2
    max_instances = 1
  [runners.microvm]
    memory = "256Mi"
    network = false
    state_dir = "{}"
"#,
        state.path().display()
    );
    conform_cases(
        "microvm (busybox image)",
        flotilla_conformance::sample(),
        Some(config),
        "disposable",
    );
}

#[test]
fn infra_a_sample_of_cases_holds_at_the_instance_level() {
    if !require(Infra::Docker) {
        return;
    }
    let group = format!("conformance-instance-{}", std::process::id());
    let _guard = flotilla_testkit::containers::LabelGuard::new(format!("flotilla.group={group}"));
    // Each job gets an instance of its own (a container with sshd, reached over SSH), thrown
    // away after it; GitLab's instance executor still calls that environment shared.
    let config = format!(
        r#"
concurrent = 4
[[runners]]
  name = "conformance-instance"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = 1
    max_use_count = 1
    max_instances = 4
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
    );
    conform_cases(
        "instance (a container per job over SSH)",
        flotilla_conformance::sample(),
        Some(config),
        "shared",
    );
}

#[test]
fn infra_a_sample_of_cases_holds_at_the_vm_level() {
    if !require(Infra::Qemu) {
        return;
    }
    let disk = flotilla_testkit::vms::vm_image().disk;
    let state = tempfile::Builder::new()
        .prefix("fl-conformance-vm-")
        .tempdir_in("/tmp")
        .expect("state dir");
    let _vms = flotilla_testkit::vms::VmGuard::new(state.path());
    let config = format!(
        r#"
concurrent = 2
[[runners]]
  name = "conformance-vm"
  executor = "flotilla"
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 2
    max_instances = 1
    isolation = "vm"
    [runners.autoscaler.vm_isolation]
      enabled = true
      image = "{disk}"
  [runners.vm]
    memory = "512Mi"
    network = false
    state_dir = "{state}"
"#,
        disk = disk.display(),
        state = state.path().display()
    );
    conform_cases(
        "vm (a full VM per job)",
        flotilla_conformance::sample(),
        Some(config),
        "disposable",
    );
}

/// Runs every pipeline case (one `flotilla exec` each) with `config` and checks every job's
/// status and the log lines each case names.
fn pipelines_conform(level: &str, config: Option<&str>) {
    let mut failures = Vec::new();
    for case in PIPELINES {
        let p = Project::with_pipeline(case.yaml);
        let config_path = p.outside().join("conformance.toml");
        let config_arg = config_path.to_string_lossy().into_owned();
        let mut args = vec![];
        if let Some(config) = config {
            std::fs::write(&config_path, config).expect("config written");
            args.extend(["--config", config_arg.as_str()]);
        }
        let run = p.exec(&args);
        let want = exec_support::statuses(case.statuses);
        if run.statuses() != want {
            let logs: Vec<String> = p.logs().into_values().collect();
            failures.push(format!(
                "{} ({}): statuses {:?}, expected {want:?}\n{run}\n{}",
                case.name,
                case.source,
                run.statuses(),
                logs.join("\n")
            ));
            continue;
        }
        for (job, text) in case.log_has {
            let log = p.log(&flotilla_ci::slugify(job));
            if !log.contains(text) {
                failures.push(format!(
                    "{} ({}): {job}'s log lacks {text:?}\n{log}",
                    case.name, case.source
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{level}: {} of {} pipelines differ from GitLab:\n\n{}",
        failures.len(),
        PIPELINES.len(),
        failures.join("\n\n")
    );
    eprintln!("{level}: {} pipeline cases hold", PIPELINES.len());
}

#[test]
fn every_pipeline_case_holds_at_the_shell_level() {
    pipelines_conform("shell (the embedded default)", None);
}

/// Names gitlab-ci-local gives a job that flotilla leaves unset on purpose, with the GitLab
/// source that says GitLab leaves them unset in a push pipeline without these features too.
const LEFT_UNSET: &[(&str, &str)] = &[
    (
        "CI_DEPENDENCY_PROXY_DIRECT_GROUP_IMAGE_PREFIX",
        "app/models/project.rb dependency_proxy_variables: only where the dependency proxy is enabled",
    ),
    (
        "CI_DEPENDENCY_PROXY_GROUP_IMAGE_PREFIX",
        "app/models/project.rb dependency_proxy_variables",
    ),
    (
        "CI_DEPENDENCY_PROXY_SERVER",
        "app/models/project.rb dependency_proxy_variables",
    ),
    (
        "CI_DEPENDENCY_PROXY_USER",
        "app/models/ci/build.rb dependency_proxy_variables: only with the dependency proxy",
    ),
    (
        "CI_ENVIRONMENT_ACTION",
        "lib/gitlab/ci/variables/builder.rb: only for a job with `environment:`",
    ),
    ("CI_ENVIRONMENT_NAME", "lib/gitlab/ci/variables/builder.rb"),
    (
        "CI_ENVIRONMENT_SLUG",
        "app/models/ci/build.rb persisted_environment_variables",
    ),
    ("CI_ENVIRONMENT_TIER", "lib/gitlab/ci/variables/builder.rb"),
    ("CI_ENVIRONMENT_URL", "lib/gitlab/ci/variables/builder.rb"),
    (
        "CI_REGISTRY",
        "app/models/project.rb container_registry_variables: only where a registry is enabled",
    ),
    (
        "CI_REGISTRY_IMAGE",
        "app/models/project.rb container_registry_variables",
    ),
];

/// An independent judge of the predefined variables: every name gitlab-ci-local gives a job
/// of a push pipeline (recorded by `scripts/differential-predefined-variables.py` in
/// `tests/fixtures/gitlab-ci-local-predefined.json`) flotilla gives it too, or is listed in
/// [`LEFT_UNSET`] with the GitLab source that says GitLab leaves it unset; a listed name that
/// flotilla now sets, or that gitlab-ci-local no longer sets, fails too (the list stays true).
#[test]
fn predefined_variables_are_judged_by_gitlab_ci_local() {
    let recorded: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/gitlab-ci-local-predefined.json"))
            .expect("the recording");
    let theirs: Vec<&str> = recorded["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(|n| n.as_str())
        .collect();
    assert!(theirs.len() > 40, "{theirs:?}");
    let p = Project::with_pipeline(
        "names:\n  script:\n    - env | cut -d= -f1 | grep -E '^(CI|GITLAB)' | sort | sed 's/^/predefined-name-/'\n",
    );
    p.git(&[
        "remote",
        "add",
        "origin",
        "https://gitlab.example.com/group/sub/proj.git",
    ]);
    p.exec(&[]).expect_code(0);
    let log = p.log("names");
    let ours: std::collections::BTreeSet<&str> = log
        .lines()
        .filter_map(|l| l.strip_prefix("predefined-name-"))
        .map(str::trim)
        .collect();
    let mut wrong = Vec::new();
    for name in &theirs {
        let listed = LEFT_UNSET.iter().find(|(n, _)| n == name);
        match (ours.contains(name), listed) {
            (false, None) => wrong.push(format!(
                "{name}: gitlab-ci-local sets it, flotilla does not"
            )),
            (true, Some((_, why))) => wrong.push(format!(
                "{name}: listed as left unset ({why}), but flotilla sets it"
            )),
            _ => {}
        }
    }
    for (name, _) in LEFT_UNSET {
        if !theirs.contains(name) {
            wrong.push(format!(
                "{name}: listed, but gitlab-ci-local no longer sets it"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\n\nflotilla's: {ours:?}",
        wrong.join("\n")
    );
}
