//! The second judge of the stage scripts: for every conformance case that a `script` step
//! alone decides, flotilla's stage script and the script GitLab Runner writes (built by
//! `flotilla_conformance::gitlab_bash_script` from gitlab-runner's `shells/bash.go`, not from
//! flotilla's writer) are each run by bash, and each must end with the case's exit code and
//! print what the case expects. The same flotilla script is also run by busybox's `sh` (the
//! shell of images without bash) for the cases that hold in any shell.

use flotilla_conformance::{CASES, Case, gitlab_bash_script};
use flotilla_job::script::ScriptContext;
use flotilla_job::vars::JobVariables;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs `script` on the stdin of `shell` in `dir`, stderr merged into stdout as a job's log
/// merges them; returns the exit code (`128 + n` for signal `n`, as a shell reports it) and
/// the output.
fn run(shell: &[&str], dir: &Path, script: &str) -> (i32, String) {
    let line = format!("exec 2>&1; exec {}", shell.join(" "));
    let mut child = Command::new("sh")
        .args(["-c", &line])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh runs");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(script.as_bytes())
        .expect("script written");
    let out = child.wait_with_output().expect("shell ends");
    use std::os::unix::process::ExitStatusExt;
    let code = out
        .status
        .code()
        .or_else(|| out.status.signal().map(|s| 128 + s))
        .unwrap_or(-1);
    (code, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn flotilla_script(case: &Case, project: &Path, tmp: &Path) -> String {
    let vars = JobVariables::new([], &tmp.to_string_lossy());
    let project = project.to_string_lossy();
    let ctx = ScriptContext {
        vars: &vars,
        builds_dir: &project,
        project_dir: &project,
        debug_trace: false,
    };
    let commands: Vec<String> = case.step_script().iter().map(|c| (*c).to_owned()).collect();
    ctx.user_script(&commands)
}

/// What is wrong with one run of `case`, if anything.
fn verdict(case: &Case, who: &str, code: i32, out: &str) -> Option<String> {
    let mut wrong = Vec::new();
    if code != case.script_code() {
        wrong.push(format!("exit code {code}, expected {}", case.script_code()));
    }
    wrong.extend(case.output_problems(out));
    (!wrong.is_empty()).then(|| {
        format!(
            "{} ({who}; {}): {}\n--- output ---\n{out}",
            case.name,
            case.source,
            wrong.join("; ")
        )
    })
}

fn busybox() -> Option<&'static str> {
    ["/usr/bin/busybox", "/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).exists())
}

#[test]
fn every_script_case_ends_as_on_gitlab_in_both_scripts() {
    let cases: Vec<&Case> = CASES.iter().filter(|c| c.judged_by_script()).collect();
    assert!(cases.len() >= 60, "only {} script cases", cases.len());
    let busybox = busybox();
    if busybox.is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "busybox is missing (scripts/setup.sh installs busybox-static)"
        );
        eprintln!("!!!!!!!! busybox not found: the cases are not run under ash");
    }
    let mut failures = Vec::new();
    for case in &cases {
        // GitLab's script.
        let dir = tempfile::tempdir().expect("tempdir");
        let (code, out) = run(
            &["bash"],
            dir.path(),
            &gitlab_bash_script(&case.step_script()),
        );
        failures.extend(verdict(case, "GitLab Runner's script, bash", code, &out));

        // flotilla's, in bash and (where the case holds there) in busybox ash.
        let mut shells = vec![vec!["bash"]];
        if let Some(b) = busybox.filter(|_| case.holds_in(false)) {
            shells.push(vec![b, "sh"]);
        }
        for shell in shells {
            let dir = tempfile::tempdir().expect("tempdir");
            let project = dir.path().join("project");
            std::fs::create_dir(&project).expect("project dir");
            let script = flotilla_script(case, &project, &dir.path().join("project.tmp"));
            let (code, out) = run(&shell, dir.path(), &script);
            failures.extend(verdict(
                case,
                &format!("flotilla's script, {shell:?}"),
                code,
                &out,
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs differ from GitLab:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

/// The judge can fail: the script flotilla wrote before this test existed (its body ended by
/// `:`, which reset the status of a last `&&` list) passes a job GitLab fails.
#[test]
fn the_old_script_shape_is_caught() {
    let case = CASES
        .iter()
        .find(|c| c.name == "and-list-failing-last")
        .expect("case");
    let dir = tempfile::tempdir().expect("tempdir");
    let project = dir.path().join("project");
    std::fs::create_dir(&project).expect("project dir");
    let old = format!(
        "set -e\nif (set -o pipefail) 2>/dev/null; then set -o pipefail; fi\n\
         set +o noclobber\ntrap 'exit 1' TERM\n{{\ncd {}\n{}\n:\n}} < /dev/null\n",
        project.display(),
        case.script.join("\n")
    );
    let (code, out) = run(&["bash"], dir.path(), &old);
    assert!(
        verdict(case, "the old script", code, &out).is_some(),
        "the old shape passed the judge"
    );
}
