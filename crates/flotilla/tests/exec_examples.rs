//! The pipelines in `examples/`, run by the real `flotilla exec` on the embedded default
//! (this host, shell isolation) in a temporary copy of each, and the `services` example on a
//! docker fleet with docker isolation (`infra_`).

use crate::exec_support;

use exec_support::{Project, statuses};
use flotilla_testkit::infra::{Infra, require};

#[test]
fn hello_passes_its_artifact_along() {
    let p = Project::example("hello");
    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("build", "passed"), ("test", "passed")])
    );
    assert!(run.stdout.contains("pipeline passed in "), "{run}");
    let build = p.log("build");
    assert!(build.contains("hello from build on Linux"), "{build}");
    let test = p.log("test");
    assert!(
        test.contains("Downloading artifacts for build (1) succeeded"),
        "{test}"
    );
    assert!(
        test.contains("\nbuilt at "),
        "the artifact's content: {test}"
    );
    assert!(test.contains("the working tree is here"), "{test}");
    assert_eq!(p.logs().len(), 2, "a log per job");
    // Progress goes to stderr as plain lines (not a terminal here).
    assert!(run.stderr.contains("started build"), "{run}");
    assert!(run.stderr.contains("test: passed in "), "{run}");
}

#[test]
fn multi_stage_passes_artifacts_and_keeps_its_cache_between_runs() {
    let p = Project::example("multi-stage");
    let first = p.exec(&[]);
    first.expect_code(0);
    let rows = first.rows();
    let expected = [
        ("build", "build", "passed"),
        ("unit-test", "test", "passed"),
        ("lint", "test", "failed (allowed)"),
        ("package", "deploy", "passed"),
        ("deploy", "deploy", "passed"),
    ];
    assert_eq!(rows.len(), expected.len(), "{first}");
    for (job, stage, status) in expected {
        let row = &rows[job];
        assert_eq!(
            (row.stage.as_str(), row.status.as_str()),
            (stage, status),
            "{job}"
        );
    }
    let build = p.log("build");
    assert!(build.contains("No cache found for deps-main"), "{build}");
    assert!(
        build.contains("no cached dependencies: fetching them"),
        "{build}"
    );
    assert!(build.contains("Created cache deps-main"), "{build}");
    // Artifacts: build's dist/ reaches the later stages, unit-test's report reaches deploy.
    let deploy = p.log("deploy");
    assert!(deploy.contains("demo-app built from 1.2.3"), "{deploy}");
    assert!(deploy.contains("unit tests passed"), "{deploy}");
    assert!(deploy.contains("deployed demo-app"), "{deploy}");
    let package = p.log("package");
    assert!(package.contains("packaged dist/app.txt"), "{package}");
    // after_script runs and sees the job's status.
    let unit = p.log("unit-test");
    assert!(
        unit.contains("after_script sees CI_JOB_STATUS=success"),
        "{unit}"
    );
    let lint = p.log("lint");
    assert!(lint.contains("lint found a style problem"), "{lint}");
    assert!(lint.contains("exit code 3"), "{lint}");
    // `needs`: lint waits for nothing, package only for build; deploy waits for the stages
    // before it.
    let list = p.exec(&["--list"]);
    list.expect_code(0);
    let needs = |job: &str| {
        let line = list
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("{job} ")))
            .unwrap_or_else(|| panic!("{job} in {list}"));
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .nth(3)
            .unwrap()
            .to_string()
    };
    assert_eq!(needs("lint"), "-");
    assert_eq!(needs("package"), "build");
    assert_eq!(needs("deploy"), "(stages before)");
    let events: Vec<&str> = first
        .stderr
        .lines()
        .filter_map(|l| l.split("] ").nth(1))
        .collect();
    let at = |prefix: &str| {
        events
            .iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {events:?}"))
    };
    assert!(at("started deploy") > at("unit-test: passed"));
    assert!(at("started deploy") > at("lint: failed"));
    assert!(at("started package") > at("build: passed"));

    // The cache lives in the project, so the second run restores it.
    assert!(p.path().join(".flotilla/cache").is_dir());
    let second = p.exec(&[]);
    second.expect_code(0);
    assert_eq!(p.pipelines().len(), 2, "each run has its own log directory");
    let build = p.log("build");
    assert!(
        build.contains("Successfully extracted cache deps-main"),
        "{build}"
    );
    assert!(
        build.contains("dependencies restored from the cache (fetched at "),
        "{build}"
    );
}

#[test]
fn matrix_expands_to_seven_jobs_and_collects_their_artifacts() {
    let p = Project::example("matrix");
    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("test: [linux, postgres]", "passed"),
            ("test: [linux, sqlite]", "passed"),
            ("test: [bsd, postgres]", "passed"),
            ("test: [bsd, sqlite]", "passed"),
            ("shard 1/3", "passed"),
            ("shard 2/3", "passed"),
            ("shard 3/3", "passed"),
            ("report", "passed"),
        ])
    );
    let bsd = p.log("test---bsd--sqlite");
    assert!(bsd.contains("\ntesting on bsd with sqlite"), "{bsd}");
    let shard = p.log("shard-2-3");
    assert!(shard.contains("\nshard 2 of 3"), "{shard}");
    let report = p.log("report");
    for file in [
        "bsd-postgres.txt",
        "bsd-sqlite.txt",
        "linux-postgres.txt",
        "linux-sqlite.txt",
        "shard-1.txt",
        "shard-2.txt",
        "shard-3.txt",
    ] {
        assert!(report.contains(&format!("\n{file}")), "{file} in {report}");
    }
}

#[test]
fn rules_choose_jobs_by_branch_and_variables() {
    let p = Project::example("rules");
    // On main: build and test (full suite); deploy, release, preview and nightly are out.
    let list = p.exec(&["--list"]);
    list.expect_code(0);
    assert!(list.stdout.starts_with("JOB "), "{list}");
    for out in [
        "not in this pipeline: deploy (the rule at .gitlab-ci.yml:",
        "not in this pipeline: preview (only at",
        "not in this pipeline: nightly (only at",
    ] {
        assert!(list.stdout.contains(out), "{out:?} in {list}");
    }
    assert!(
        list.stdout
            .lines()
            .any(|l| l.starts_with("release ") && l.contains(" manual (not run) ")),
        "the manual job is listed: {list}"
    );
    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("build", "passed"), ("test", "passed")])
    );
    assert!(p.log("test").contains("\nrunning the full test suite"));

    // A variable from the command line reaches the rules and the job; --manual adds release.
    let run = p.exec(&["--variable", "DEPLOY_TARGET=staging", "--manual"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("build", "passed"),
            ("test", "passed"),
            ("deploy", "passed"),
            ("release", "passed"),
        ])
    );
    assert!(p.log("deploy").contains("\ndeploying to staging"));
    assert!(p.log("release").contains("\nreleasing "));

    // On a feature branch: the quick suite, and the only/except job.
    p.git(&["checkout", "-q", "-b", "feature/login"]);
    let run = p.exec(&["--variable", "NIGHTLY=1"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("build", "passed"),
            ("test", "passed"),
            ("preview", "passed"),
            ("nightly", "passed"),
        ])
    );
    assert!(p.log("test").contains("\nrunning the quick test suite"));
    assert!(p.log("preview").contains("\npreview of feature/login"));
    assert!(p.log("build").contains("\nbuilding feature/login"));
}

/// The docker provider's group name in the example's config, replaced per test run.
const EXAMPLE_GROUP: &str = "flotilla-services-example";

/// Replaces every `local/flotilla-<kind>:<tag>` in `text` by `image`.
fn retag(text: &str, kind: &str, image: &str) -> String {
    let re = regex_lite(kind);
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(&re) {
        out.push_str(&rest[..start]);
        let after = &rest[start + re.len()..];
        let tag_len = after
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '.' && c != '_' && c != '-')
            .unwrap_or(after.len());
        out.push_str(image);
        rest = &after[tag_len..];
    }
    out.push_str(rest);
    out
}

fn regex_lite(kind: &str) -> String {
    format!("local/flotilla-{kind}:")
}

fn group_containers(name: &str) -> Vec<String> {
    flotilla_testkit::containers::labelled(&format!("flotilla.group={name}"))
}

#[test]
fn infra_services_example_runs_on_the_docker_fleet_and_leaves_nothing() {
    if !require(Infra::Docker) {
        return;
    }
    let instance = flotilla_testkit::images::instance_image();
    let busybox = flotilla_testkit::images::busybox_image();
    let p = Project::example("services");
    let group = format!("exec-services-{}", std::process::id());
    // Removes the group's containers when the test ends, passed or not.
    let _guard = flotilla_testkit::containers::LabelGuard::new(format!("flotilla.group={group}"));
    let config = std::fs::read_to_string(p.path().join("config.toml")).unwrap();
    assert!(config.contains(EXAMPLE_GROUP));
    let config = retag(&config, "instance", &instance);
    let config = retag(&config, "busybox", &busybox);
    p.write("config.toml", &config.replace(EXAMPLE_GROUP, &group));
    let pipeline = std::fs::read_to_string(p.path().join(".gitlab-ci.yml")).unwrap();
    p.write(".gitlab-ci.yml", &retag(&pipeline, "busybox", &busybox));

    let run = p.exec(&["--config", "config.toml"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("build", "passed"), ("test", "passed")])
    );
    assert!(run.stderr.contains("docker isolation"), "{run}");
    let build = p.log("build");
    assert!(
        build.contains(&format!("Using docker isolation with image {busybox}")),
        "{build}"
    );
    let test = p.log("test");
    assert!(test.contains("\nhello from build"), "the artifact: {test}");
    assert!(test.contains("web-one:8080 says one"), "{test}");
    assert!(test.contains("web-two:8080 says two"), "{test}");
    assert!(test.contains("Job succeeded"), "{test}");
    // delete_instances_on_shutdown: the instance (and the job containers inside it) are gone.
    assert_eq!(group_containers(&group), Vec::<String>::new());
}

#[test]
fn retag_replaces_every_reference() {
    assert_eq!(
        retag(
            "image: local/flotilla-busybox:abc123\n  - name: local/flotilla-busybox:abc123\n",
            "busybox",
            "local/flotilla-busybox:f00"
        ),
        "image: local/flotilla-busybox:f00\n  - name: local/flotilla-busybox:f00\n"
    );
    assert_eq!(
        retag("image = \"local/flotilla-instance:1\"", "instance", "x:2"),
        "image = \"x:2\""
    );
}
