//! The Azure cache store against Azurite, which checks every SAS token's signature and
//! protocol as Azure does, judged by Azure's client library for Python reading back what the
//! store wrote (and the store reading what the library wrote), under GitLab's object names.

use flotilla_cache::CacheConfig;
use flotilla_cache::azure::AzureCacheStore;
use flotilla_job::{CacheKey, CacheStore};
use flotilla_testkit::infra::{Infra, require};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Azurite's well-known development account and key (public, in Azure's documentation).
const ACCOUNT: &str = "devstoreaccount1";
const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const CONTAINER: &str = "runner-cache";

/// Azurite's blob service on a free loopback port, in memory, stopped when dropped.
struct Azurite {
    child: Child,
    endpoint: String,
}

impl Azurite {
    fn start() -> Azurite {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(flotilla_testkit::infra::azurite_path().unwrap())
            .args([
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                &port.to_string(),
                "--inMemoryPersistence",
                "--disableTelemetry",
                "--silent",
                // The Python library speaks a newer API version than this Azurite knows; the
                // signatures it checks do not depend on it.
                "--skipApiVersionCheck",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("azurite starts");
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "azurite did not listen"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Azurite {
            child,
            endpoint: format!("http://127.0.0.1:{port}/{ACCOUNT}"),
        }
    }

    fn connection(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={};",
            self.endpoint
        )
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn judge(args: &[&str]) -> serde_json::Value {
    let python = flotilla_testkit::infra::gcs_emulator_path()
        .expect("the storage venv")
        .with_file_name("python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/azure_judge.py");
    let out = Command::new(python)
        .arg(script)
        .args(args)
        .output()
        .expect("the judge runs");
    assert!(
        out.status.success(),
        "azure_judge.py {:?}: {}",
        &args[..1],
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.trim()).unwrap_or(serde_json::Value::Null)
}

fn store(azurite: &Azurite, key: &str, extra: &str) -> AzureCacheStore {
    let cfg: CacheConfig = toml::from_str(&format!(
        "Type = \"azure\"\nPath = \"ci\"\n{extra}\n[azure]\nAccountName = \"{ACCOUNT}\"\n\
         AccountKey = \"{key}\"\nContainerName = \"{CONTAINER}\"\n"
    ))
    .unwrap();
    AzureCacheStore::new(
        &cfg,
        cfg.azure.as_ref().unwrap(),
        "abcdefgh",
        Some(azurite.endpoint.clone()),
    )
    .expect("the store")
}

fn key(k: &str) -> CacheKey {
    CacheKey {
        project: "group/app".into(),
        project_id: 7,
        key: k.into(),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn infra_azurite_archives_land_where_gitlab_puts_them_and_azures_library_reads_them() {
    if !require(Infra::Azurite) {
        return;
    }
    let azurite = Azurite::start();
    let connection = azurite.connection();
    judge(&["create-container", &connection, CONTAINER]);
    let dir = tempfile::tempdir().unwrap();
    let s = store(&azurite, KEY, "MaxUploadedArchiveSize = 64");
    let dest = dir.path().join("restored.zip");
    assert!(
        !s.fetch(&key("deps"), &dest).await.expect("GET"),
        "none yet"
    );

    let archive = dir.path().join("cache.zip");
    std::fs::write(&archive, b"PK\x05\x06 the job's cache").unwrap();
    s.store(&key("deps"), &archive).await.expect("PUT");
    let got = judge(&[
        "get",
        &connection,
        CONTAINER,
        "ci/runner/abcdefgh/project/7/deps",
    ]);
    assert_eq!(
        got["hex"].as_str(),
        Some(hex(b"PK\x05\x06 the job's cache").as_str()),
        "{got}"
    );
    assert!(s.fetch(&key("deps"), &dest).await.expect("GET"));
    assert_eq!(std::fs::read(&dest).unwrap(), b"PK\x05\x06 the job's cache");

    judge(&[
        "put",
        &connection,
        CONTAINER,
        "ci/runner/abcdefgh/project/7/from-gitlab",
        &hex(b"written by another runner"),
    ]);
    assert!(s.fetch(&key("from-gitlab"), &dest).await.expect("GET"));
    assert_eq!(std::fs::read(&dest).unwrap(), b"written by another runner");

    let big = dir.path().join("big.zip");
    std::fs::write(&big, vec![b'x'; 100]).unwrap();
    let refused = s.store(&key("big"), &big).await.expect_err("too big");
    assert!(
        refused.to_string().contains("MaxUploadedArchiveSize"),
        "{refused}"
    );

    // Azurite checks the signature: a token signed with another key is refused, in Azure's
    // words, and the token is not in them.
    let other_key = "b3RoZXIta2V5LW5vdC10aGUtYWNjb3VudHM=";
    let forged = store(&azurite, other_key, "");
    let e = forged
        .store(&key("forged"), &archive)
        .await
        .expect_err("a signature of another key");
    let said = e.to_string();
    assert!(
        said.contains("403") && said.contains("AuthorizationFailure"),
        "{said}"
    );
    assert!(!said.contains("sig="), "{said}");
}
