//! Fuzzing the job payload decoder ([`ReceivedJob::parse`], which reads the id and token on
//! their own and then decodes the payload leniently) with proptest over mutated real
//! payloads:
//!
//! - the seeds are payloads as GitLab's Rails code renders them: the fake GitLab's (every
//!   `job_info` field, predefined variables, dependencies, reports), and one shaped after the
//!   expectations of Rails' `spec/requests/api/ci/runner/jobs_request_post_spec.rb`. That spec's
//!   factory gives `image.entrypoint` and `services[].command` as strings, which the
//!   `.gitlab-ci.yml` schema does not allow (arrays) and GitLab Runner's `[]string` would not
//!   decode either; the seed uses arrays (a string there is refused: it is not informational);
//! - mutations: a node anywhere replaced by a value of any JSON type, a key removed, bytes
//!   flipped, inserted or deleted, the document cut short.
//!
//! Properties: the decoder never panics; a payload whose only change is in an informational
//! field still decodes; whenever the document still has a numeric `id` and a string `token`,
//! both are read, even if the payload does not decode (so the job can be reported failed).
//! Each property prints how many inputs it ran.

use crate::runner_support;

use flotilla_gitlab::ReceivedJob;
use flotilla_testkit::fake_gitlab::JobBuilder;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use runner_support::*;
use serde_json::{Value, json};
use std::time::Duration;

/// Payloads as a GitLab hands them out.
async fn seeds() -> Vec<Value> {
    let fake = fake().start().await.unwrap();
    let producer = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("build")
            .masked_variable("API_KEY", "k-123456789")
            .script(["make", "make test"])
            .after_script(["echo cleanup"])
            .artifact_paths(["dist/"])
            .report("junit", ["report.xml"])
            .report("codequality", ["gl-code-quality-report.json"]),
    );
    let consumer = fake.enqueue(
        RUNNER_TOKEN,
        JobBuilder::new("deploy")
            .dependency(producer)
            .script(["./deploy.sh"]),
    );
    let c = client(&fake);
    for _ in 0..4 {
        let _ = c.request_job().await;
    }
    let mut out: Vec<Value> = [producer, consumer]
        .iter()
        .filter_map(|id| fake.job(*id).and_then(|j| j.payload))
        .collect();
    assert_eq!(out.len(), 2, "the fake handed both jobs out");
    for seed in &out {
        let job = ReceivedJob::parse(&serde_json::to_vec(seed).unwrap());
        assert!(job.payload.is_ok_and(|p| p.ignored.is_empty()), "{seed}");
    }
    out.push(json!({
        "id": 4242, "token": "glcbt-64_rspec_token", "allow_git_fetch": true,
        "job_info": {"id": 4242, "name": "spinach", "stage": "test", "project_id": 9,
                     "project_name": "gitlab-test"},
        "git_info": {"repo_url": "http://gitlab-ci-token:glcbt-64_rspec_token@localhost/g/p.git",
                     "ref": "master", "sha": "b83d6e391c22777fca1ed3012fce84f633d7fed0",
                     "before_sha": "0000000000000000000000000000000000000000",
                     "ref_type": "branch",
                     "refspecs": ["+refs/pipelines/5:refs/pipelines/5",
                                  "+refs/heads/master:refs/remotes/origin/master"],
                     "depth": 20},
        "runner_info": {"timeout": 3600},
        "variables": [{"key": "CI_JOB_NAME", "value": "spinach", "public": true, "masked": false},
                      {"key": "DB_NAME", "value": "postgres", "public": true, "masked": false}],
        "steps": [{"name": "script", "script": ["echo"], "timeout": 3600, "when": "on_success",
                   "allow_failure": false},
                  {"name": "after_script", "script": ["ls", "date"], "timeout": 3600,
                   "when": "always", "allow_failure": true}],
        "hooks": [{"name": "pre_get_sources_script", "script": ["echo 'hello'"]}],
        "image": {"name": "image:1.0", "entrypoint": ["/bin/sh"], "ports": [], "pull_policy": null},
        "services": [{"name": "postgres", "entrypoint": null, "alias": null, "command": null,
                      "ports": [], "variables": null, "pull_policy": null},
                     {"name": "docker:stable-dind", "entrypoint": ["/bin/sh"], "alias": "docker",
                      "command": ["sleep", "30"], "ports": [], "variables": [], "pull_policy": null}],
        "artifacts": [{"name": "artifacts_file", "untracked": false, "paths": ["out/"],
                       "when": "always", "expire_in": "7d", "artifact_type": "archive",
                       "artifact_format": "zip"}],
        "cache": [{"key": "cache_key-protected", "untracked": false, "paths": ["vendor/*"],
                   "policy": "pull-push", "when": "on_success"}],
        "credentials": [],
        "features": {"trace_sections": true, "failure_reasons": ["script_failure"]},
        "dependencies": []
    }));
    assert!(
        ReceivedJob::parse(&serde_json::to_vec(&out[2]).unwrap())
            .payload
            .is_ok()
    );
    out
}

/// One step of a path in a JSON document.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Every path to a node of `v` (the root excluded).
fn all_paths(v: &Value, prefix: &mut Vec<Step>, out: &mut Vec<Vec<Step>>) {
    match v {
        Value::Object(o) => {
            for (k, child) in o {
                prefix.push(Step::Key(k.clone()));
                out.push(prefix.clone());
                all_paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                prefix.push(Step::Index(i));
                out.push(prefix.clone());
                all_paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'a>(v: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    let mut cur = v;
    for s in path {
        cur = match (s, cur) {
            (Step::Key(k), Value::Object(o)) => o.get_mut(k)?,
            (Step::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// A random JSON value of any type.
fn random_value(rng: &mut StdRng, depth: u32) -> Value {
    match rng.random_range(0..if depth > 2 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.random::<bool>()),
        2 => json!(rng.random::<i64>()),
        3 => json!(rng.random::<f64>() * 1e6 - 5e5),
        4 => json!(
            [
                "",
                "x",
                "+Inf",
                "1/2",
                "ü",
                "\u{0}",
                "9999999999999999999999"
            ][rng.random_range(0..7)]
        ),
        5 => json!(u64::MAX),
        6 => Value::Array(
            (0..rng.random_range(0..3))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut o = serde_json::Map::new();
            for i in 0..rng.random_range(0..3) {
                o.insert(format!("k{i}"), random_value(rng, depth + 1));
            }
            Value::Object(o)
        }
    }
}

/// Replaces or removes up to three nodes of `v`.
fn mutate_structure(v: &mut Value, rng: &mut StdRng) {
    for _ in 0..rng.random_range(1..=3) {
        let mut paths = Vec::new();
        all_paths(v, &mut Vec::new(), &mut paths);
        if paths.is_empty() {
            return;
        }
        let path = paths[rng.random_range(0..paths.len())].clone();
        if rng.random_range(0..4) == 0 {
            let (last, parent) = path.split_last().unwrap();
            if let (Step::Key(k), Some(Value::Object(o))) = (last, node_mut(v, parent)) {
                o.remove(k);
                continue;
            }
        }
        if let Some(n) = node_mut(v, &path) {
            *n = random_value(rng, 0);
        }
    }
}

/// Flips, inserts or deletes bytes, or cuts the document short.
fn mutate_bytes(mut b: Vec<u8>, rng: &mut StdRng) -> Vec<u8> {
    for _ in 0..rng.random_range(1..=4) {
        if b.is_empty() {
            break;
        }
        let i = rng.random_range(0..b.len());
        match rng.random_range(0..4) {
            0 => b[i] ^= 1 << rng.random_range(0..8),
            1 => b.insert(i, rng.random()),
            2 => {
                b.remove(i);
            }
            _ => b.truncate(i),
        }
    }
    b
}

/// The informational paths of the decoder (see `flotilla_job::model::lenient`).
fn informational(v: &Value, rng: &mut StdRng) -> Option<Vec<Step>> {
    let mut candidates: Vec<Vec<Step>> = Vec::new();
    if let Some(Value::Object(info)) = v.get("job_info") {
        for k in info.keys() {
            candidates.push(vec![Step::Key("job_info".into()), Step::Key(k.clone())]);
        }
    }
    for (a, b) in [
        ("runner_info", "uuid"),
        ("features", "failure_reasons"),
        ("features", "trace_sections"),
        ("git_info", "protected"),
    ] {
        candidates.push(vec![Step::Key(a.into()), Step::Key(b.into())]);
    }
    for k in [
        "secrets",
        "inputs",
        "policy_options",
        "suspend_options",
        "job_info",
    ] {
        candidates.push(vec![Step::Key(k.into())]);
    }
    (!candidates.is_empty()).then(|| candidates[rng.random_range(0..candidates.len())].clone())
}

fn set(v: &mut Value, path: &[Step], value: Value) {
    let (last, parent) = path.split_last().unwrap();
    match (last, node_mut(v, parent)) {
        (Step::Key(k), Some(Value::Object(o))) => {
            o.insert(k.clone(), value);
        }
        (Step::Index(i), Some(Value::Array(a))) if *i < a.len() => a[*i] = value,
        _ => {}
    }
}

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_payload_decoder_survives_mutated_real_payloads() {
    let seeds = seeds().await;
    let started = std::time::Instant::now();
    let mut total = 0u64;

    // 1. Any structural change: no panic; a readable id and token are always read.
    let n = std::cell::Cell::new(0u64);
    runner(20_000)
        .run(&(0..seeds.len(), proptest::num::u64::ANY), |(i, seed)| {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut v = seeds[i].clone();
            mutate_structure(&mut v, &mut rng);
            let bytes = serde_json::to_vec(&v).unwrap();
            let job = ReceivedJob::parse(&bytes);
            n.set(n.get() + 1);
            if let (Some(id), Some(token)) = (
                v.get("id").and_then(Value::as_i64),
                v.get("token")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty()),
            ) && (job.id != Some(id)
                || job.token.as_ref().map(|t| t.expose().as_str()) != Some(token))
            {
                return Err(TestCaseError::fail(format!(
                    "id {id} / token not read from a payload that has them: {:?}",
                    job.payload.err()
                )));
            }
            Ok(())
        })
        .unwrap();
    eprintln!("structural mutations: {} inputs, no panic", n.get());
    total += n.get();

    // 2. Changes confined to informational fields never fail the job.
    let n = std::cell::Cell::new(0u64);
    runner(10_000)
        .run(&(0..seeds.len(), proptest::num::u64::ANY), |(i, seed)| {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut v = seeds[i].clone();
            for _ in 0..rng.random_range(1..=3) {
                if let Some(path) = informational(&v, &mut rng) {
                    let value = random_value(&mut rng, 0);
                    set(&mut v, &path, value);
                }
            }
            let job = ReceivedJob::parse(&serde_json::to_vec(&v).unwrap());
            n.set(n.get() + 1);
            match job.payload {
                Ok(_) => Ok(()),
                Err(e) => Err(TestCaseError::fail(format!(
                    "an informational change failed the payload: {e}\n{v}"
                ))),
            }
        })
        .unwrap();
    eprintln!("informational mutations: {} inputs, all decoded", n.get());
    total += n.get();

    // 3. Bytes flipped, inserted, deleted, cut: no panic.
    let n = std::cell::Cell::new(0u64);
    let bytes: Vec<Vec<u8>> = seeds
        .iter()
        .map(|v| serde_json::to_vec(v).unwrap())
        .collect();
    runner(20_000)
        .run(&(0..seeds.len(), proptest::num::u64::ANY), |(i, seed)| {
            let mut rng = StdRng::seed_from_u64(seed);
            let b = mutate_bytes(bytes[i].clone(), &mut rng);
            let _ = ReceivedJob::parse(&b);
            n.set(n.get() + 1);
            Ok(())
        })
        .unwrap();
    eprintln!("byte mutations: {} inputs, no panic", n.get());
    total += n.get();
    eprintln!(
        "payload fuzz: {total} inputs without a panic in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(total >= 50_000);
    assert!(started.elapsed() < Duration::from_secs(120));
}
