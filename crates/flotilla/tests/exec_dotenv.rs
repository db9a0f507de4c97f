//! `flotilla exec` passes `artifacts:reports:dotenv` variables on, as GitLab does: to the jobs
//! that take the reporting job's artifacts (through `needs` or `dependencies`), ranked above
//! their own `.gitlab-ci.yml` variables; not to jobs that do not take them.

use crate::exec_support;

use exec_support::{Project, statuses};

const PIPELINE: &str = r#"
stages: [build, deploy]
build:
  stage: build
  script:
    - echo "BUILD_VERSION=4.2.$CI_PIPELINE_ID" > build.env
    - echo "BUILD_HOST = local " >> build.env
  artifacts:
    reports:
      dotenv: build.env
deploy:
  stage: deploy
  needs: [build]
  variables:
    BUILD_HOST: from-yaml
  script:
    - echo "deploying $BUILD_VERSION built on $BUILD_HOST"
unrelated:
  stage: deploy
  needs: []
  script:
    - echo "version is [${BUILD_VERSION:-unset}]"
"#;

#[test]
fn dotenv_reports_reach_the_jobs_that_take_the_artifacts() {
    let p = Project::with_pipeline(PIPELINE);
    let run = p.exec(&[]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[
            ("build", "passed"),
            ("deploy", "passed"),
            ("unrelated", "passed")
        ])
    );
    let deploy = p.log("deploy");
    assert!(
        deploy.contains("deploying 4.2.") && deploy.contains("built on local"),
        "{deploy}"
    );
    assert!(!deploy.contains("from-yaml"), "{deploy}");
    let unrelated = p.log("unrelated");
    assert!(unrelated.contains("version is [unset]"), "{unrelated}");
}

/// A variable given for the run (`--isolation`, `--variable`) outranks what a dependency's
/// dotenv report passes on, as GitLab ranks pipeline variables above dotenv ones: a job's
/// dotenv cannot pick the next job's isolation level.
#[test]
fn given_variables_outrank_a_dependencys_dotenv() {
    let p = Project::with_pipeline(
        r#"
stages: [one, two]
writer:
  stage: one
  script:
    - echo "FLOTILLA_ISOLATION=vm" >> build.env
    - echo "GREETING=from-dotenv" >> build.env
  artifacts:
    reports:
      dotenv: build.env
reader:
  stage: two
  script:
    - echo "greeting $GREETING"
"#,
    );
    let run = p.exec(&["--isolation", "shell", "--variable", "GREETING=given"]);
    run.expect_code(0);
    assert_eq!(
        run.statuses(),
        statuses(&[("writer", "passed"), ("reader", "passed")])
    );
    assert!(p.log("reader").contains("\ngreeting given"), "{run}");
}
