use super::*;
use crate::model::{JobPayload, Variable};
use crate::vars::JobVariables;
use proptest::prelude::*;
use std::io::Write;
use std::process::{Command, Stdio};

/// The shells scripts must work in: bash, dash (Debian's `sh`), busybox ash.
fn shells() -> Vec<Vec<&'static str>> {
    let mut s = vec![vec!["bash"]];
    if std::path::Path::new("/bin/dash").exists() {
        s.push(vec!["dash"]);
    }
    if std::path::Path::new("/usr/bin/busybox").exists()
        || std::path::Path::new("/bin/busybox").exists()
    {
        s.push(vec!["busybox", "sh"]);
    } else {
        eprintln!("!!!!!!!! busybox not found: generated scripts are not checked under ash");
    }
    s
}

/// Pipes `script` into `shell` and returns (exit code, stdout).
fn run_in(shell: &[&str], script: &str) -> (i32, Vec<u8>) {
    let mut child = Command::new(shell[0])
        .args(&shell[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(script.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), out.stdout)
}

const NASTY: &[&str] = &[
    "",
    " ",
    "plain",
    "it's",
    "''",
    "'\\''",
    "\"double\"",
    "$HOME",
    "${HOME}",
    "$(echo pwned)",
    "`echo pwned`",
    "back\\slash\\n\\",
    "\\",
    "trailing newline\n",
    "\nleading newline",
    "multi\nline\n\nvalue",
    "tab\there",
    "carriage\r\nreturn",
    "unicode: héllo wörld ✓ 日本語 🚀",
    "glob * ? [a-z]",
    "semi; colon && and || or | pipe > redirect < in",
    "# not a comment",
    "-n",
    "-e \\n",
    "%s %d %%",
    "!bang !! history",
    "~tilde",
    "a=b c=d",
    "}\n} < /dev/null\nexit 7",
    "EOF\nEOF",
    "\x1b[31mred\x1b[0m",
];

fn script_for(values: &[String], file: bool) -> (String, tempfile::TempDir) {
    script_with(values, file, &[])
}

/// [`script_for`] with `more` commands after the ones that print the values.
fn script_with(values: &[String], file: bool, more: &[&str]) -> (String, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let tmp_dir = tmp.path().join("job.tmp");
    let vars = JobVariables::new(
        values.iter().enumerate().map(|(i, v)| {
            let var = Variable::new(format!("V_{i}"), v.clone()).raw();
            if file { var.file() } else { var }
        }),
        tmp_dir.to_str().unwrap(),
    );
    let ctx = ScriptContext {
        vars: &vars,
        builds_dir: tmp.path().to_str().unwrap(),
        project_dir: tmp.path().to_str().unwrap(),
        debug_trace: false,
    };
    let commands: Vec<String> = (0..values.len())
        .map(|i| {
            if file {
                format!("cat \"$V_{i}\"; printf '\\0'")
            } else {
                format!("printf '%s\\0' \"$V_{i}\"")
            }
        })
        .collect();
    // Command echoes go to stdout too; print a marker and only compare what follows it.
    let mut all = vec!["printf 'BEGIN>'".to_string()];
    all.extend(commands);
    all.extend(more.iter().map(|c| (*c).to_owned()));
    (ctx.user_script(&all), tmp)
}

fn values_after_marker(stdout: &[u8], n: usize) -> Vec<String> {
    // Echo lines contain "BEGIN>" too (inside the echoed command), so take the last one.
    let marker = b"BEGIN>";
    let pos = stdout
        .windows(marker.len())
        .rposition(|w| w == marker)
        .expect("marker");
    let rest = &stdout[pos + marker.len()..];
    // Each value is followed by the echo of the next command, then the value and a NUL.
    let mut values = Vec::new();
    let mut rest = rest;
    for _ in 0..n {
        let end = rest.iter().position(|&b| b == 0).expect("NUL terminator");
        let chunk = &rest[..end];
        values.push(chunk.to_vec());
        rest = &rest[end + 1..];
    }
    values
        .into_iter()
        .map(|v| String::from_utf8(v).unwrap())
        .collect()
}

/// Runs the values through a script in every shell and checks each comes back unchanged.
fn check_round_trip(values: &[String], file: bool) {
    for shell in shells() {
        let (script, _tmp) = script_for(values, file);
        let (code, out) = run_in(&shell, &script);
        assert_eq!(code, 0, "{shell:?} failed on {values:?}");
        // Strip the `$ command` echo lines printed before each value.
        let text = out;
        let got = values_after_marker(&strip_echoes(&text), values.len());
        assert_eq!(got, values, "{shell:?}");
    }
}

/// Removes the echo lines (`ESC[32;1m$ ...ESC[0;m\n`) from the output.
fn strip_echoes(out: &[u8]) -> Vec<u8> {
    let start = format!("{ANSI_BOLD_GREEN}$ ");
    let end = format!("{ANSI_RESET}\n");
    let mut res = Vec::new();
    let mut i = 0;
    while i < out.len() {
        if out[i..].starts_with(start.as_bytes()) {
            let rel = out[i..]
                .windows(end.len())
                .position(|w| w == end.as_bytes())
                .expect("end of echo");
            i += rel + end.len();
        } else {
            res.push(out[i]);
            i += 1;
        }
    }
    res
}

#[test]
fn nasty_values_survive_every_shell() {
    let values: Vec<String> = NASTY.iter().map(|s| s.to_string()).collect();
    check_round_trip(&values, false);
}

#[test]
fn nasty_file_variables_survive_and_are_private() {
    let values: Vec<String> = NASTY.iter().map(|s| s.to_string()).collect();
    check_round_trip(&values, true);
    // And the files are mode 0600 in a 0700 directory.
    let (script, tmp) = script_with(
        &values[..1],
        true,
        &["stat -c '%a' \"$V_0\" \"$(dirname \"$V_0\")\""],
    );
    let (code, out) = run_in(&["bash"], &script);
    assert_eq!(code, 0);
    let text = String::from_utf8_lossy(&out);
    assert!(text.ends_with("600\n700\n"), "{text:?}");
    drop(tmp);
}

#[test]
fn the_script_stops_at_the_first_failure_with_its_code() {
    let vars = JobVariables::new([], "/tmp/none");
    let ctx = ScriptContext {
        vars: &vars,
        builds_dir: "/tmp",
        project_dir: "/tmp",
        debug_trace: false,
    };
    let script = ctx.user_script(&[
        "echo one".into(),
        "false | true".into(),
        "echo two".into(),
        "(exit 42)".into(),
        "echo never".into(),
    ]);
    for shell in shells() {
        let (code, out) = run_in(&shell, &script);
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("one\n"), "{shell:?} {text}");
        assert!(!text.contains("never\n"), "{shell:?} {text}");
        if shell[0] == "dash" {
            // No pipefail in dash: the pipeline succeeds and `(exit 42)` stops the script.
            assert!(text.contains("two\n"), "{shell:?} {text}");
            assert_eq!(code, 42, "{shell:?}");
        } else {
            // With pipefail (bash, ash) `false | true` fails the script.
            assert!(!text.contains("two\n"), "{shell:?} {text}");
            assert_eq!(code, 1, "{shell:?}");
        }
    }
}

#[test]
fn commands_do_not_eat_the_rest_of_the_script_from_stdin() {
    let vars = JobVariables::new([], "/tmp/none");
    let ctx = ScriptContext {
        vars: &vars,
        builds_dir: "/tmp",
        project_dir: "/tmp",
        debug_trace: false,
    };
    let script = ctx.user_script(&["cat".into(), "echo still-here".into()]);
    for shell in shells() {
        let (code, out) = run_in(&shell, &script);
        assert_eq!(code, 0);
        assert!(
            String::from_utf8_lossy(&out).contains("still-here\n"),
            "{shell:?}"
        );
    }
}

#[test]
fn echoes_show_the_first_line_of_multi_line_commands() {
    let mut w = ScriptWriter::new();
    w.command("if true; then\n  echo hi\nfi\n");
    let s = w.finish();
    assert!(
        s.contains("$ if true; then # collapsed multi-line command"),
        "{s}"
    );
}

#[test]
fn get_sources_script_uses_a_credential_helper_not_the_url() {
    let job = JobPayload::from_json(
        br#"{"id":1,"token":"glcbt-secret","git_info":{
            "repo_url":"https://gitlab-ci-token:glcbt-secret@gitlab.example.com/g/p.git",
            "ref":"main","sha":"0123456789abcdef0123456789abcdef01234567","ref_type":"branch",
            "depth":20}}"#,
    )
    .unwrap();
    let vars = JobVariables::new([], "/b/p.tmp");
    let ctx = ScriptContext {
        vars: &vars,
        builds_dir: "/b",
        project_dir: "/b/p",
        debug_trace: false,
    };
    let s = ctx
        .get_sources_script(&job, FetchPlace::WithTheJob)
        .unwrap();
    assert!(
        s.contains("git remote add origin https://gitlab.example.com/g/p.git"),
        "{s}"
    );
    assert!(
        s.contains("credential.https://gitlab.example.com.helper="),
        "{s}"
    );
    assert!(
        s.contains("--depth 20 +refs/heads/main:refs/remotes/origin/main"),
        "{s}"
    );
    assert!(
        s.contains("git checkout -f -q 0123456789abcdef0123456789abcdef01234567"),
        "{s}"
    );
    assert!(s.contains("git clean -ffdx"), "{s}");
    assert!(
        s.contains("rm -rf /b/p\n"),
        "clone strategy starts from scratch: {s}"
    );
    // The token appears once: as the exported helper password, never in a git command line.
    assert_eq!(s.matches("glcbt-secret").count(), 1, "{s}");
}

/// Issue 31: a fetch outside the job's container or VM exports only what tunes a connection;
/// a variable that makes git run a command stays behind, named in a warning, and the job's
/// own dotenv file is emptied, never read.
#[test]
fn a_fetch_apart_from_the_job_gets_only_connection_variables() {
    let job = JobPayload::from_json(
        br#"{"id":1,"token":"t","git_info":{"repo_url":"https://gitlab.example.com/g/p.git",
            "ref":"main","sha":"0123456789abcdef0123456789abcdef01234567","ref_type":"branch"}}"#,
    )
    .unwrap();
    let vars = JobVariables::new(
        [
            Variable::new("GIT_CONFIG_COUNT", "1"),
            Variable::new("GIT_CONFIG_KEY_0", "core.fsmonitor"),
            Variable::new("GIT_CONFIG_VALUE_0", "touch /tmp/mark"),
            Variable::new("LD_PRELOAD", "/b/p/evil.so"),
            Variable::new("GIT_TRACE", "/etc/cron.d/x"),
            Variable::new("GIT_DEPTH", "5"),
            Variable::new("https_proxy", "http://proxy.example:3128"),
        ],
        "/b/p.tmp",
    );
    let ctx = ScriptContext {
        vars: &vars,
        builds_dir: "/b",
        project_dir: "/b/p",
        debug_trace: false,
    };
    let apart = ctx.get_sources_script(&job, FetchPlace::Apart).unwrap();
    for held in [
        "GIT_CONFIG_COUNT=",
        "GIT_CONFIG_KEY_0=",
        "LD_PRELOAD=",
        "GIT_TRACE=",
        "touch /tmp/mark",
    ] {
        assert!(!apart.contains(held), "{held} reached the fetch: {apart}");
    }
    assert!(apart.contains("export https_proxy="), "{apart}");
    assert!(
        apart.contains("Not passed to git, which fetches outside the job container or VM: GIT_CONFIG_COUNT, GIT_CONFIG_KEY_0, GIT_CONFIG_VALUE_0, GIT_TRACE"),
        "{apart}"
    );
    assert!(
        apart.contains("--depth 5"),
        "flotilla's own settings still apply: {apart}"
    );
    assert!(
        !apart.contains("_flotilla_line"),
        "the dotenv file is not read: {apart}"
    );
    assert!(
        apart.contains("true > /b/p.tmp/gitlab_runner_env"),
        "{apart}"
    );
    // With the job, everything is exported, as on GitLab.
    let with = ctx
        .get_sources_script(&job, FetchPlace::WithTheJob)
        .unwrap();
    assert!(with.contains("export GIT_CONFIG_COUNT="), "{with}");
}

#[test]
fn get_sources_strategies_and_knobs() {
    let job =
        JobPayload::from_json(br#"{"allow_git_fetch":true,"git_info":{"repo_url":"/srv/r"}}"#)
            .unwrap();
    let plan = |vars: Vec<Variable>| SourcesPlan::new(&job, &JobVariables::new(vars, "/t"));
    let p = plan(vec![]).unwrap();
    assert_eq!(p.strategy, GitStrategy::Fetch);
    assert_eq!(p.clean_flags, vec!["-ffdx"]);
    assert!(p.credentials.is_none());
    let p = plan(vec![
        Variable::new("GIT_STRATEGY", "clone"),
        Variable::new("GIT_DEPTH", "3"),
        Variable::new("GIT_CLEAN_FLAGS", "none"),
        Variable::new("GIT_CHECKOUT", "false"),
        Variable::new("GIT_SUBMODULE_STRATEGY", "recursive"),
    ])
    .unwrap();
    assert_eq!(p.strategy, GitStrategy::Clone);
    assert_eq!(p.depth, 3);
    assert!(p.clean_flags.is_empty() && !p.checkout);
    assert_eq!(p.submodules, SubmoduleStrategy::Recursive);
    assert_eq!(
        plan(vec![Variable::new("GIT_STRATEGY", "teleport")]).unwrap_err(),
        ScriptError::UnknownGitStrategy("teleport".into())
    );
    assert_eq!(
        plan(vec![Variable::new("GIT_DEPTH", "deep")]).unwrap_err(),
        ScriptError::BadGitDepth("deep".into())
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Arbitrary unicode (no NUL) survives export in bash and busybox.
    #[test]
    fn arbitrary_values_round_trip(values in prop::collection::vec("[^\u{0}]{0,40}", 1..6)) {
        check_round_trip(&values, false);
    }
}

#[test]
fn debug_output_never_shows_secrets() {
    let job = JobPayload::from_json(
        br#"{"git_info":{"repo_url":"https://u:hunter2-token@h.example/p.git"}}"#,
    )
    .unwrap();
    let vars = JobVariables::new([Variable::new("K", "masked-value-1").masked()], "/t");
    let plan = SourcesPlan::new(&job, &vars).unwrap();
    assert!(!format!("{plan:?}").contains("hunter2"));
    assert!(!format!("{vars:?}").contains("masked-value-1"));
    let ctx = ScriptContext {
        vars: &vars,
        builds_dir: "/b",
        project_dir: "/b/p",
        debug_trace: false,
    };
    let script = ctx.user_script(&[]);
    assert!(script.contains("masked-value-1"));
    let cmd = crate::env::ExecCommand::Script(script);
    assert!(!format!("{cmd:?}").contains("masked-value-1"));
    let m = crate::trace::Masker::new(&["masked-value-1"], &[] as &[&str]);
    assert!(!format!("{m:?}").contains("masked"));
}

/// A temporary directory that cannot be made (a build container running as another user than
/// the stages that made the builds directory) leaves `GITLAB_ENV` without effect, and the
/// stage runs: it must not fail every job of such an image.
#[test]
fn an_unusable_temporary_directory_does_not_fail_the_stage() {
    let vars = JobVariables::new([], "/proc/flotilla-cannot-be-made/job.tmp");
    let ctx = ScriptContext {
        vars: &vars,
        builds_dir: "/tmp",
        project_dir: "/tmp",
        debug_trace: false,
    };
    let script = ctx.user_script(&["echo ran-$((1+1))".into()]);
    for shell in shells() {
        let (code, out) = run_in(&shell, &script);
        assert_eq!(code, 0, "{shell:?}");
        assert!(
            String::from_utf8_lossy(&out).contains("ran-2\n"),
            "{shell:?}"
        );
    }
}

/// The runner's TLS files reach git as GitLab Runner's `writeGitSSLConfig` gives them: a
/// setting for GitLab's host per file the job has, the file's path from its variable, also
/// when the fetch runs apart from the job (the files are data git reads).
#[test]
fn the_runners_tls_files_are_git_settings_for_gitlabs_host() {
    let ca = Variable::new("CI_SERVER_TLS_CA_FILE", "-----BEGIN CERTIFICATE-----").file();
    let mut job = JobPayload::from_json(
        br#"{"id":1,"token":"t","git_info":{"repo_url":"https://gitlab-ci-token:t@gitlab.example.com:8443/g/p.git",
            "ref":"main","sha":"0123456789abcdef0123456789abcdef01234567","ref_type":"branch"}}"#,
    )
    .unwrap();
    job.variables.push(ca.clone());
    let vars = JobVariables::new([ca], "/b/p.tmp");
    let ctx = ScriptContext {
        vars: &vars,
        builds_dir: "/b",
        project_dir: "/b/p",
        debug_trace: false,
    };
    for place in [FetchPlace::WithTheJob, FetchPlace::Apart] {
        let s = ctx.get_sources_script(&job, place).unwrap();
        assert!(
            s.contains(
                "git config http.https://gitlab.example.com:8443.sslCAInfo \"$CI_SERVER_TLS_CA_FILE\""
            ),
            "{s}"
        );
        assert!(s.contains("export CI_SERVER_TLS_CA_FILE=/b/p.tmp/"), "{s}");
        assert!(!s.contains("sslCert") && !s.contains("sslKey"), "{s}");
    }
}
