//! The GCS cache store against Google's storage emulator, judged by Google's client library
//! for Python: V2 signed URLs are the ones Google's library makes for the same request (the
//! emulator checks no signature, so that comparison is the check); archives land under
//! GitLab's object names, the library reads them back, and what it writes the store reads.

use flotilla_cache::CacheConfig;
use flotilla_cache::gcs::GcsCacheStore;
use flotilla_cache::gcs::sign::{Request, SigningKey, signed_url};
use flotilla_job::CacheKey;
use flotilla_testkit::infra::{Infra, require};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BUCKET: &str = "runner-cache";

/// The Python beside the emulator: its venv has google-cloud-storage.
fn python() -> PathBuf {
    flotilla_testkit::infra::gcs_emulator_path()
        .expect("gcp-storage-emulator")
        .with_file_name("python")
}

/// Runs the judge script; its standard output, trimmed.
fn judge(args: &[&str]) -> String {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/gcs_judge.py");
    let out = Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .expect("the judge runs");
    assert!(
        out.status.success(),
        "gcs_judge.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string()
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).expect("JSON from the judge")
}

/// A service account key file made by the judge in `dir`, and its key.
fn key_file(dir: &Path) -> (PathBuf, SigningKey) {
    let path = PathBuf::from(judge(&["keygen", dir.to_str().unwrap()]));
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let key = SigningKey::from_pem(file["private_key"].as_str().unwrap()).expect("an RSA key");
    (path, key)
}

/// The emulator on a free loopback port, stopped when dropped.
struct Emulator {
    child: Child,
    endpoint: String,
}

impl Emulator {
    fn start() -> Emulator {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(flotilla_testkit::infra::gcs_emulator_path().unwrap())
            .args(["start", "--host=127.0.0.1", "--in-memory"])
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gcp-storage-emulator starts");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the emulator did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Emulator {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn infra_gcs_signed_urls_are_the_ones_googles_library_makes() {
    if !require(Infra::GcsEmulator) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (file, key) = key_file(dir.path());
    let object = "ci/runner/abcdefgh/project/7/deps-protected";
    let expires: u64 = 1_795_000_000;
    let range = [("x-goog-content-length-range", "0,1024".to_string())];
    for (method, content_type, headers) in [
        ("GET", "", &[][..]),
        ("PUT", "application/octet-stream", &range[..]),
    ] {
        let ours = signed_url(
            "https://storage.googleapis.com",
            &Request {
                method,
                content_type,
                expires,
                headers,
                bucket: BUCKET,
                object,
            },
            "cache@flotilla-test.iam.gserviceaccount.com",
            &key,
        )
        .unwrap();
        let mut args = vec![
            "sign".to_string(),
            file.display().to_string(),
            method.into(),
            BUCKET.into(),
            object.into(),
            expires.to_string(),
            content_type.into(),
        ];
        args.extend(headers.iter().map(|(k, v)| format!("{k}:{v}")));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(ours, judge(&args), "{method}");
    }
}

#[tokio::test]
async fn infra_gcs_archives_land_where_gitlab_puts_them_and_googles_library_reads_them() {
    if !require(Infra::GcsEmulator) {
        return;
    }
    let emulator = Emulator::start();
    let endpoint = emulator.endpoint.clone();
    judge(&["create-bucket", &endpoint, BUCKET]);
    let dir = tempfile::tempdir().unwrap();
    let (file, _) = key_file(dir.path());
    let cfg: CacheConfig = toml::from_str(&format!(
        "Type = \"gcs\"\nPath = \"ci\"\nMaxUploadedArchiveSize = 64\n[gcs]\nBucketName = \
         \"{BUCKET}\"\nCredentialsFile = \"{}\"\n",
        file.display()
    ))
    .unwrap();
    let store = GcsCacheStore::new(
        &cfg,
        cfg.gcs.as_ref().unwrap(),
        "abcdefgh",
        Some(endpoint.clone()),
    )
    .expect("the store");
    let key = |k: &str| CacheKey {
        project: "group/app".into(),
        project_id: 7,
        key: k.into(),
    };
    use flotilla_job::CacheStore;
    let dest = dir.path().join("restored.zip");
    assert!(
        !store.fetch(&key("deps"), &dest).await.expect("GET"),
        "none yet"
    );

    let archive = dir.path().join("cache.zip");
    std::fs::write(&archive, b"PK\x05\x06 the job's cache").unwrap();
    store.store(&key("deps"), &archive).await.expect("PUT");
    let got = json(&judge(&[
        "get",
        &endpoint,
        BUCKET,
        "ci/runner/abcdefgh/project/7/deps",
    ]));
    assert_eq!(
        got["hex"].as_str(),
        Some(hex(b"PK\x05\x06 the job's cache").as_str()),
        "{got}"
    );
    assert!(store.fetch(&key("deps"), &dest).await.expect("GET"));
    assert_eq!(std::fs::read(&dest).unwrap(), b"PK\x05\x06 the job's cache");

    judge(&[
        "put",
        &endpoint,
        BUCKET,
        "ci/runner/abcdefgh/project/7/from-gitlab",
        &hex(b"written by another runner"),
    ]);
    assert!(store.fetch(&key("from-gitlab"), &dest).await.expect("GET"));
    assert_eq!(std::fs::read(&dest).unwrap(), b"written by another runner");

    let big = dir.path().join("big.zip");
    std::fs::write(&big, vec![b'x'; 100]).unwrap();
    let refused = store.store(&key("big"), &big).await.expect_err("too big");
    assert!(
        refused.to_string().contains("MaxUploadedArchiveSize"),
        "{refused}"
    );
    let got = json(&judge(&[
        "get",
        &endpoint,
        BUCKET,
        "ci/runner/abcdefgh/project/7/big",
    ]));
    assert_eq!(got["missing"], true, "{got}");
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
