//! GitLab's job contract through `flotilla run` against the fake GitLab: every conformance case
//! that GitLab's job payload carries as it is (its steps; no `.gitlab-ci.yml` keys, which only
//! `exec` compiles) is enqueued as a job on a shell runner, and the final update GitLab
//! receives must carry the case's state and exit code, the trace its output.

use crate::run_support;

use flotilla_conformance::{CASES, Case};
use run_support::{Manager, write_local_config};
use std::time::Duration;

const TOKEN: &str = "glrt-conformance-token";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_payload_case_ends_as_on_gitlab() {
    let cases: Vec<&Case> = CASES.iter().filter(|c| c.extra.is_empty()).collect();
    assert!(cases.len() >= 80, "only {} cases", cases.len());
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 4);
    let m = Manager::start(&config, &[]);
    let runs = run_support::run_cases(&gl, TOKEN, &cases, None, || m.log()).await;
    run_support::assert_conform(&runs);
}
