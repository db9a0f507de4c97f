//! The job runner end to end with a real local bash.

use crate::common;

use common::{Harness, has_section, job, with_after_script};
use flotilla_job::model::RunnerInfo;
use flotilla_job::{FailureReason, JobCancel, Outcome, RunOptions, Variable};
use std::time::Duration;

#[tokio::test]
async fn a_successful_job_runs_its_script_in_the_project_dir() {
    let h = Harness::new();
    let j = job(
        1,
        &[
            "echo hello from $CI_JOB_NAME",
            "pwd",
            "echo \"id=$CI_JOB_ID server=$CI_SERVER\"",
        ],
    );
    let (r, trace) = h.run("p1", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(
        trace.contains("\x1b[32;1m$ echo hello from $CI_JOB_NAME\x1b[0;m\n"),
        "{trace}"
    );
    assert!(trace.contains("hello from job-1\n"), "{trace}");
    assert!(
        trace.contains(&format!("{}\n", h.project("p1").display())),
        "{trace}"
    );
    assert!(trace.contains("id=1 server=yes\n"), "{trace}");
    assert!(trace.contains("Job succeeded"), "{trace}");
    for s in [
        "prepare_executor",
        "get_sources",
        "step_script",
        "cleanup_file_variables",
    ] {
        assert!(has_section(&trace, s), "section {s} missing: {trace:?}");
    }
    let names: Vec<&str> = r.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "prepare_executor",
            "get_sources",
            "step_script",
            "cleanup_file_variables"
        ]
    );
    assert_eq!(r.trace.bytesize, trace.len() as u64);
    assert_eq!(r.trace.crc32, crc32fast::hash(trace.as_bytes()));
}

#[tokio::test]
async fn a_failing_script_reports_its_exit_code_and_runs_after_script() {
    let h = Harness::new();
    let j = with_after_script(
        job(2, &["echo before", "exit 3", "echo never"]),
        &[
            "echo \"after: $CI_JOB_STATUS\"",
            "false",
            "echo not reached",
        ],
    );
    let (r, trace) = h.run("p2", &j).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::ScriptFailure,
            exit_code: Some(3)
        },
        "{trace}"
    );
    assert!(trace.contains("before\n"));
    assert!(!trace.contains("never\n"), "{trace}");
    assert!(trace.contains("after: failed\n"), "{trace}");
    assert!(!trace.contains("not reached\n"), "{trace}");
    assert!(
        trace.contains("after_script failed, but job will continue unaffected"),
        "{trace}"
    );
    assert!(trace.contains("ERROR: Job failed: exit code 3"), "{trace}");
    assert!(has_section(&trace, "after_script"));
}

#[tokio::test]
async fn after_script_sees_success_and_its_failure_does_not_fail_the_job() {
    let h = Harness::new();
    let j = with_after_script(
        job(3, &["true"]),
        &["echo \"after: $CI_JOB_STATUS\"", "exit 9"],
    );
    let (r, trace) = h.run("p3", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(trace.contains("after: success\n"), "{trace}");
}

/// Waits until the trace written so far contains `needle`.
async fn wait_for(sink: &flotilla_job::BufferSink, needle: &str) {
    for _ in 0..200 {
        if sink.text().contains(needle) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{needle:?} never appeared in {:?}", sink.text());
}

async fn run_and_cancel(force: bool) -> (flotilla_job::JobResult, String) {
    let h = Harness::new();
    let j = with_after_script(
        job(4, &["echo started", "sleep 30", "echo never"]),
        &["echo \"after: $CI_JOB_STATUS\""],
    );
    let env = h.env("p4");
    let runner =
        flotilla_job::JobRunner::new(&env, &h.artifacts, &h.cache).with_options(RunOptions {
            scratch_dir: Some(h.root.path().to_path_buf()),
            ..Default::default()
        });
    let cancel = JobCancel::new();
    let sink = flotilla_job::BufferSink::new();
    let mut writer = sink.clone();
    let run = runner.run(&j, &mut writer, &cancel);
    let trigger = async {
        wait_for(&sink, "started\n").await;
        if force {
            cancel.abort();
        } else {
            cancel.cancel();
        }
    };
    let (r, ()) = tokio::join!(run, trigger);
    (r, sink.text())
}

#[tokio::test]
async fn a_graceful_cancel_stops_the_script_and_runs_after_script() {
    let (r, trace) = run_and_cancel(false).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::JobCanceled,
            exit_code: None
        },
        "{trace}"
    );
    assert!(!trace.contains("never\n"), "{trace}");
    assert!(trace.contains("after: canceled\n"), "{trace}");
    assert!(has_section(&trace, "cleanup_file_variables"), "{trace}");
}

#[tokio::test]
async fn a_forced_cancel_kills_everything_and_skips_after_script() {
    let (r, trace) = run_and_cancel(true).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::JobCanceled,
            exit_code: None
        },
        "{trace}"
    );
    assert!(!trace.contains("never\n"), "{trace}");
    assert!(!trace.contains("after:"), "{trace}");
    assert!(!has_section(&trace, "after_script"), "{trace}");
    // The file variables are still removed.
    assert!(has_section(&trace, "cleanup_file_variables"), "{trace}");
}

#[tokio::test]
async fn the_job_deadline_fails_it_with_a_timeout_and_no_after_script() {
    let h = Harness::new();
    let mut j = with_after_script(
        job(5, &["echo started", "sleep 30", "echo never"]),
        &["echo after"],
    );
    j.runner_info = RunnerInfo {
        timeout: 1,
        ..Default::default()
    };
    let (r, trace) = h.run("p5", &j).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::JobExecutionTimeout,
            exit_code: None
        },
        "{trace}"
    );
    assert!(
        trace.contains("execution took longer than 1 seconds"),
        "{trace}"
    );
    assert!(
        !trace.contains("never\n") && !trace.contains("after\n"),
        "{trace}"
    );
}

#[tokio::test]
async fn a_step_timeout_fails_the_job_but_after_script_still_runs() {
    let h = Harness::new();
    let mut j = with_after_script(
        job(6, &["sleep 30", "echo never"]),
        &["echo \"after: $CI_JOB_STATUS\""],
    );
    j.variables
        .push(Variable::new("RUNNER_SCRIPT_TIMEOUT", "1s"));
    let (r, trace) = h.run("p6", &j).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::JobExecutionTimeout,
            exit_code: None
        },
        "{trace}"
    );
    assert!(trace.contains("step_script took longer than 1s"), "{trace}");
    // A script stopped by its timeout is `timedout` to after_script (gitlab-runner
    // common/build.go, runtimeStateAndError).
    assert!(trace.contains("after: timedout\n"), "{trace}");

    // The step's own `timeout` field works the same way.
    let mut j = job(7, &["sleep 30"]);
    j.steps[0].timeout = 1;
    let (r, _) = h.run("p7", &j).await;
    assert!(matches!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::JobExecutionTimeout,
            ..
        }
    ));
}

#[tokio::test]
async fn after_script_has_its_own_timeout() {
    let h = Harness::new();
    let mut j = with_after_script(job(8, &["true"]), &["sleep 30", "echo never"]);
    j.variables
        .push(Variable::new("RUNNER_AFTER_SCRIPT_TIMEOUT", "1s"));
    let (r, trace) = h.run("p8", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(trace.contains("after_script timed out after 1s"), "{trace}");
    assert!(!trace.contains("never\n"));
}

#[tokio::test]
async fn masked_values_and_tokens_never_reach_the_trace() {
    let h = Harness::new();
    let mut j = job(
        9,
        &[
            // The secret is printed in two pieces by two processes with a pause between them,
            // so it reaches the runner in separate chunks.
            "printf 'split: s3cr3t-'; sleep 0.3; printf 'Value-XYZ!\\n'",
            "echo \"whole: $MY_SECRET\"",
            "echo \"job token: $CI_JOB_TOKEN\"",
            "echo 'pat: glpat-AbCdEf1234567890xyz_ok done'",
            "echo 'custom: mytok_ABC123 done'",
        ],
    );
    j.variables
        .push(Variable::new("MY_SECRET", "s3cr3t-Value-XYZ").masked());
    j.features.token_mask_prefixes = vec!["mytok_".into()];
    let (r, trace) = h.run("p9", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(!trace.contains("s3cr3t-Value-XYZ"), "{trace}");
    assert!(trace.contains("split: [MASKED]!\n"), "{trace}");
    assert!(trace.contains("whole: [MASKED]\n"), "{trace}");
    assert!(!trace.contains("jobtoken9"), "{trace}");
    assert!(
        trace.contains("job token: [MASKED]\n") || trace.contains("job token: glcbt-[MASKED]\n"),
        "{trace}"
    );
    assert!(trace.contains("pat: glpat-[MASKED] done\n"), "{trace}");
    assert!(trace.contains("custom: mytok_[MASKED] done\n"), "{trace}");
}

/// Values no shell quoting mistake survives.
const NASTY: &[&str] = &[
    "it's \"quoted\"",
    "$HOME ${PATH} $(echo pwned) `echo pwned`",
    "back\\slash\\n and trailing\\",
    "multi\nline\n\n",
    "unicode: héllo ✓ 日本語 🚀",
    "}\n} < /dev/null\nexit 7",
    "%s %d -n -e",
    "\ttab\r\n",
];

#[tokio::test]
async fn variables_with_nasty_values_round_trip_exactly() {
    let h = Harness::new();
    let mut commands = Vec::new();
    let mut j = job(10, &[]);
    for (i, v) in NASTY.iter().enumerate() {
        j.variables
            .push(Variable::new(format!("NASTY_{i}"), *v).raw());
        commands.push(format!("printf '\\001%s\\002' \"$NASTY_{i}\""));
    }
    // A non-raw variable is expanded once; `$$` is a literal dollar.
    j.variables.push(Variable::new("BASE", "/opt"));
    j.variables
        .push(Variable::new("EXPANDED", "$BASE/bin:$$HOME"));
    commands.push("printf '\\001%s\\002' \"$EXPANDED\"".into());
    j.steps[0].script = commands;
    let (r, trace) = h.run("p10", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    for v in NASTY {
        assert!(
            trace.contains(&format!("\u{1}{v}\u{2}")),
            "{v:?} did not survive: {trace:?}"
        );
    }
    assert!(trace.contains("\u{1}/opt/bin:$HOME\u{2}"), "{trace:?}");
}

#[tokio::test]
async fn file_variables_are_private_files_removed_at_cleanup() {
    let h = Harness::new();
    let mut j = job(
        11,
        &[
            "echo \"path=$CONFIG_FILE\"",
            "cat \"$CONFIG_FILE\"",
            "stat -c 'mode=%a' \"$CONFIG_FILE\"",
            "echo \"ref=$USES_FILE\"",
        ],
    );
    j.variables.push(
        Variable::new("CONFIG_FILE", "key: 'value'\n$NOT_EXPANDED\n")
            .file()
            .raw(),
    );
    j.variables
        .push(Variable::new("USES_FILE", "--config=$CONFIG_FILE"));
    let (r, trace) = h.run("p11", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    let tmp = format!("{}.tmp", h.project("p11").display());
    assert!(
        trace.contains(&format!("path={tmp}/CONFIG_FILE\n")),
        "{trace}"
    );
    assert!(trace.contains("key: 'value'\n$NOT_EXPANDED\n"), "{trace}");
    assert!(trace.contains("mode=600\n"), "{trace}");
    assert!(
        trace.contains(&format!("ref=--config={tmp}/CONFIG_FILE\n")),
        "{trace}"
    );
    assert!(
        !std::path::Path::new(&tmp).exists(),
        "the temporary directory is removed"
    );
}

#[tokio::test]
async fn background_processes_do_not_hang_the_stage() {
    let h = Harness::new();
    let j = job(12, &["sleep 60 &", "echo done"]);
    let (r, trace) = h.run("p12", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(trace.contains("done\n"));
}

#[tokio::test]
async fn the_output_limit_truncates_the_log_but_not_the_job() {
    let h = Harness::new();
    let j = job(
        13,
        &[
            "head -c 300000 /dev/zero | tr '\\0' x",
            "echo finished > marker.txt",
        ],
    );
    let (r, trace) = h
        .run_with(
            "p13",
            &j,
            &JobCancel::new(),
            RunOptions {
                output_limit: 100_000,
                ..Default::default()
            },
        )
        .await;
    assert_eq!(r.outcome, Outcome::Success);
    assert!(r.trace.truncated);
    assert!(trace.contains("Job's log exceeded limit of 100000 bytes."));
    assert!(trace.len() < 100_300, "{}", trace.len());
    assert!(h.project("p13").join("marker.txt").exists());
}

#[tokio::test]
async fn unsupported_native_steps_fail_as_configuration_errors() {
    let h = Harness::new();
    let mut j = job(14, &["echo never"]);
    j.run = Some("[]".into());
    let (r, trace) = h.run("p14", &j).await;
    assert_eq!(
        r.outcome,
        Outcome::Failed {
            reason: FailureReason::RunnerConfigurationError,
            exit_code: None
        }
    );
    assert!(!trace.contains("never\n"));
}

/// A feature flag that would change how the stage script is written is not honoured, and the
/// log says so rather than ignoring it.
#[tokio::test]
async fn script_feature_flags_flotilla_does_not_honour_are_named() {
    let h = Harness::new();
    let mut j = job(40, &["true"]);
    j.variables
        .push(Variable::new("FF_ENABLE_BASH_EXIT_CODE_CHECK", "true"));
    let (r, trace) = h.run("p40", &j).await;
    assert_eq!(r.outcome, Outcome::Success, "{trace}");
    assert!(
        trace.contains("FF_ENABLE_BASH_EXIT_CODE_CHECK is not supported by this runner"),
        "{trace}"
    );
    assert!(!trace.contains("FF_USE_LEGACY_BASH_EVAL"), "{trace}");
}

/// `CI_DEBUG_TRACE` traces the script's commands (`set -x`), unless the runner sets
/// `debug_trace_disabled`: then GitLab Runner's warning and no trace, whatever the job asks.
#[tokio::test]
async fn a_runner_that_disables_debug_trace_ignores_ci_debug_trace() {
    let h = Harness::new();
    let mut j = job(910, &["echo traced-command"]);
    j.variables.push(Variable::new("CI_DEBUG_TRACE", "true"));
    let (r, trace) = h.run("dbg", &j).await;
    assert!(r.outcome.is_success(), "{trace}");
    assert!(trace.contains("+ echo traced-command"), "{trace}");

    let (r, trace) = h
        .run_with(
            "dbg",
            &j,
            &JobCancel::new(),
            RunOptions {
                debug_trace_disabled: true,
                ..RunOptions::default()
            },
        )
        .await;
    assert!(r.outcome.is_success(), "{trace}");
    assert!(!trace.contains("+ echo traced-command"), "{trace}");
    assert!(
        trace.contains("WARNING: CI_DEBUG_TRACE: usage is disabled on this Runner"),
        "{trace}"
    );
}

/// The runner's `pre_build_script` and `post_build_script` run in the `script` step around the
/// job's commands, each as one command (GitLab Runner's `writeUserScript`); the post script
/// not after a failed command.
#[tokio::test]
async fn the_runners_pre_and_post_build_scripts_wrap_the_jobs_commands() {
    let h = Harness::new();
    let options = || RunOptions {
        pre_build_script: Some("echo pre-one\necho pre-two".into()),
        post_build_script: Some("echo post-build".into()),
        ..RunOptions::default()
    };
    let j = job(920, &["echo the-job"]);
    let (r, trace) = h.run_with("pb", &j, &JobCancel::new(), options()).await;
    assert!(r.outcome.is_success(), "{trace}");
    let at = |s: &str| {
        trace
            .find(s)
            .unwrap_or_else(|| panic!("{s} missing: {trace}"))
    };
    assert!(at("$ echo pre-one # collapsed multi-line command") < at("pre-two\n"));
    assert!(at("pre-two\n") < at("$ echo the-job"));
    assert!(at("$ echo the-job") < at("$ echo post-build"));

    let failing = job(921, &["false"]);
    let (r, trace) = h
        .run_with("pb2", &failing, &JobCancel::new(), options())
        .await;
    assert!(!r.outcome.is_success(), "{trace}");
    assert!(trace.contains("pre-two"), "{trace}");
    assert!(!trace.contains("$ echo post-build"), "{trace}");
}
