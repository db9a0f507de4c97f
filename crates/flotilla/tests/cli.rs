//! The real `flotilla` binary: `config check`, `--version`, and missing input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn flotilla(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("FLOTILLA_CONFIG")
        .output()
        .unwrap()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

#[test]
fn version() {
    let out = flotilla(&["--version"]);
    assert!(out.status.success());
    let printed = text(&out.stdout);
    assert!(
        printed.starts_with(&format!("flotilla {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{printed}"
    );
    // The commit's date, and the features this test binary's flotilla was built with.
    assert!(printed.contains("; features: "), "{printed}");
    #[cfg(feature = "docker")]
    assert!(printed.contains("docker"), "{printed}");
}

#[test]
fn config_check_accepts_a_good_file_and_prints_it_redacted() {
    let path = fixture("docker-autoscaler-aws-full.toml");
    let out = flotilla(&["config", "check", path.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    // The two keys it does not honour are warned about, at their lines, and the connector
    // key this machine does not have.
    assert_eq!(stderr.lines().count(), 3, "{stderr}");
    assert!(
        stderr.contains("ci-fleet.pem: cannot read connector key_path"),
        "{stderr}"
    );
    assert!(
        stderr.lines().all(|l| l.starts_with("warning: "))
            && stderr.contains("docker-autoscaler-aws-full.toml:44:30: reservation_throttling"),
        "{stderr}"
    );
    assert!(!stdout.contains("glrt-full-example-token"), "{stdout}");
    assert!(!stdout.contains("auths"), "{stdout}");
    assert!(stdout.contains("token = \"[REDACTED]\""), "{stdout}");
    assert!(
        stdout.contains("\"DOCKER_AUTH_CONFIG=[REDACTED]\""),
        "{stdout}"
    );
    assert!(stdout.contains("capacity_per_instance = 4"), "{stdout}");
    assert!(stdout.contains("isolation = \"docker\""), "{stdout}");
    // The output is itself a valid configuration.
    let reloaded = flotilla::config::Config::from_str(&stdout, &path).unwrap();
    assert_eq!(reloaded.config.concurrent, 40);
}

#[test]
fn config_check_prints_warnings_to_stderr_and_still_succeeds() {
    let path = fixture("gitlab-extras.toml");
    let out = flotilla(&["config", "check", path.to_str().unwrap()]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    let file = path.display().to_string();
    let lines: Vec<&str> = stderr.lines().collect();
    // `shm_size`, `oom_kill_disable`, `disable_entrypoint_overwrite`, `services`,
    // `disable_cache`, the S3 cache and `custom_build_dir` are honoured now (issue 32): no
    // longer warned.
    assert_eq!(lines.len(), 10, "{stderr}");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with(&format!("warning: {file}:")))
    );
    assert!(lines.contains(&&*format!(
        "warning: {file}:10:2: `session_server` at the top level is not used by flotilla; \
         ignored (interactive web terminals are not supported)"
    )));
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("glrt-extras-example-token"));
    assert!(!stdout.contains("session_server"), "{stdout}");
}

#[test]
fn config_check_rejects_a_bad_file_with_every_error() {
    let path = fixture("broken/many-errors.toml");
    let out = flotilla(&["config", "check", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    let stderr = text(&out.stderr);
    let file = path.display().to_string();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 6, "{stderr}");
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with(&format!("error: {file}:")))
    );
    assert_eq!(
        lines[0],
        format!(
            "error: {file}:4:3: unknown key `stat_dir` in [flotilla]; did you mean `state_dir`?"
        )
    );
    assert_eq!(
        lines[2],
        format!("error: {file}:15:29: capacity_per_instance must be at least 1")
    );
}

#[test]
fn config_check_on_a_missing_file_fails() {
    let out = flotilla(&["config", "check", "/nonexistent/flotilla.toml"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr)
            .starts_with("error: /nonexistent/flotilla.toml: cannot read configuration:")
    );
}

#[test]
fn run_and_exec_explain_missing_input_and_exit_2() {
    // No configuration given and none in the default places (HOME points at an empty
    // directory). A machine with a system-wide configuration cannot show this.
    let system_wide = [
        "/etc/flotilla/config.toml",
        "/etc/gitlab-runner/config.toml",
    ]
    .iter()
    .find(|p| Path::new(p).exists());
    if let Some(found) = system_wide {
        eprintln!(
            "!!!!!!!! {found} exists on this machine: the no-configuration case is not checked"
        );
    } else {
        let home = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
            .args(["config", "check"])
            .env_remove("FLOTILLA_CONFIG")
            .env("HOME", home.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stderr = text(&out.stderr);
        assert!(
            stderr.contains(
                "no configuration given (--config FILE or FLOTILLA_CONFIG) and none found in"
            ) && stderr.contains("gitlab-runner/config.toml"),
            "{stderr}"
        );
    }
    let out = flotilla(&["run", "--config", "/nonexistent/x.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("/nonexistent/x.toml"),
        "{}",
        text(&out.stderr)
    );
    let empty = tempfile::tempdir().unwrap();
    let out = flotilla(&["exec", "--dir", empty.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("has no .gitlab-ci.yml"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn usage_errors_exit_2() {
    let out = flotilla(&["config", "check", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--no-such-flag"));
    let out = flotilla(&["--log-level", "not a [valid filter", "status"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("error: invalid --log-level"));
}

#[test]
fn config_check_takes_the_file_as_c_too_and_the_named_file_first() {
    let path = fixture("docker-autoscaler-aws-full.toml");
    let path = path.to_str().unwrap();
    let positional = flotilla(&["config", "check", path]);
    let flag = flotilla(&["config", "check", "-c", path]);
    assert_eq!(flag.status.code(), Some(0), "{}", text(&flag.stderr));
    assert_eq!(flag.stdout, positional.stdout);
    // A file named on the command line is checked even where FLOTILLA_CONFIG names another.
    let with_env = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["config", "check", path])
        .env("FLOTILLA_CONFIG", "/nonexistent/elsewhere.toml")
        .output()
        .unwrap();
    assert_eq!(
        with_env.status.code(),
        Some(0),
        "{}",
        text(&with_env.stderr)
    );
    assert_eq!(with_env.stdout, positional.stdout);
}

#[test]
fn a_plugin_this_build_lacks_is_refused_before_gitlab_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    // A provider no build has, and a runner URL nothing listens on: `run` must stop at the
    // configuration, not at the token check.
    std::fs::write(
        &config,
        r#"
[[runners]]
  name = "gce-fleet"
  url = "http://127.0.0.1:9"
  token = "glrt-never-sent"
  executor = "docker-autoscaler"
  [runners.autoscaler]
    plugin = "fleeting-plugin-googlecompute"
    max_instances = 1
"#,
    )
    .unwrap();
    let path = config.to_str().unwrap();
    let check = flotilla(&["config", "check", path]);
    assert_eq!(check.status.code(), Some(1));
    let stderr = text(&check.stderr);
    assert!(
        stderr.contains(
            "runner \"gce-fleet\": plugin \"fleeting-plugin-googlecompute\" is not available"
        ),
        "{stderr}"
    );
    let run = flotilla(&["run", "--config", path]);
    assert_eq!(run.status.code(), Some(2));
    let stderr = text(&run.stderr);
    assert!(
        stderr.contains("is not available in this build"),
        "{stderr}"
    );
    assert!(!stderr.contains("verif"), "GitLab was not asked: {stderr}");
}

/// The completion scripts, judged by the shells themselves: bash completes a subcommand and a
/// flag through the function the script defines, fish through `complete -C`, zsh parses it.
#[test]
fn shell_completions_complete_in_real_shells() {
    let dir = tempfile::tempdir().unwrap();
    let mut scripts = Vec::new();
    for shell in ["bash", "zsh", "fish"] {
        let out = flotilla(&["completion", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let path = dir.path().join(format!("flotilla.{shell}"));
        std::fs::write(&path, &out.stdout).unwrap();
        scripts.push(path);
    }
    let complete_bash = |line: &str| {
        let words: Vec<&str> = line.split(' ').collect();
        let script = format!(
            "source {}; COMP_WORDS=({}); COMP_CWORD={}; _flotilla flotilla {} {}; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            scripts[0].display(),
            line,
            words.len() - 1,
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let subcommands = complete_bash("flotilla reg");
    assert_eq!(subcommands.trim(), "register", "{subcommands}");
    let flags = complete_bash("flotilla register --registration");
    assert!(flags.contains("--registration-token"), "{flags}");

    let out = Command::new("zsh")
        .args(["-n", scripts[1].to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "zsh: {}", text(&out.stderr));

    let out = Command::new("fish")
        .args([
            "--no-config",
            "-c",
            &format!(
                "source {}; complete -C 'flotilla unreg'",
                scripts[2].display()
            ),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "fish: {}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("unregister"),
        "{}",
        text(&out.stdout)
    );
}

/// The man pages, judged by groff with every warning on, as man-db runs it: one page per
/// command, each rendering without a warning.
#[test]
fn man_pages_render_cleanly_in_groff() {
    let out = flotilla(&["man"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(".TH flotilla 1"));
    let dir = tempfile::tempdir().unwrap();
    let out = flotilla(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    pages.sort();
    for page in [
        "flotilla.1",
        "flotilla-run.1",
        "flotilla-register.1",
        "flotilla-exec.1",
    ] {
        assert!(pages.iter().any(|p| p == page), "{page} missing: {pages:?}");
    }
    for page in &pages {
        let out = Command::new("groff")
            // `-k`: through preconv, as man-db renders a page (the help text has UTF-8).
            .args(["-k", "-man", "-Tutf8", "-ww", "-z"])
            .arg(dir.path().join(page))
            .output()
            .unwrap();
        assert!(out.status.success(), "{page}");
        assert_eq!(text(&out.stderr), "", "{page}: groff warned");
    }
}

/// Issue 32: `config check` refuses what `run` would refuse before it takes a job: a
/// `plugin_config` key the provider does not know (named), WinRM (flotilla reaches instances
/// over SSH only); and takes `region`, which public configs set for the aws provider.
#[test]
fn config_check_refuses_what_run_would() {
    let dir = tempfile::tempdir().unwrap();
    let write = |plugin_config: &str, connector: &str| {
        let path = dir.path().join("config.toml");
        std::fs::write(
            &path,
            format!(
                "concurrent = 2\n[[runners]]\n  name = \"asg\"\n  url = \"https://gitlab.example.com\"\n  \
                 token = \"glrt-check-example\"\n  executor = \"docker-autoscaler\"\n  \
                 [runners.docker]\n    image = \"alpine\"\n  [runners.autoscaler]\n    \
                 plugin = \"aws\"\n    capacity_per_instance = 1\n    max_instances = 2\n    \
                 [runners.autoscaler.plugin_config]\n      name = \"asg\"\n{plugin_config}    \
                 [runners.autoscaler.connector_config]\n      username = \"ec2-user\"\n{connector}"
            ),
        )
        .unwrap();
        let out = flotilla(&["config", "check", path.to_str().unwrap()]);
        (out.status.code(), text(&out.stderr))
    };
    let (code, stderr) = write("      region = \"us-east-1\"\n", "");
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = write("      regoin = \"us-east-1\"\n", "");
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("[runners.autoscaler.plugin_config]") && stderr.contains("`regoin`"),
        "{stderr}"
    );
    let (code, stderr) = write("", "      protocol = \"winrm\"\n");
    assert_ne!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("the winrm protocol reaches Windows instances"),
        "{stderr}"
    );
    for windows in [
        "      os = \"windows\"\n",
        "      os = \"windows\"\n      protocol = \"ssh\"\n",
    ] {
        let (code, stderr) = write("", windows);
        assert_ne!(code, Some(0), "{stderr}");
        assert!(stderr.contains("Windows instances"), "{stderr}");
    }
    let (code, stderr) = write("", "      os = \"darwin\"\n");
    assert_eq!(code, Some(0), "{stderr}");
}
