//! `flotilla register`, `verify`, `unregister` and `list` against the fake GitLab (written
//! from Rails' `lib/api/ci/runner.rb`), as an operator runs them, and a runner registered
//! from nothing taking a job.

use crate::run_support;
use flotilla_testkit::fake_gitlab::{FakeGitLab, FakeJobState, JobBuilder};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

const CREATED: &str = "glrt-made-in-gitlab-0123456789";
const REGISTRATION: &str = "GR1348941legacy-registration";

fn flotilla(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("FLOTILLA_CONFIG")
        .env_remove("CI_SERVER_TOKEN")
        .env_remove("REGISTRATION_TOKEN")
        // This machine's /var/lib/flotilla is not the tests' (the configurations set no
        // state_dir); each test's files stay in its directory.
        .env("FLOTILLA_STATE_DIR", "state-by-default")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

async fn gitlab() -> FakeGitLab {
    FakeGitLab::builder()
        .runner_token(CREATED)
        .registration_token(REGISTRATION)
        .poll_duration(Duration::from_millis(500))
        .start()
        .await
        .unwrap()
}

/// `flotilla register -c <config> --url <url> <rest...>`.
fn register(config: &str, url: &str, rest: &[&str]) -> Output {
    let mut args = vec!["register", "-c", config, "--url", url];
    args.extend_from_slice(rest);
    flotilla(&args)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// A runner made in GitLab: its token verified, its entry appended to a new file readable by
/// its owner only, the token never printed; `list` shows it shortened; `config check` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_made_in_gitlab_is_verified_and_written() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("etc/config.toml");
    let c = config.to_str().unwrap();
    let out = flotilla(&[
        "register",
        "-c",
        c,
        "--non-interactive",
        "--url",
        gl.url(),
        "--token",
        CREATED,
        "--executor",
        "shell",
        "--name",
        "first",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("Verifying runner... is valid"), "{stderr}");
    assert!(
        !stdout.contains(CREATED) && !stderr.contains(CREATED),
        "{stdout}{stderr}"
    );
    let written = read(&config);
    assert!(written.starts_with("concurrent = 1\n"), "{written}");
    assert!(
        written.contains("[[runners]]\n  name = \"first\"\n"),
        "{written}"
    );
    assert!(
        written.contains(&format!("  token = \"{CREATED}\"")),
        "{written}"
    );
    assert!(written.contains("  executor = \"shell\""), "{written}");
    let mode = std::fs::metadata(&config).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a file of tokens is the owner's alone");
    // GitLab saw this manager verify (its system id).
    assert_eq!(gl.managers(CREATED).len(), 1);
    assert_eq!(gl.requests_to("POST", "/api/v4/runners/verify").len(), 1);

    let check = flotilla(&["config", "check", "-c", c]);
    assert!(check.status.success(), "{}", text(&check.stderr));
    let list = flotilla(&["list", "-c", c]);
    let listed = text(&list.stdout);
    assert!(list.status.success());
    assert!(
        listed.contains("first")
            && listed.contains("Executor=shell")
            && listed.contains("Token=made-in-g"),
        "{listed}"
    );
    assert!(!listed.contains(CREATED), "{listed}");

    // A second runner is appended; the first and the globals stay as written.
    let again = register(
        c,
        gl.url(),
        &["--token", CREATED, "--executor", "shell", "--name", "first"],
    );
    assert!(!again.status.success(), "a name taken twice");
    assert!(text(&again.stderr).contains("already has a runner named"));
    let second = register(
        c,
        gl.url(),
        &[
            "--token",
            CREATED,
            "--executor",
            "shell",
            "--name",
            "second",
        ],
    );
    assert!(second.status.success(), "{}", text(&second.stderr));
    let written2 = read(&config);
    assert!(written2.starts_with(&written), "{written2}");

    // Unregistering a runner made in GitLab removes this manager only.
    let out = flotilla(&["unregister", "-c", c, "--name", "second"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Unregistering manager"),
        "{}",
        text(&out.stderr)
    );
    assert!(gl.knows_runner(CREATED), "the runner stays in GitLab");
    assert!(gl.managers(CREATED).is_empty());
    assert_eq!(
        gl.requests_to("DELETE", "/api/v4/runners/managers").len(),
        1
    );
    assert!(
        gl.requests_to("DELETE", "/api/v4/runners")
            .iter()
            .all(|r| r.path.ends_with("managers"))
    );
    let left = read(&config);
    assert!(
        left.contains("name = \"first\"") && !left.contains("name = \"second\""),
        "{left}"
    );
}

/// A legacy registration token: GitLab creates the runner with what the command line says;
/// `unregister` deletes it; `verify --delete` drops a runner GitLab no longer knows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_registration_creates_the_runner_and_unregister_deletes_it() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let c = config.to_str().unwrap();
    let out = register(
        c,
        gl.url(),
        &[
            "--registration-token",
            REGISTRATION,
            "--executor",
            "shell",
            "--description",
            "legacy",
            "--tag-list",
            "linux,fast",
            "--run-untagged",
            "true",
            "--access-level",
            "ref_protected",
            "--maximum-timeout",
            "3600",
        ],
    );
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains(REGISTRATION), "{stderr}");
    let written = read(&config);
    let token = written
        .lines()
        .find_map(|l| l.trim().strip_prefix("token = \""))
        .map(|t| t.trim_end_matches('"').to_string())
        .expect("a token written");
    assert!(token.starts_with("glrtr-"), "{written}");
    assert!(!stderr.contains(&token), "{stderr}");
    let details = gl.registration(&token).expect("GitLab created it");
    assert_eq!(details["description"], "legacy");
    assert_eq!(details["tag_list"], "linux,fast");
    assert_eq!(details["run_untagged"], true);
    assert_eq!(details["access_level"], "ref_protected");
    assert_eq!(details["maximum_timeout"], 3600);
    assert_eq!(details["info"]["name"], "flotilla");

    let verify = flotilla(&["verify", "-c", c]);
    assert!(verify.status.success(), "{}", text(&verify.stderr));
    assert!(text(&verify.stderr).contains("is valid"));

    let out = flotilla(&["unregister", "-c", c, "--token", &token]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!gl.knows_runner(&token), "deleted in GitLab");
    assert!(!read(&config).contains("[[runners]]"));

    // A runner GitLab no longer knows: verify says so (status 1) and --delete drops it.
    let out = register(
        c,
        gl.url(),
        &[
            "--registration-token",
            REGISTRATION,
            "--executor",
            "shell",
            "--name",
            "doomed",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doomed = read(&config)
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("token = \"")
                .map(|t| t.trim_end_matches('"').to_string())
        })
        .unwrap();
    let gone = reqwest::Client::new()
        .delete(format!("{}/api/v4/runners", gl.url()))
        .json(&serde_json::json!({"token": doomed}))
        .send()
        .await
        .unwrap();
    assert_eq!(gone.status(), 204);
    let out = flotilla(&["verify", "-c", c]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("\"doomed\"... is removed"),
        "{}",
        text(&out.stderr)
    );
    assert!(read(&config).contains("doomed"), "kept without --delete");
    let out = flotilla(&["verify", "-c", c, "--delete"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!read(&config).contains("doomed"));

    // --all-runners, with a token in the environment for other commands, as gitlab-runner's.
    for name in ["one", "two"] {
        let out = register(
            c,
            gl.url(),
            &[
                "--registration-token",
                REGISTRATION,
                "--executor",
                "shell",
                "--name",
                name,
            ],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["unregister", "-c", c, "--all-runners"])
        .env("CI_SERVER_TOKEN", "glrt-set-for-something-else")
        .env("FLOTILLA_STATE_DIR", "state-by-default")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!read(&config).contains("[[runners]]"));
}

/// Nothing is sent or written when the entry would not work or the token is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn register_refuses_before_anything_is_sent_or_written() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let c = config.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        // GitLab Runner's rule: a runner made in GitLab has its settings there.
        (
            &["--token", CREATED, "--executor", "shell", "--tag-list", "a"],
            "reserved",
        ),
        // An autoscaling executor with no [runners.autoscaler]: config check's error.
        (
            &["--token", CREATED, "--executor", "docker-autoscaler"],
            "autoscaler",
        ),
        (&["--token", CREATED], "--executor is needed"),
        (
            &["--token", CREATED, "--executor", "kubernetes"],
            "kubernetes",
        ),
        (&["--executor", "shell"], "--token"),
    ];
    for (extra, says) in cases {
        let out = register(c, gl.url(), extra);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{extra:?}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert!(!config.exists(), "{extra:?} wrote the file");
    }
    assert!(gl.requests().is_empty(), "nothing was sent");
    // A token GitLab refuses: nothing written.
    let out = register(
        c,
        gl.url(),
        &["--token", "glrt-wrong", "--executor", "shell"],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("GitLab refused the token"),
        "{}",
        text(&out.stderr)
    );
    assert!(!config.exists());
    let out = register(c, gl.url(), &["-r", "wrong", "--executor", "shell"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("403"), "{}", text(&out.stderr));
    assert!(!config.exists());
}

/// A configuration that cannot be written after GitLab made the runner: the runner is deleted
/// again, since its token (never printed) would be lost with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_whose_entry_cannot_be_written_is_deleted_again() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    // A file that reads but whose directory takes no new file (the rename's): as root, whom
    // permissions do not stop, flotilla runs as nobody.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ro = dir.path().join("ro");
    std::fs::create_dir(&ro).unwrap();
    let config = ro.join("config.toml");
    std::fs::write(&config, "concurrent = 1\n").unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
    let args = [
        "register",
        "-c",
        config.to_str().unwrap(),
        "--url",
        gl.url(),
        "-r",
        REGISTRATION,
        "--executor",
        "shell",
    ];
    let out = if nix::unistd::geteuid().is_root() {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_flotilla"))
            .args(args)
            .env_remove("RUST_LOG")
            .env("FLOTILLA_STATE_DIR", "state-by-default")
            .output()
            .unwrap()
    } else {
        flotilla(&args)
    };
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("deleted again"), "{stderr}");
    let created = gl.requests_to("POST", "/api/v4/runners");
    assert_eq!(created.len(), 1);
    assert_eq!(
        gl.requests_to("DELETE", "/api/v4/runners").len(),
        1,
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "concurrent = 1\n"
    );
}

/// A GitLab with registration tokens turned off says how to do it instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_tokens_turned_off_are_explained() {
    let gl = FakeGitLab::builder()
        .registration_token(REGISTRATION)
        .registration_disallowed(true)
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = dir.path().join("config.toml");
    let out = flotilla(&[
        "register",
        "-c",
        c.to_str().unwrap(),
        "--url",
        gl.url(),
        "-r",
        REGISTRATION,
        "--executor",
        "shell",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("410") && stderr.contains("glrt-"),
        "{stderr}"
    );
    assert!(!c.exists());
}

/// From nothing to a job: `register` with a template for the fleet writes a configuration
/// `flotilla run` takes jobs with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_runner_takes_a_job() {
    let gl = gitlab().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    let template = dir.path().join("template.toml");
    std::fs::write(
        &template,
        r#"[[runners]]
  executor = "flotilla"
  environment = ["FROM_TEMPLATE=yes"]
  [runners.autoscaler]
    plugin = "local"
    capacity_per_instance = 1
    max_instances = 1
"#,
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let out = register(
        c,
        gl.url(),
        &[
            "--token",
            CREATED,
            "--template-config",
            template.to_str().unwrap(),
            "--name",
            "from-zero",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let written = read(&config);
    assert!(
        written.contains("[runners.autoscaler]") && written.contains("FROM_TEMPLATE"),
        "{written}"
    );
    let check = flotilla(&["config", "check", "-c", c]);
    assert!(check.status.success(), "{}", text(&check.stderr));

    let mut m = run_support::Manager::start(&config, &[]);
    let id = gl.enqueue(
        CREATED,
        JobBuilder::new("hello").script(["echo from $FROM_TEMPLATE"]),
    );
    assert!(
        gl.wait_finished(&[id], Duration::from_secs(90)).await,
        "log:\n{}",
        m.log_tail()
    );
    let job = gl.job(id).unwrap();
    assert_eq!(job.state, FakeJobState::Success, "log:\n{}", m.log_tail());
    assert!(String::from_utf8_lossy(&job.trace).contains("from yes"));
    m.signal(libc::SIGTERM);
    assert!(
        m.wait(Duration::from_secs(30))
            .await
            .is_some_and(|s| s.success())
    );
}
