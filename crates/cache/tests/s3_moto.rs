//! The S3 cache store against moto's S3, judged by boto3 (the official AWS SDK for Python):
//! archives land under GitLab's object names and boto3 reads them back; what boto3 writes
//! there, the store reads; presigned URLs carry the signature boto3 computes for the same
//! request at the same instant (moto checks no signature, so that comparison is the check).

use flotilla_cache::CacheConfig;
use flotilla_cache::s3::presign::presign;
use flotilla_cache::s3::settings::S3Settings;
use flotilla_job::CacheKey;
use flotilla_testkit::infra::{Infra, require};
use flotilla_testkit::moto::Moto;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime};

const REGION: &str = "eu-west-1";
const BUCKET: &str = "runner-cache";

/// The Python beside moto's server: its virtual environment has boto3.
fn python() -> PathBuf {
    let server = flotilla_testkit::infra::moto_server_path().expect("moto_server");
    server.with_file_name("python")
}

/// Runs the judge script; its standard output.
fn judge(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/s3_judge.py");
    let out = Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .expect("the judge runs");
    assert!(
        out.status.success(),
        "s3_judge.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("JSON from the judge")
}

fn config(moto: &Moto, extra: &str, s3_extra: &str) -> CacheConfig {
    toml::from_str(&format!(
        "Type = \"s3\"\nPath = \"ci\"\n{extra}\n[s3]\nServerAddress = \"{}\"\nInsecure = true\n\
         AccessKey = \"testing\"\nSecretKey = \"testing\"\nBucketName = \"{BUCKET}\"\n\
         BucketLocation = \"{REGION}\"\n{s3_extra}\n",
        moto.addr()
    ))
    .expect("a [runners.cache] table")
}

fn key(k: &str) -> CacheKey {
    CacheKey {
        project: "group/app".into(),
        project_id: 7,
        key: k.into(),
    }
}

#[tokio::test]
async fn infra_moto_archives_land_where_gitlab_puts_them_and_boto3_reads_them() {
    if !require(Infra::Moto) {
        return;
    }
    let moto = Moto::start().await.expect("moto");
    let endpoint = moto.endpoint();
    judge(&["create-bucket", &endpoint, REGION, BUCKET]);
    let dir = tempfile::tempdir().unwrap();

    let cfg = config(
        &moto,
        "MaxUploadedArchiveSize = 64",
        "ServerSideEncryption = \"S3\"",
    );
    let store = flotilla_cache::build(&cfg, "abcdefgh")
        .await
        .expect("the store")
        .expect("an S3 store");

    let dest = dir.path().join("restored.zip");
    assert!(
        !store
            .fetch(&key("deps-protected"), &dest)
            .await
            .expect("GET"),
        "no archive yet"
    );

    let archive = dir.path().join("cache.zip");
    std::fs::write(&archive, b"PK\x05\x06 an archive of the job").unwrap();
    store
        .store(&key("deps-protected"), &archive)
        .await
        .expect("PUT");
    let got = json(&judge(&[
        "get",
        &endpoint,
        REGION,
        BUCKET,
        "ci/runner/abcdefgh/project/7/deps-protected",
    ]));
    assert_eq!(
        got["hex"].as_str().unwrap(),
        hex(b"PK\x05\x06 an archive of the job"),
        "boto3 reads the archive under GitLab's object name"
    );
    assert_eq!(
        got["sse"], "AES256",
        "ServerSideEncryption = \"S3\" was sent"
    );

    assert!(
        store
            .fetch(&key("deps-protected"), &dest)
            .await
            .expect("GET")
    );
    assert_eq!(
        std::fs::read(&dest).unwrap(),
        b"PK\x05\x06 an archive of the job"
    );

    // What GitLab Runner (here boto3) put in the bucket is found.
    judge(&[
        "put",
        &endpoint,
        REGION,
        BUCKET,
        "ci/runner/abcdefgh/project/7/from-gitlab",
        &hex(b"written by another runner"),
    ]);
    assert!(store.fetch(&key("from-gitlab"), &dest).await.expect("GET"));
    assert_eq!(std::fs::read(&dest).unwrap(), b"written by another runner");

    // Too big for MaxUploadedArchiveSize: not uploaded, and said why.
    let big = dir.path().join("big.zip");
    std::fs::write(&big, vec![b'x'; 100]).unwrap();
    let refused = store
        .store(&key("too-big"), &big)
        .await
        .expect_err("over the limit");
    assert!(
        refused
            .to_string()
            .contains("MaxUploadedArchiveSize (64 bytes)"),
        "{refused}"
    );
    let got = json(&judge(&[
        "get",
        &endpoint,
        REGION,
        BUCKET,
        "ci/runner/abcdefgh/project/7/too-big",
    ]));
    assert_eq!(got["missing"], true, "nothing was uploaded");

    // Shared: no runner part in the name.
    let shared = flotilla_cache::build(&config(&moto, "Shared = true", ""), "abcdefgh")
        .await
        .unwrap()
        .unwrap();
    shared.store(&key("shared"), &archive).await.expect("PUT");
    let got = json(&judge(&[
        "get",
        &endpoint,
        REGION,
        BUCKET,
        "ci/project/7/shared",
    ]));
    assert!(got["hex"].is_string(), "{got}");

    // A bucket that does not exist: S3's own words, and no signature in them.
    let cfg = config(&moto, "", "").s3.map(|mut s| {
        s.bucket_name = "no-such-bucket".into();
        s
    });
    let missing = CacheConfig {
        s3: cfg,
        ..config(&moto, "", "")
    };
    let store = flotilla_cache::build(&missing, "abcdefgh")
        .await
        .unwrap()
        .unwrap();
    let e = store
        .store(&key("k"), &archive)
        .await
        .expect_err("no bucket");
    let said = e.to_string();
    assert!(said.contains("NoSuchBucket"), "{said}");
    assert!(!said.contains("X-Amz-Signature"), "{said}");
}

#[tokio::test]
async fn infra_moto_presigned_urls_carry_the_signature_boto3_computes() {
    if !require(Infra::Moto) {
        return;
    }
    let endpoint = "http://127.0.0.1:9000";
    let object = "ci/runner/abcdefgh/project/7/deps-protected";
    let settings: S3Settings = toml::from_str(&format!(
        "ServerAddress = \"127.0.0.1:9000\"\nInsecure = true\nBucketName = \"{BUCKET}\"\n\
         BucketLocation = \"{REGION}\"\nServerSideEncryption = \"AES256\"\n"
    ))
    .unwrap();
    let url = settings.object_url(object);
    let epoch: u64 = 1_795_000_000;
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(epoch);
    let credentials =
        aws_credential_types::Credentials::new("testing", "testing", None, None, "test");
    let ours_get = presign(
        "GET",
        &url,
        &[],
        &credentials,
        REGION,
        now,
        Duration::from_secs(3600),
    )
    .unwrap();
    let ours_put = presign(
        "PUT",
        &url,
        &settings.encryption().headers(),
        &credentials,
        REGION,
        now,
        Duration::from_secs(3600),
    )
    .unwrap();
    let boto = json(&judge(&[
        "presign",
        endpoint,
        REGION,
        BUCKET,
        object,
        "AES256",
        &epoch.to_string(),
    ]));
    for (ours, theirs) in [(&ours_get.url, &boto["get"]), (&ours_put.url, &boto["put"])] {
        let theirs = theirs.as_str().unwrap();
        let (our_path, our_query) = ours.split_once('?').unwrap();
        let (their_path, their_query) = theirs.split_once('?').unwrap();
        assert_eq!(our_path, their_path, "the same object URL");
        let mut a: Vec<&str> = our_query.split('&').collect();
        let mut b: Vec<&str> = their_query.split('&').collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "the same signed parameters and signature");
    }
    assert!(ours_put.url.contains("x-amz-server-side-encryption"));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
