//! The cases. Each names the source that fixes its outcome; the shell semantics all follow
//! from the one script shape GitLab Runner writes (see [`crate::gitlab_bash_script`]).

use crate::{Case, Expect, Shell};
use Expect::{Allowed, Failed, Passed, TimedOut};

/// gitlab-runner `shells/bash.go` (`BashWriter.Finish` of 19.1 and later: `errexit`,
/// `pipefail`, the body run by `eval` in a subshell, then `exit 0`; `CheckForErrors` off without `FF_ENABLE_BASH_EXIT_CODE_CHECK`)
/// and `shells/abstract.go` (`writeCommands`: each command written as it is). The status is
/// bash's for that script.
pub(crate) const BASH_GO: &str =
    "gitlab-runner shells/bash.go BashWriter.Finish; shells/abstract.go writeCommands";
/// Rails sends `before_script` and `script` as one `script` step (GitLab
/// `lib/gitlab/ci/build/step.rb` `from_commands`), so they share one shell.
pub(crate) const STEP_RB: &str =
    "gitlab lib/gitlab/ci/build/step.rb from_commands (before_script + script)";
/// docs.gitlab.com/ci/yaml/#after_script: a separate shell, runs after a failure, its failure
/// and exit code do not change the job's status; `CI_JOB_STATUS` set
/// (gitlab-runner `common/build.go` `executeAfterScript`, `shells/abstract.go`
/// `writeAfterScript` with its `Running after script...` notice).
const AFTER: &str = "docs.gitlab.com/ci/yaml/#after_script; gitlab-runner common/build.go executeAfterScript, shells/abstract.go writeAfterScript";
/// `RUNNER_SCRIPT_TIMEOUT` (docs.gitlab.com/ci/runners/configure_runners/#set-script-and-after_script-timeouts);
/// the job state `timedout` for a script timeout (gitlab-runner `common/build.go`
/// `runtimeStateAndError`).
const TIMEOUT: &str = "docs.gitlab.com/ci/runners/configure_runners/#set-script-and-after_script-timeouts; gitlab-runner common/build.go runtimeStateAndError";
/// docs.gitlab.com/ci/yaml/#allow_failure and #allow_failureexit_codes.
const ALLOW: &str = "docs.gitlab.com/ci/yaml/#allow_failure, #allow_failureexit_codes";
/// `GITLAB_ENV`: gitlab-runner `shells/abstract.go` `exportVariables` (exported, then each
/// line of the file exported at the start of every stage) and `common/buildtest/variables.go`
/// `RunBuildWithPassingEnvsMultistep` (seen by later stages, values not evaluated).
const GITLAB_ENV: &str = "gitlab-runner shells/abstract.go exportVariables; common/buildtest/variables.go RunBuildWithPassingEnvsMultistep";
/// docs.gitlab.com/ci/variables/ (precedence, `$$` escapes, `expand: false`) and
/// docs.gitlab.com/ci/variables/where_variables_can_be_used/ (expanded by GitLab before the
/// runner; the runner exports values quoted, never evaluated).
const VARS: &str =
    "docs.gitlab.com/ci/variables/; docs.gitlab.com/ci/variables/where_variables_can_be_used/";
/// docs.gitlab.com/ci/variables/predefined_variables/.
const PREDEFINED: &str = "docs.gitlab.com/ci/variables/predefined_variables/";
/// The build directory GitLab Runner leaves: `shells/abstract.go` `writeRefspecFetchCmd`
/// (`git init`, `git fetch origin <refspecs>`, `git checkout -f -q <sha>`: a detached HEAD,
/// `git clean -ffdx`) and docs.gitlab.com/ci/runners/configure_runners/#git-strategy,
/// #git-checkout.
const GIT: &str = "gitlab-runner shells/abstract.go writeRefspecFetchCmd; docs.gitlab.com/ci/runners/configure_runners/#git-strategy";
/// docs.gitlab.com/ci/yaml/#hookspre_get_sources_script; gitlab-runner shells/abstract.go
/// `writeGetSourcesScript` (the hook before the fetch, in the same shell).
const HOOKS: &str = "docs.gitlab.com/ci/yaml/#hookspre_get_sources_script; gitlab-runner shells/abstract.go writeGetSourcesScript";

const BASE: Case = Case {
    name: "",
    before: &[],
    script: &[],
    after: &[],
    extra: "",
    expect: Passed,
    log_has: &[],
    log_lacks: &[],
    shell: Shell::Any,
    source: BASH_GO,
};

/// Every case.
pub static CASES: &[Case] = &[
    // ----- exit status: simple commands -------------------------------------------------------
    Case {
        name: "true-passes",
        script: &["true"],
        ..BASE
    },
    Case {
        name: "false-fails",
        script: &["false"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "exit-code-is-kept",
        script: &["exit 3"],
        expect: Failed(3),
        ..BASE
    },
    Case {
        name: "exit-255",
        script: &["exit 255"],
        expect: Failed(255),
        ..BASE
    },
    Case {
        name: "exit-256-wraps-to-zero",
        script: &["exit 256"],
        ..BASE
    },
    Case {
        name: "false-stops-the-script",
        script: &["false", "echo never-$((1+2))"],
        expect: Failed(1),
        log_lacks: &["never-3"],
        ..BASE
    },
    Case {
        name: "command-not-found-127",
        script: &["flotilla-no-such-command"],
        expect: Failed(127),
        ..BASE
    },
    Case {
        name: "not-executable-126",
        script: &["printf 'echo x\\n' > notexec.sh", "./notexec.sh"],
        expect: Failed(126),
        ..BASE
    },
    Case {
        name: "killed-by-signal-137",
        script: &["sh -c 'kill -9 $$'"],
        expect: Failed(137),
        ..BASE
    },
    // busybox sh answers 127 here, bash 1.
    Case {
        name: "command-v-missing",
        script: &["command -v flotilla-no-such-tool"],
        expect: Failed(1),
        shell: Shell::Bash,
        ..BASE
    },
    Case {
        name: "test-n-empty",
        script: &[r#"test -n """#],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "read-at-eof-fails",
        script: &["read line"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "stdin-is-empty",
        script: &["cat", "echo reached-$((7+2))"],
        log_has: &["reached-9"],
        ..BASE
    },
    Case {
        name: "exit-0-ends-the-script",
        script: &["exit 0", "echo never-$((6+3))"],
        log_lacks: &["never-9"],
        ..BASE
    },
    // ----- exit status: && || ! ------------------------------------------------------------------
    Case {
        name: "and-list-failing-last",
        script: &["[ -f missing.txt ] && cat missing.txt"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "and-list-failing-not-last",
        script: &[
            "[ -f missing.txt ] && cat missing.txt",
            "echo reached-$((1+1))",
        ],
        log_has: &["reached-2"],
        ..BASE
    },
    Case {
        name: "test-and-echo-last",
        script: &["test 1 = 2 && echo x"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "bang-true-last",
        script: &["! true"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "bang-true-not-last",
        script: &["! true", "echo reached-$((2+1))"],
        log_has: &["reached-3"],
        ..BASE
    },
    Case {
        name: "bang-false",
        script: &["! false"],
        ..BASE
    },
    Case {
        name: "or-recovers",
        script: &["false || true"],
        ..BASE
    },
    Case {
        name: "or-both-fail",
        script: &["false || false"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "and-second-fails-not-last",
        script: &["true && false", "echo never-$((1+1))"],
        expect: Failed(1),
        log_lacks: &["never-2"],
        ..BASE
    },
    Case {
        name: "and-first-fails-not-last",
        script: &["false && true", "echo reached-$((3+1))"],
        log_has: &["reached-4"],
        ..BASE
    },
    Case {
        name: "or-then-and-fails",
        script: &["true || false && false"],
        expect: Failed(1),
        ..BASE
    },
    // ----- exit status: pipelines ----------------------------------------------------------------
    Case {
        name: "pipefail-first-fails",
        script: &["false | true"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "pipe-last-fails",
        script: &["true | false"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "pipefail-keeps-the-code",
        script: &["(exit 7) | true"],
        expect: Failed(7),
        ..BASE
    },
    Case {
        name: "pipefail-rightmost-failure",
        script: &["(exit 7) | (exit 5)"],
        expect: Failed(5),
        ..BASE
    },
    Case {
        name: "pipe-into-tee-fails",
        script: &["false | tee out.txt"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "sigpipe-fails-the-pipeline",
        script: &["yes | head -n 1"],
        expect: Failed(141),
        ..BASE
    },
    // ----- exit status: subshells, groups, lists -------------------------------------------------
    Case {
        name: "subshell-exit-code",
        script: &["(exit 4)"],
        expect: Failed(4),
        ..BASE
    },
    Case {
        name: "subshell-inherits-errexit",
        script: &["(false; echo never-$((2+2)))"],
        expect: Failed(1),
        log_lacks: &["never-4"],
        ..BASE
    },
    Case {
        name: "group-fails",
        script: &["{ false; }"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "semicolon-list-stops",
        script: &["false; echo never-$((5+2))"],
        expect: Failed(1),
        log_lacks: &["never-7"],
        ..BASE
    },
    Case {
        name: "semicolon-list-or",
        script: &["echo a; false || echo reached-$((6+2))"],
        log_has: &["reached-8"],
        ..BASE
    },
    Case {
        name: "command-substitution-alone",
        script: &["$(exit 3)"],
        expect: Failed(3),
        ..BASE
    },
    Case {
        name: "assignment-from-failure",
        script: &["x=$(false)"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "echo-of-failure-passes",
        script: &["echo $(false)"],
        ..BASE
    },
    Case {
        name: "background-wait-passes",
        script: &["sleep 0.1 &", "wait"],
        ..BASE
    },
    Case {
        name: "background-wait-fails",
        script: &["(exit 6) &", "wait $!"],
        expect: Failed(6),
        ..BASE
    },
    // ----- exit status: set +e, set -e -----------------------------------------------------------
    Case {
        name: "set-e-off-false-last",
        script: &["set +e", "false"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "set-e-off-continues",
        script: &["set +e", "false", "echo reached-$((4+1))"],
        log_has: &["reached-5"],
        ..BASE
    },
    Case {
        name: "set-e-back-on",
        script: &["set +e", "false", "set -e", "false", "echo never-$((11*2))"],
        expect: Failed(1),
        log_lacks: &["never-22"],
        ..BASE
    },
    Case {
        name: "noclobber-is-off",
        script: &["echo a > clobber.txt", "echo b > clobber.txt"],
        ..BASE
    },
    // ----- exit status: compound commands ---------------------------------------------------------
    Case {
        name: "for-loop-ending-in-failed-and",
        script: &["for i in 1 2; do [ $i = 3 ] && echo $i; done"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "for-loop-failed-and-not-last",
        script: &[
            "for i in 1 2; do [ $i = 3 ] && echo $i; done",
            "echo reached-$((5+1))",
        ],
        log_has: &["reached-6"],
        ..BASE
    },
    Case {
        name: "if-false-without-else",
        script: &["if false; then echo x; fi"],
        ..BASE
    },
    Case {
        name: "failure-inside-then",
        script: &["if true; then false; fi", "echo never-$((3+3))"],
        expect: Failed(1),
        log_lacks: &["never-6"],
        ..BASE
    },
    Case {
        name: "while-false",
        script: &["while false; do :; done"],
        ..BASE
    },
    Case {
        name: "case-without-match",
        script: &["case x in y) echo y;; esac"],
        ..BASE
    },
    Case {
        name: "function-defined-then-called",
        script: &["f() { echo in-f-$((6*2)); }", "f"],
        log_has: &["in-f-12"],
        ..BASE
    },
    Case {
        name: "function-return-code",
        script: &["f() { return 3; }", "f"],
        expect: Failed(3),
        ..BASE
    },
    Case {
        name: "function-ending-in-failed-and",
        script: &["f() { false && true; }", "f", "echo never-$((6+7))"],
        expect: Failed(1),
        log_lacks: &["never-13"],
        ..BASE
    },
    Case {
        name: "exit-inside-function",
        script: &["f() { exit 9; }", "f", "echo never-$((7*3))"],
        expect: Failed(9),
        log_lacks: &["never-21"],
        ..BASE
    },
    // ----- multi-line commands --------------------------------------------------------------------
    Case {
        name: "multi-line-stops-at-failure",
        script: &["echo one-$((0+1))\nfalse\necho never-$((4+4))"],
        expect: Failed(1),
        log_has: &["one-1"],
        log_lacks: &["never-8"],
        ..BASE
    },
    Case {
        name: "multi-line-if-block",
        script: &["if [ -d / ]; then\n  echo dir-$((1+2))\nfi"],
        log_has: &["dir-3", "# collapsed multi-line command"],
        ..BASE
    },
    Case {
        name: "multi-line-last-and-fails",
        script: &["echo x\n[ -f nope ] && echo y"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "heredoc",
        script: &["cat <<EOF\nheredoc-$((7*2))\nEOF"],
        log_has: &["heredoc-14"],
        ..BASE
    },
    // ----- traps ----------------------------------------------------------------------------------
    Case {
        name: "exit-trap-runs",
        script: &["trap 'echo trapped-$((2*5))' EXIT", "exit 5"],
        expect: Failed(5),
        log_has: &["trapped-10"],
        ..BASE
    },
    Case {
        name: "exit-trap-sets-the-status",
        script: &["trap 'exit 0' EXIT", "false"],
        ..BASE
    },
    Case {
        name: "err-trap-runs",
        script: &["trap 'echo err-trap-$((3*3))' ERR", "false"],
        expect: Failed(1),
        log_has: &["err-trap-9"],
        shell: Shell::Bash,
        ..BASE
    },
    // ----- each command parsed when it runs (eval) ------------------------------------------------
    Case {
        name: "syntax-error-after-good-lines",
        script: &["echo one-$((1+1))", "if then fi", "echo never-$((5*2))"],
        expect: Failed(2),
        log_has: &["one-2"],
        log_lacks: &["never-10"],
        ..BASE
    },
    Case {
        name: "alias-on-the-next-line",
        script: &[
            "shopt -s expand_aliases",
            "alias hi='echo alias-$((2+9))'",
            "hi",
        ],
        log_has: &["alias-11"],
        shell: Shell::Bash,
        ..BASE
    },
    Case {
        name: "extglob-on-the-next-line",
        script: &[
            "shopt -s extglob",
            "mkdir -p eg && touch eg/a.txt eg/b.log",
            "ls eg/!(*.log)",
        ],
        log_has: &["\neg/a.txt"],
        log_lacks: &["\neg/b.log"],
        shell: Shell::Bash,
        ..BASE
    },
    Case {
        name: "double-brackets-false",
        script: &["[[ 1 == 2 ]]"],
        expect: Failed(1),
        shell: Shell::Bash,
        ..BASE
    },
    Case {
        name: "nounset-stops",
        script: &[
            "set -u",
            "echo $FLOTILLA_UNSET_VARIABLE",
            "echo never-$((8*3))",
        ],
        expect: Failed(1),
        log_lacks: &["never-24"],
        shell: Shell::Bash,
        ..BASE
    },
    // ----- before_script and script: one step, one shell ------------------------------------------
    Case {
        name: "before-script-failure-stops-the-step",
        before: &["exit 4"],
        script: &["echo never-$((9*3))"],
        expect: Failed(4),
        log_lacks: &["never-27"],
        source: STEP_RB,
        ..BASE
    },
    Case {
        name: "before-script-exports-reach-script",
        before: &["export FROM_BEFORE=seen-$((2*20))"],
        script: &["echo $FROM_BEFORE"],
        log_has: &["seen-40"],
        source: STEP_RB,
        ..BASE
    },
    Case {
        name: "before-script-cd-reaches-script",
        before: &["mkdir -p sub && cd sub"],
        script: &["pwd"],
        log_has: &["/sub\n"],
        source: STEP_RB,
        ..BASE
    },
    Case {
        name: "before-script-and-last-line",
        before: &["[ -f missing.txt ] && cat missing.txt"],
        script: &["echo reached-$((8*2))"],
        log_has: &["reached-16"],
        source: STEP_RB,
        ..BASE
    },
    // ----- after_script ---------------------------------------------------------------------------
    Case {
        name: "after-script-runs-after-failure",
        script: &["false"],
        after: &["echo after-ran-$((5*5))"],
        expect: Failed(1),
        log_has: &["after-ran-25", "Running after script..."],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-failure-is-ignored",
        script: &["true"],
        after: &["exit 3"],
        log_has: &["after_script failed, but job will continue unaffected"],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-keeps-the-exit-code",
        script: &["exit 5"],
        after: &["exit 0"],
        expect: Failed(5),
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-sees-success",
        script: &["true"],
        after: &["echo status-$CI_JOB_STATUS"],
        log_has: &["status-success"],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-sees-failed",
        script: &["false"],
        after: &["echo status-$CI_JOB_STATUS"],
        expect: Failed(1),
        log_has: &["status-failed"],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-is-a-new-shell",
        script: &["export IN_SCRIPT=set-in-script"],
        after: &[r#"echo "seen-${IN_SCRIPT:-nothing}""#],
        log_has: &["seen-nothing"],
        log_lacks: &["seen-set-in-script"],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-starts-in-the-project",
        script: &["mkdir -p deeper && cd deeper"],
        after: &["pwd"],
        log_lacks: &["/deeper\n"],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-after-before-script-failure",
        before: &["false"],
        script: &["echo never-$((6*6))"],
        after: &["echo after-$((6*7))"],
        expect: Failed(1),
        log_has: &["after-42"],
        log_lacks: &["never-36"],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-sees-job-variables",
        extra: "variables:\n  JOB_VAR: job-value",
        after: &[r#"echo "v=$JOB_VAR""#],
        script: &["true"],
        log_has: &["v=job-value"],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-own-exit-status",
        script: &["true"],
        after: &["false", "echo never-$((9*9))"],
        log_lacks: &["never-81"],
        source: AFTER,
        ..BASE
    },
    // ----- timeouts -------------------------------------------------------------------------------
    Case {
        name: "script-timeout-then-after-script",
        extra: "variables:\n  RUNNER_SCRIPT_TIMEOUT: 2s",
        script: &["sleep 60"],
        after: &["echo status-$CI_JOB_STATUS"],
        expect: TimedOut,
        log_has: &["status-timedout"],
        source: TIMEOUT,
        ..BASE
    },
    // ----- allow_failure --------------------------------------------------------------------------
    Case {
        name: "allow-failure-true",
        extra: "allow_failure: true",
        script: &["exit 3"],
        expect: Allowed(3),
        source: ALLOW,
        ..BASE
    },
    Case {
        name: "allow-failure-exit-code-listed",
        extra: "allow_failure:\n  exit_codes: [137, 3]",
        script: &["exit 3"],
        expect: Allowed(3),
        source: ALLOW,
        ..BASE
    },
    Case {
        name: "allow-failure-exit-code-not-listed",
        extra: "allow_failure:\n  exit_codes: 4",
        script: &["exit 3"],
        expect: Failed(3),
        source: ALLOW,
        ..BASE
    },
    Case {
        name: "allow-failure-false",
        extra: "allow_failure: false",
        script: &["false"],
        expect: Failed(1),
        source: ALLOW,
        ..BASE
    },
    // ----- GITLAB_ENV -----------------------------------------------------------------------------
    Case {
        name: "gitlab-env-reaches-the-next-stage",
        script: &[r#"echo FROM_ENV=env-value >> "$GITLAB_ENV""#],
        after: &[r#"echo "got-$FROM_ENV""#],
        log_has: &["got-env-value"],
        source: GITLAB_ENV,
        ..BASE
    },
    Case {
        name: "gitlab-env-not-in-the-same-stage",
        script: &[
            r#"echo LATE=late-value >> "$GITLAB_ENV""#,
            r#"echo "now-${LATE:-unset}""#,
        ],
        log_has: &["now-unset"],
        source: GITLAB_ENV,
        ..BASE
    },
    Case {
        name: "gitlab-env-values-are-not-run",
        script: &[r#"echo 'RAW=$(echo executed)' >> "$GITLAB_ENV""#],
        after: &[r#"echo "raw-$RAW""#],
        log_has: &["raw-$(echo executed)"],
        log_lacks: &["raw-executed"],
        source: GITLAB_ENV,
        ..BASE
    },
    Case {
        name: "gitlab-env-overrides-a-job-variable",
        extra: "variables:\n  OVER: from-job",
        script: &[r#"echo OVER=from-env >> "$GITLAB_ENV""#],
        after: &[r#"echo "over-$OVER""#],
        log_has: &["over-from-env"],
        source: GITLAB_ENV,
        ..BASE
    },
    Case {
        name: "gitlab-env-is-a-file",
        script: &[r#"test -n "$GITLAB_ENV" && test -f "$GITLAB_ENV""#],
        source: GITLAB_ENV,
        ..BASE
    },
    // ----- variables ------------------------------------------------------------------------------
    Case {
        name: "variable-value-is-never-run",
        extra: "variables:\n  EVIL: \"$(echo pwned) `echo pwned`\"",
        script: &[r#"echo "evil=$EVIL""#],
        log_has: &["evil=$(echo pwned) `echo pwned`"],
        log_lacks: &["evil=pwned"],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-references-another",
        extra: "variables:\n  VA: a-val\n  VB: \"$VA-b\"",
        script: &[r#"echo "b=$VB""#],
        log_has: &["b=a-val-b"],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-expands-to-any-depth",
        extra: "variables:\n  DA: x\n  DB: \"$DA y\"\n  DC: \"$DB z\"",
        script: &[r#"echo "c=$DC""#],
        log_has: &["c=x y z"],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-dollar-dollar-escapes",
        extra: "variables:\n  DOLLAR: \"$$HOME\"",
        script: &[r#"echo "d=$DOLLAR""#],
        log_has: &["d=$HOME"],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-expand-false",
        extra: "variables:\n  RAWV:\n    value: \"$CI_JOB_NAME\"\n    expand: false",
        script: &[r#"echo "raw=$RAWV""#],
        log_has: &["raw=$CI_JOB_NAME"],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-job-overrides-global",
        extra: "variables:\n  OVERRIDDEN: from-job",
        script: &[r#"echo "g=$OVERRIDDEN""#],
        log_has: &["g=from-job"],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-global-reaches-jobs",
        script: &[r#"echo "gl=$GLOBAL_ONLY""#],
        log_has: &["gl=from-global"],
        source: VARS,
        ..BASE
    },
    // ----- predefined variables -------------------------------------------------------------------
    Case {
        name: "predefined-ci-and-gitlab-ci",
        script: &[r#"echo "ci=$CI gl=$GITLAB_CI""#],
        log_has: &["ci=true gl=true"],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-job-name",
        script: &[r#"echo "jn=$CI_JOB_NAME""#],
        log_has: &["jn=predefined-job-name"],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-job-status-running",
        script: &[r#"echo "st=$CI_JOB_STATUS""#],
        log_has: &["st=running"],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-node-total-without-parallel",
        script: &[r#"echo "nt=$CI_NODE_TOTAL""#],
        log_has: &["nt=1"],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-job-manual-unset",
        script: &[r#"echo "man=${CI_JOB_MANUAL-unset}""#],
        log_has: &["man=unset"],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-project-dir-is-the-start",
        script: &[r#"test "$CI_PROJECT_DIR" = "$(pwd)""#],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-project-dir-in-builds-dir",
        script: &[r#"case "$CI_PROJECT_DIR" in "$CI_BUILDS_DIR"/*) ;; *) exit 1;; esac"#],
        source: PREDEFINED,
        ..BASE
    },
    // ----- exit status: more forms ------------------------------------------------------------
    Case {
        name: "subshell-exit-not-last",
        script: &["(exit 4)", "echo never-$((1+1))"],
        expect: Failed(4),
        log_lacks: &["never-2"],
        ..BASE
    },
    Case {
        name: "negated-pipeline-passes",
        script: &["! false | false"],
        ..BASE
    },
    Case {
        name: "arithmetic-test-false",
        script: &["[ $((1+1)) -eq 3 ]"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "arithmetic-command-zero-fails",
        script: &["(( 0 ))", "echo never-$((2+2))"],
        expect: Failed(1),
        log_lacks: &["never-4"],
        shell: Shell::Bash,
        ..BASE
    },
    Case {
        name: "until-loop-passes",
        script: &["i=0; until [ $i -ge 3 ]; do i=$((i+1)); done; echo i-is-$i"],
        log_has: &["i-is-3"],
        ..BASE
    },
    Case {
        name: "break-leaves-the-loop",
        script: &[
            "for i in 1 2 3; do [ $i = 2 ] && break; done",
            "echo loop-$((5+5))",
        ],
        log_has: &["loop-10"],
        ..BASE
    },
    Case {
        name: "eval-of-failure-fails",
        script: &["eval 'exit 6'"],
        expect: Failed(6),
        ..BASE
    },
    Case {
        name: "sourced-file-failure-fails",
        script: &[
            "printf 'false\\n' > failing.sh",
            ". ./failing.sh",
            "echo never-$((3+3))",
        ],
        expect: Failed(1),
        log_lacks: &["never-6"],
        ..BASE
    },
    Case {
        name: "child-shell-exit-code",
        script: &["sh -c 'exit 7'"],
        expect: Failed(7),
        ..BASE
    },
    Case {
        name: "coreutils-timeout-124",
        script: &["timeout 1 sleep 5"],
        expect: Failed(124),
        shell: Shell::BashWithGit,
        ..BASE
    },
    Case {
        name: "xargs-failure-123",
        script: &["echo x | xargs false"],
        expect: Failed(123),
        shell: Shell::BashWithGit,
        ..BASE
    },
    Case {
        name: "if-condition-failure-passes",
        script: &[r#"if [ "$(echo a)" = b ]; then echo y; fi"#],
        ..BASE
    },
    Case {
        name: "local-masks-failure",
        script: &[
            "f() { local x; x=1; local y=$(false); echo masked-$x; }",
            "f",
        ],
        log_has: &["masked-1"],
        ..BASE
    },
    Case {
        name: "export-masks-failure",
        script: &["export X=$(false)", "echo exported-$((7*6))"],
        log_has: &["exported-42"],
        ..BASE
    },
    Case {
        name: "unset-variable-is-empty",
        script: &[r#"test -z "$NOT_SET_ANYWHERE_AT_ALL""#],
        ..BASE
    },
    Case {
        name: "exit-minus-one-is-255",
        script: &["exit -1"],
        expect: Failed(255),
        shell: Shell::Bash,
        ..BASE
    },
    Case {
        name: "errexit-in-command-substitution-of-echo",
        script: &[r#"echo "got-$(false; echo inner)""#],
        ..BASE
    },
    Case {
        name: "pipeline-of-three-middle-fails",
        script: &["echo a | false | cat"],
        expect: Failed(1),
        ..BASE
    },
    Case {
        name: "set-o-pipefail-off-hides-failure",
        script: &["set +o pipefail", "false | true", "echo hidden-$((9+1))"],
        log_has: &["hidden-10"],
        ..BASE
    },
    Case {
        name: "return-in-sourced-file-keeps-code",
        script: &["printf 'return 5\\n' > ret.sh", ". ./ret.sh"],
        expect: Failed(5),
        ..BASE
    },
    // ----- after_script: more -------------------------------------------------------------------
    Case {
        name: "after-script-stops-at-its-failure",
        script: &["true"],
        after: &["false", "echo never-$((8+8))"],
        log_lacks: &["never-16"],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-notice-after-success",
        script: &["true"],
        after: &["echo after-$((1+2))"],
        log_has: &["Running after script...", "after-3"],
        source: AFTER,
        ..BASE
    },
    Case {
        name: "after-script-does-not-see-script-exports",
        script: &["export FROM_SCRIPT=yes"],
        after: &[r#"echo "from-script=[$FROM_SCRIPT]""#],
        log_has: &["from-script=[]"],
        source: AFTER,
        ..BASE
    },
    // ----- allow_failure: more -----------------------------------------------------------------
    Case {
        name: "allow-failure-true-on-success",
        extra: "allow_failure: true",
        script: &["true"],
        source: ALLOW,
        ..BASE
    },
    Case {
        name: "allow-failure-exit-codes-on-success",
        extra: "allow_failure:\n  exit_codes: [1]",
        script: &["true"],
        source: ALLOW,
        ..BASE
    },
    Case {
        name: "allow-failure-exit-code-from-after-failure",
        extra: "allow_failure:\n  exit_codes: [5]",
        script: &["exit 5"],
        after: &["exit 9"],
        expect: Allowed(5),
        source: ALLOW,
        ..BASE
    },
    // ----- GITLAB_ENV: more ----------------------------------------------------------------------
    Case {
        name: "gitlab-env-several-lines",
        script: &[
            r#"echo ENV_A=1 >> "$GITLAB_ENV""#,
            r#"echo ENV_B=2 >> "$GITLAB_ENV""#,
        ],
        after: &[r#"echo "env-ab=$ENV_A$ENV_B""#],
        log_has: &["env-ab=12"],
        source: GITLAB_ENV,
        ..BASE
    },
    // ----- variables: more -----------------------------------------------------------------------
    Case {
        name: "variable-spaces-kept",
        extra: "variables:\n  SPACED: \"a  b \"",
        script: &[r#"test "$SPACED" = "a  b ""#],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-multi-line-value",
        extra: "variables:\n  MULTI: \"one\\ntwo\"",
        script: &[r#"test "$(printf '%s\n' "$MULTI" | wc -l)" -eq 2"#],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-quotes-kept",
        extra: "variables:\n  QUOTED: \"it's \\\"quoted\\\"\"",
        script: &[r#"test "$QUOTED" = "it's \"quoted\"""#],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-integer-value",
        extra: "variables:\n  NUMBER: 42",
        script: &[r#"test "$NUMBER" = 42"#],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-value-and-description",
        extra: "variables:\n  DESCRIBED:\n    value: \"the-value\"\n    description: \"what it is\"",
        script: &[r#"test "$DESCRIBED" = the-value"#],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-references-predefined",
        extra: "variables:\n  OWN: \"$CI_JOB_NAME-x\"",
        script: &[r#"test "$OWN" = variable-references-predefined-x"#],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-references-global",
        extra: "variables:\n  LOCAL_FROM_GLOBAL: \"${GLOBAL_ONLY}-x\"",
        script: &[r#"test "$LOCAL_FROM_GLOBAL" = from-global-x"#],
        source: VARS,
        ..BASE
    },
    Case {
        name: "variable-semicolon-is-data",
        extra: "variables:\n  SEMI: \"a; exit 3\"",
        script: &[r#"test "$SEMI" = "a; exit 3""#],
        source: VARS,
        ..BASE
    },
    // ----- predefined: more ----------------------------------------------------------------------
    Case {
        name: "predefined-job-stage",
        script: &[r#"test "$CI_JOB_STAGE" = test"#],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-job-id-is-a-number",
        script: &[r#"test "$CI_JOB_ID" -gt 0"#],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-pipeline-id-is-a-number",
        script: &[r#"test "$CI_PIPELINE_ID" -gt 0"#],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-server-yes",
        script: &[r#"test "$CI_SERVER" = yes"#],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-shared-or-disposable",
        script: &[
            r#"test "${CI_SHARED_ENVIRONMENT-}${CI_DISPOSABLE_ENVIRONMENT-}" = true"#,
            r#"echo "environment-is-${CI_SHARED_ENVIRONMENT:+shared}${CI_DISPOSABLE_ENVIRONMENT:+disposable}""#,
        ],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-api-url-under-the-server",
        script: &[r#"test "$CI_API_V4_URL" = "$CI_SERVER_URL/api/v4""#],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-job-url-names-the-job",
        script: &[
            r#"test "$CI_JOB_URL" = "$CI_PROJECT_URL/-/jobs/$CI_JOB_ID""#,
            r#"test "$CI_PIPELINE_URL" = "$CI_PROJECT_URL/-/pipelines/$CI_PIPELINE_ID""#,
        ],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-job-started-at-is-utc",
        script: &[
            r#"case "$CI_JOB_STARTED_AT" in [0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T*Z) ;; *) exit 1;; esac"#,
        ],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-user-login",
        script: &[
            r#"test -n "$GITLAB_USER_LOGIN""#,
            r#"test "$GITLAB_USER_ID" -gt 0"#,
        ],
        source: PREDEFINED,
        ..BASE
    },
    Case {
        name: "predefined-runner-version-and-arch",
        script: &[
            r#"test -n "$CI_RUNNER_VERSION""#,
            r#"case "$CI_RUNNER_EXECUTABLE_ARCH" in linux/*) ;; *) exit 1;; esac"#,
        ],
        source: PREDEFINED,
        ..BASE
    },
    // ----- git: the build directory --------------------------------------------------------------
    Case {
        name: "git-head-is-the-commit",
        extra: "variables:\n  GIT_STRATEGY: fetch",
        script: &[r#"test "$(git rev-parse HEAD)" = "$CI_COMMIT_SHA""#],
        shell: Shell::BashWithGit,
        source: GIT,
        ..BASE
    },
    Case {
        name: "git-head-is-detached",
        extra: "variables:\n  GIT_STRATEGY: clone",
        script: &[r#"test "$(git rev-parse --abbrev-ref HEAD)" = HEAD"#],
        shell: Shell::BashWithGit,
        source: GIT,
        ..BASE
    },
    Case {
        name: "git-short-sha-is-the-commits",
        extra: "variables:\n  GIT_DEPTH: \"5\"",
        script: &[r#"test "$(git rev-parse --short=8 HEAD)" = "$CI_COMMIT_SHORT_SHA""#],
        shell: Shell::BashWithGit,
        source: GIT,
        ..BASE
    },
    Case {
        name: "git-status-is-clean",
        extra: "variables:\n  GIT_STRATEGY: fetch",
        script: &[r#"test -z "$(git status --porcelain)""#],
        shell: Shell::BashWithGit,
        source: GIT,
        ..BASE
    },
    Case {
        name: "git-title-is-the-commits",
        extra: "variables:\n  GIT_STRATEGY: fetch",
        script: &[r#"test "$(git log -1 --format=%s)" = "$CI_COMMIT_TITLE""#],
        shell: Shell::BashWithGit,
        source: GIT,
        ..BASE
    },
    Case {
        name: "git-strategy-none-is-empty",
        extra: "variables:\n  GIT_STRATEGY: none",
        script: &["test ! -e .gitlab-ci.yml", "test ! -e .git"],
        log_has: &["Skipping Git repository setup"],
        source: GIT,
        ..BASE
    },
    Case {
        name: "git-strategy-empty-is-empty",
        extra: "variables:\n  GIT_STRATEGY: empty",
        script: &[r#"test -z "$(ls -A)""#],
        log_has: &["creating an empty build directory"],
        source: GIT,
        ..BASE
    },
    Case {
        name: "git-checkout-false-leaves-the-repository",
        extra: "variables:\n  GIT_CHECKOUT: \"false\"",
        script: &["test -d .git", "test ! -e .gitlab-ci.yml"],
        log_has: &["Skipping Git checkout"],
        source: GIT,
        ..BASE
    },
    Case {
        name: "git-files-are-checked-out",
        extra: "variables:\n  GIT_STRATEGY: clone",
        script: &["test -f .gitlab-ci.yml", "test -d .git"],
        source: GIT,
        ..BASE
    },
    // ----- hooks ---------------------------------------------------------------------------------
    Case {
        name: "hook-runs-before-the-sources",
        extra: "hooks:\n  pre_get_sources_script:\n    - echo hook-$((20+1))",
        script: &["true"],
        log_has: &["hook-21"],
        source: HOOKS,
        ..BASE
    },
    Case {
        name: "hook-sees-job-variables",
        extra: "variables:\n  FOR_HOOK: seen\nhooks:\n  pre_get_sources_script: 'echo \"hook-var-$FOR_HOOK\"'",
        script: &["true"],
        log_has: &["hook-var-seen"],
        source: HOOKS,
        ..BASE
    },
];
