//! `flotilla run` with `[runners.cache]` naming an S3 bucket (moto's): a job's cache lands in
//! the bucket under GitLab's object name, boto3 reads it there, and the next job restores it
//! from there (the manager's own cache directory stays empty).

use crate::run_support;

use flotilla_testkit::fake_gitlab::JobBuilder;
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::moto::Moto;
use run_support::{Manager, write_local_config};
use std::process::Command;
use std::time::Duration;

const TOKEN: &str = "glrt-run-cache-token";
const BUCKET: &str = "flotilla-e2e";

/// boto3, through the cache crate's judge script and the Python of moto's environment.
fn judge(args: &[&str]) -> serde_json::Value {
    let python = flotilla_testkit::infra::moto_server_path()
        .expect("moto_server")
        .with_file_name("python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../cache/tests/s3_judge.py");
    let out = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .expect("the judge runs");
    assert!(
        out.status.success(),
        "s3_judge.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or(serde_json::Value::Null)
}

fn cache_of(paths: &[&str], policy: &str) -> serde_json::Value {
    serde_json::json!([{
        "key": "deps", "paths": paths, "policy": policy, "untracked": false,
        "when": "on_success", "fallback_keys": []
    }])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infra_moto_a_jobs_cache_goes_to_the_bucket_and_comes_back_from_it() {
    if !require(Infra::Moto) {
        return;
    }
    let moto = Moto::start().await.expect("moto");
    let endpoint = moto.endpoint();
    judge(&["create-bucket", &endpoint, "us-east-1", BUCKET]);
    let gl = run_support::fake_gitlab(&[TOKEN], Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), TOKEN, 2);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "  [runners.cache]\n    Type = \"s3\"\n    Path = \"e2e\"\n    [runners.cache.s3]\n      \
         ServerAddress = \"{}\"\n      Insecure = true\n      AccessKey = \"testing\"\n      \
         SecretKey = \"testing\"\n      BucketName = \"{BUCKET}\"\n",
        moto.addr()
    ));
    std::fs::write(&config, text).unwrap();
    let mut m = Manager::start(&config, &[]);

    let push = gl.enqueue(
        TOKEN,
        JobBuilder::new("push")
            .script([
                "mkdir -p vendor",
                "echo dependency-from-the-first-job > vendor/dep.txt",
            ])
            .field("cache", cache_of(&["vendor/"], "push")),
    );
    assert!(
        gl.wait_finished(&[push], Duration::from_secs(60)).await,
        "the first job did not finish; manager log:\n{}",
        m.log()
    );
    let trace = gl.job(push).unwrap().trace_text();
    assert_eq!(
        gl.job(push).unwrap().final_update.unwrap().state,
        "success",
        "{trace}"
    );
    assert!(trace.contains("Created cache"), "{trace}");

    // GitLab's object name: <Path>/runner/<short token>/project/<id>/<key>.
    let object = format!(
        "e2e/runner/{}/project/7/deps",
        flotilla_monitor::short_token(TOKEN)
    );
    let got = judge(&["get", &endpoint, "us-east-1", BUCKET, &object]);
    let hex = got["hex"]
        .as_str()
        .unwrap_or_else(|| panic!("{object}: {got}"));
    assert!(hex.starts_with("504b"), "a zip archive: {hex}");

    // Another job, another build directory: restored from the bucket.
    let pull = gl.enqueue(
        TOKEN,
        JobBuilder::new("pull")
            .script(["cat vendor/dep.txt"])
            .field("cache", cache_of(&["vendor/"], "pull")),
    );
    assert!(
        gl.wait_finished(&[pull], Duration::from_secs(60)).await,
        "the second job did not finish; manager log:\n{}",
        m.log()
    );
    let trace = gl.job(pull).unwrap().trace_text();
    assert!(
        trace.contains("Successfully extracted cache")
            && trace.contains("dependency-from-the-first-job"),
        "{trace}"
    );
    assert!(
        !dir.path().join("state/cache/local-shell").exists(),
        "the manager's own cache directory is not used"
    );
    // The bucket's keys never reach the log.
    assert!(!m.log().contains("SecretKey = \"testing\""));
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}

/// `[[runners]] cache_dir`: without a distributed cache, the runner's job caches are kept in
/// that directory (GitLab Runner's shell executor keeps them there), not in the state
/// directory, and the next job restores from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runners_cache_dir_keeps_its_caches() {
    let token = "glrt-run-cache-dir-token";
    let gl = run_support::fake_gitlab(&[token], Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_local_config(dir.path(), gl.url(), token, 2);
    let caches = dir.path().join("caches-here");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!("  cache_dir = \"{}\"\n", caches.display()));
    std::fs::write(&config, text).unwrap();
    let mut m = Manager::start(&config, &[]);
    let push = gl.enqueue(
        token,
        JobBuilder::new("push")
            .script(["mkdir -p vendor", "echo kept-in-cache-dir > vendor/dep.txt"])
            .field("cache", cache_of(&["vendor/"], "push")),
    );
    assert!(
        gl.wait_finished(&[push], Duration::from_secs(60)).await,
        "the first job did not finish; manager log:\n{}",
        m.log()
    );
    let pull = gl.enqueue(
        token,
        JobBuilder::new("pull")
            .script(["cat vendor/dep.txt"])
            .field("cache", cache_of(&["vendor/"], "pull")),
    );
    assert!(
        gl.wait_finished(&[pull], Duration::from_secs(60)).await,
        "the second job did not finish; manager log:\n{}",
        m.log()
    );
    let archives: Vec<_> = walk(&caches)
        .into_iter()
        .filter(|p| p.ends_with("cache.zip"))
        .collect();
    assert_eq!(archives.len(), 1, "{archives:?}");
    assert!(!dir.path().join("state/cache/local-shell").exists());
    let trace = gl.job(pull).unwrap().trace_text();
    assert!(trace.contains("kept-in-cache-dir"), "{trace}");
    m.signal(libc::SIGTERM);
    let _ = m.wait(Duration::from_secs(30)).await;
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}
