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
