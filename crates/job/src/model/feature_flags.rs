//! GitLab Runner's feature flags as flotilla reads them: which flags change what flotilla does,
//! and the rule that decides whether one is on for a job (GitLab Runner's
//! `Build.IsFeatureFlagOn`, `common/build.go`: the runner's `[runners.feature_flags]` table
//! when it names the flag, else the job's variables).

/// The flags flotilla reads, and what each changes.
pub const READ: &[(&str, &str)] = &[
    (
        "FF_ENABLE_JOB_CLEANUP",
        "the build directory is removed after the job",
    ),
    (
        "FF_EXPORT_HIGH_CARDINALITY_METRICS",
        "the job's stage durations are exported (gitlab_runner_job_stage_duration_seconds)",
    ),
];

/// Flags that change how GitLab Runner writes the stage script. flotilla writes it one way (as
/// GitLab Runner does with these off) and says so in the log of a job that turns one on.
pub const UNSUPPORTED: &[&str] = &["FF_USE_LEGACY_BASH_EVAL", "FF_ENABLE_BASH_EXIT_CODE_CHECK"];

/// Go's `strconv.ParseBool` true values, as `featureflags.IsOn` reads a variable: `1`, `t`,
/// `T`, `true`, `TRUE`, `True`, with no blanks around.
pub(crate) fn parse_bool(value: &str) -> bool {
    matches!(value, "1" | "t" | "T" | "true" | "TRUE" | "True")
}
