//! Cases that take more than one job: artifacts and dotenv reports passed along, caches kept
//! between jobs, and the pipeline's shape (`needs`, `when`, `rules`, `parallel`, `inherit`).
//! Each is a whole `.gitlab-ci.yml` with the status GitLab gives every job in it; what a job
//! must find is checked by its own script (a wrong finding fails the job), so the statuses
//! carry the verdict.

/// One pipeline and how GitLab ends each of its jobs.
#[derive(Debug, Clone, Copy)]
pub struct PipelineCase {
    /// The case's name.
    pub name: &'static str,
    /// The pipeline.
    pub yaml: &'static str,
    /// Every job GitLab creates for it, with its status in `flotilla exec`'s words
    /// (`passed`, `failed`, `failed (allowed)`, `skipped`). A job `rules` leave out is not
    /// listed.
    pub statuses: &'static [(&'static str, &'static str)],
    /// Text a job's log must contain: `(job, text)`.
    pub log_has: &'static [(&'static str, &'static str)],
    /// Where GitLab fixes this behaviour.
    pub source: &'static str,
}

/// Every pipeline case.
pub static PIPELINES: &[PipelineCase] = &[
    PipelineCase {
        name: "artifacts-paths-and-exclude",
        yaml: r#"
stages: [build, test]
build:
  stage: build
  script:
    - mkdir -p out
    - echo a > out/a.txt
    - echo b > out/b.log
  artifacts:
    paths: [out/]
    exclude: ["out/*.log"]
test:
  stage: test
  script:
    - test -f out/a.txt
    - test ! -e out/b.log
"#,
        statuses: &[("build", "passed"), ("test", "passed")],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#artifactspaths, #artifactsexclude",
    },
    PipelineCase {
        name: "artifacts-untracked",
        yaml: r"
stages: [build, test]
build:
  stage: build
  script:
    - echo made > made-by-the-job.txt
  artifacts:
    untracked: true
test:
  stage: test
  script:
    - test -f made-by-the-job.txt
",
        statuses: &[("build", "passed"), ("test", "passed")],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#artifactsuntracked",
    },
    PipelineCase {
        name: "artifacts-when",
        yaml: r"
stages: [build, test]
on-failure:
  stage: build
  allow_failure: true
  script:
    - echo kept > on-failure.txt
    - exit 1
  artifacts:
    when: on_failure
    paths: [on-failure.txt]
on-success:
  stage: build
  allow_failure: true
  script:
    - echo lost > on-success.txt
    - exit 1
  artifacts:
    paths: [on-success.txt]
check:
  stage: test
  script:
    - test -f on-failure.txt
    - test ! -e on-success.txt
",
        statuses: &[
            ("on-failure", "failed (allowed)"),
            ("on-success", "failed (allowed)"),
            ("check", "passed"),
        ],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#artifactswhen",
    },
    PipelineCase {
        name: "dotenv-reaches-dependents",
        yaml: r#"
stages: [build, test]
build:
  stage: build
  script:
    - echo "BUILT_VERSION=1.2.3" > build.env
  artifacts:
    reports:
      dotenv: build.env
with-it:
  stage: test
  script:
    - test "$BUILT_VERSION" = 1.2.3
without-it:
  stage: test
  dependencies: []
  script:
    - test -z "${BUILT_VERSION-}"
"#,
        statuses: &[
            ("build", "passed"),
            ("with-it", "passed"),
            ("without-it", "passed"),
        ],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/artifacts_reports/#artifactsreportsdotenv",
    },
    PipelineCase {
        name: "needs-runs-past-a-failed-stage",
        yaml: r#"
stages: [build, test]
fails:
  stage: build
  script: [exit 1]
independent:
  stage: test
  needs: []
  script: ["true"]
waits-for-the-stage:
  stage: test
  script: ["true"]
"#,
        statuses: &[
            ("fails", "failed"),
            ("independent", "passed"),
            ("waits-for-the-stage", "skipped"),
        ],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#needs",
    },
    PipelineCase {
        name: "needs-without-artifacts",
        yaml: r"
stages: [build, test]
build:
  stage: build
  script: [echo x > produced.txt]
  artifacts:
    paths: [produced.txt]
with:
  stage: test
  needs: [build]
  script: [test -f produced.txt]
without:
  stage: test
  needs:
    - job: build
      artifacts: false
  script: [test ! -e produced.txt]
",
        statuses: &[
            ("build", "passed"),
            ("with", "passed"),
            ("without", "passed"),
        ],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#needsartifacts",
    },
    PipelineCase {
        name: "when-after-a-failure",
        yaml: r#"
stages: [build, test]
fails:
  stage: build
  script: [exit 1]
always:
  stage: test
  when: always
  script: ["true"]
on-failure:
  stage: test
  when: on_failure
  script: ["true"]
on-success:
  stage: test
  script: ["true"]
"#,
        statuses: &[
            ("fails", "failed"),
            ("always", "passed"),
            ("on-failure", "passed"),
            ("on-success", "skipped"),
        ],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#when",
    },
    PipelineCase {
        name: "on-failure-skipped-after-success",
        yaml: r#"
stages: [build, test]
passes:
  stage: build
  script: ["true"]
on-failure:
  stage: test
  when: on_failure
  script: ["true"]
"#,
        statuses: &[("passes", "passed"), ("on-failure", "skipped")],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#when",
    },
    PipelineCase {
        name: "rules-if-on-variables",
        yaml: r#"
variables:
  FLAG: "yes"
included:
  rules:
    - if: $FLAG == "yes"
  script: ["true"]
left-out:
  rules:
    - if: $FLAG == "no"
  script: ["true"]
"#,
        statuses: &[("included", "passed")],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#rulesif",
    },
    PipelineCase {
        name: "rules-allow-failure",
        yaml: r"
soft:
  rules:
    - if: $CI_COMMIT_SHA
      allow_failure: true
  script: [exit 4]
",
        statuses: &[("soft", "failed (allowed)")],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#rulesallow_failure",
    },
    PipelineCase {
        name: "parallel-node-index",
        yaml: r#"
split:
  parallel: 3
  script:
    - test "$CI_NODE_TOTAL" = 3
    - echo "node-$CI_NODE_INDEX-of-$CI_NODE_TOTAL"
"#,
        statuses: &[
            ("split 1/3", "passed"),
            ("split 2/3", "passed"),
            ("split 3/3", "passed"),
        ],
        log_has: &[("split 2/3", "\nnode-2-of-3\n")],
        source: "docs.gitlab.com/ci/yaml/#parallel",
    },
    PipelineCase {
        name: "parallel-matrix",
        yaml: r#"
build:
  parallel:
    matrix:
      - TARGET: [linux, darwin]
        MODE: [debug]
  script:
    - echo "building-$TARGET-$MODE"
"#,
        statuses: &[
            ("build: [linux, debug]", "passed"),
            ("build: [darwin, debug]", "passed"),
        ],
        log_has: &[("build: [darwin, debug]", "\nbuilding-darwin-debug\n")],
        source: "docs.gitlab.com/ci/yaml/#parallelmatrix",
    },
    PipelineCase {
        name: "inherit-variables-and-default",
        yaml: r#"
variables:
  GLOBAL: from-global
default:
  before_script:
    - echo "default-before-ran"
inherits:
  script:
    - test "$GLOBAL" = from-global
inherits-nothing:
  inherit:
    variables: false
    default: false
  script:
    - test -z "${GLOBAL-}"
inherits-some:
  inherit:
    default: [image]
  script:
    - test "$GLOBAL" = from-global
"#,
        statuses: &[
            ("inherits", "passed"),
            ("inherits-nothing", "passed"),
            ("inherits-some", "passed"),
        ],
        log_has: &[("inherits", "\ndefault-before-ran\n")],
        source: "docs.gitlab.com/ci/yaml/#inherit",
    },
    PipelineCase {
        name: "workflow-name-is-the-pipeline-name",
        yaml: r#"
variables:
  KIND: nightly
workflow:
  name: "Build $KIND"
named:
  script:
    - test "$CI_PIPELINE_NAME" = "Build nightly"
"#,
        statuses: &[("named", "passed")],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#workflowname; docs.gitlab.com/ci/variables/predefined_variables/ (CI_PIPELINE_NAME)",
    },
    PipelineCase {
        name: "cache-kept-between-jobs",
        yaml: r#"
stages: [first, second]
fill:
  stage: first
  cache:
    key: shared-key
    paths: [cached/]
    policy: push
  script:
    - mkdir -p cached
    - echo kept > cached/file.txt
read:
  stage: second
  cache:
    key: shared-key
    paths: [cached/]
    policy: pull
  script:
    - test "$(cat cached/file.txt)" = kept
other-key:
  stage: second
  cache:
    key: another-key
    paths: [cached/]
    policy: pull
  script:
    - test ! -e cached/file.txt
fallback:
  stage: second
  cache:
    key: missing-key
    fallback_keys: [shared-key]
    paths: [cached/]
    policy: pull
  script:
    - test -f cached/file.txt
"#,
        statuses: &[
            ("fill", "passed"),
            ("read", "passed"),
            ("other-key", "passed"),
            ("fallback", "passed"),
        ],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#cache, #cachepolicy, #cachefallback_keys",
    },
    PipelineCase {
        name: "cache-untracked",
        yaml: r"
stages: [first, second]
fill:
  stage: first
  cache:
    key: untracked-key
    untracked: true
  script:
    - echo u > untracked-cache.txt
read:
  stage: second
  cache:
    key: untracked-key
    untracked: true
    policy: pull
  script:
    - test -f untracked-cache.txt
",
        statuses: &[("fill", "passed"), ("read", "passed")],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#cacheuntracked",
    },
    PipelineCase {
        name: "cache-not-saved-on-failure-by-default",
        yaml: r"
stages: [first, second]
fill:
  stage: first
  allow_failure: true
  cache:
    key: failure-key
    paths: [cached/]
  script:
    - mkdir -p cached
    - echo x > cached/f.txt
    - exit 1
read:
  stage: second
  cache:
    key: failure-key
    paths: [cached/]
    policy: pull
  script:
    - test ! -e cached/f.txt
",
        statuses: &[("fill", "failed (allowed)"), ("read", "passed")],
        log_has: &[],
        source: "docs.gitlab.com/ci/yaml/#cachewhen",
    },
];
