//! Broken configurations are rejected with `file:line:col` and a message that says what is
//! wrong; every error in a file is reported, not just the first.

use flotilla::config::{Config, ConfigError};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/broken")
        .join(name)
}

/// Loads a broken fixture and returns its errors as displayed, with the file name replaced by
/// `F` so expectations stay short.
fn errors(name: &str) -> Vec<String> {
    let path = fixture(name);
    let Err(e) = Config::load(&path) else {
        panic!("{name} loaded but should not")
    };
    let file = path.display().to_string();
    e.errors()
        .iter()
        .map(|e| {
            let s = e.to_string();
            assert!(s.starts_with(&file), "{s} does not name {file}");
            format!("F{}", &s[file.len()..])
        })
        .collect()
}

fn only_error(name: &str) -> String {
    let mut all = errors(name);
    assert_eq!(all.len(), 1, "{all:#?}");
    all.remove(0)
}

#[test]
fn syntax_error() {
    let e = only_error("syntax-error.toml");
    assert!(e.starts_with("F:7:32: TOML syntax error: "), "{e}");
    assert!(e.contains("invalid basic string"), "{e}");
}

#[test]
fn wrong_type() {
    assert_eq!(
        only_error("wrong-type.toml"),
        "F:10:21: invalid type: string \"ten\", expected a non-negative integer"
    );
}

/// A `[runners.docker] volumes` entry GitLab Runner's parser refuses is refused at its place,
/// not bound wrong or dropped.
#[test]
fn bad_volume() {
    assert_eq!(
        only_error("bad-volume.toml"),
        "F:10:48: volume `/var/run/docker.sock:/var/run/docker.sock:bogus`: unknown option \
         `bogus`; GitLab takes ro, rw, O, z and a bind propagation"
    );
}

#[test]
fn bad_duration() {
    assert_eq!(
        only_error("bad-duration.toml"),
        "F:11:23: unknown unit ` minute` in duration `1 minute` (valid units are ns, us, ms, s, m, h)"
    );
}

#[test]
fn unsupported_executor() {
    // A docker+machine runner: flotilla says what it is and how to move on.
    assert_eq!(
        only_error("unsupported-executor.toml"),
        "F:7:14: executor `docker+machine` is GitLab's Docker Machine autoscaler, which \
         flotilla does not run (GitLab deprecated it in 17.5); `flotilla migrate` on this file \
         prints the equivalent flotilla configuration (its policies, limits and provider) \
         without changing the file"
    );
}

#[test]
fn unknown_autoscaler_keys_with_suggestions() {
    assert_eq!(
        errors("unknown-autoscaler-key.toml"),
        vec![
            "F:12:5: unknown key `capacity_per_instanse` in [runners.autoscaler]; \
             did you mean `capacity_per_instance`?",
            "F:14:7: unknown key `usename` in [runners.autoscaler.connector_config]; \
             did you mean `username`?",
            "F:18:7: unknown key `idel_time` in [runners.autoscaler.policy]; \
             did you mean `idle_time`?",
        ]
    );
}

#[test]
fn unknown_key_error_is_structured() {
    let e = Config::load(fixture("unknown-autoscaler-key.toml")).unwrap_err();
    let first = e.errors()[0];
    let ConfigError::UnknownKey {
        location,
        key,
        table,
        suggestion,
    } = first
    else {
        panic!("{first:?}");
    };
    assert_eq!((location.line, location.column), (12, 5));
    assert_eq!(key, "capacity_per_instanse");
    assert_eq!(table, "runners.autoscaler");
    assert_eq!(suggestion.as_deref(), Some("capacity_per_instance"));
}

#[test]
fn bad_cron_period() {
    let e = only_error("bad-cron.toml");
    assert!(
        e.starts_with("F:14:40: period `* 25 * * *` is not a valid cron expression"),
        "{e}"
    );
}

#[test]
fn bad_timezone() {
    assert_eq!(
        only_error("bad-timezone.toml"),
        "F:13:18: unknown time zone `Europe/Berln` (expected an IANA name such as \"Europe/Berlin\")"
    );
}

#[test]
fn capacity_zero() {
    assert_eq!(
        only_error("capacity-zero.toml"),
        "F:10:29: capacity_per_instance must be at least 1"
    );
}

#[test]
fn idle_time_zero() {
    assert_eq!(
        only_error("idle-time-zero.toml"),
        "F:13:19: idle_time must be at least 1s, got 0s"
    );
}

/// `privileged = true` is honoured by docker isolation (real GitLab configs use it for
/// Docker-in-Docker); it is refused only for a runner that offers no level giving it.
#[test]
fn privileged_true_is_refused_only_where_no_level_gives_it() {
    let e = only_error("privileged.toml");
    assert!(
        e.starts_with("F:10:18: privileged = true applies to docker isolation's containers")
            && e.contains("it offers shell")
            && e.contains("isolation \"instance\""),
        "{e}"
    );
    let text = std::fs::read_to_string(fixture("privileged.toml"))
        .unwrap()
        .replace(
            "executor = \"instance\"",
            "executor = \"docker-autoscaler\"",
        );
    let loaded = Config::from_str(&text, "/etc/gitlab-runner/config.toml")
        .unwrap_or_else(|e| panic!("{:?}", e.errors()));
    assert!(loaded.config.runners[0].docker.as_ref().unwrap().privileged);
}

#[test]
fn all_errors_of_a_file_are_reported_in_order() {
    assert_eq!(
        errors("many-errors.toml"),
        vec![
            "F:4:3: unknown key `stat_dir` in [flotilla]; did you mean `state_dir`?",
            "F:9:1: runner `broken`: `token` is required for executor `docker-autoscaler`",
            "F:15:29: capacity_per_instance must be at least 1",
            "F:18:18: period `* * * *` must have 5 fields (minute hour day-of-month month \
             day-of-week), found 4",
            "F:19:18: unknown time zone `Nowhere/Special` (expected an IANA name such as \
             \"Europe/Berlin\")",
            "F:20:19: idle_time must be at least 1s, got 0s",
        ]
    );
}

#[test]
fn a_missing_file_names_itself() {
    let e = Config::load("/nonexistent/flotilla/config.toml").unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }));
    assert!(
        e.to_string()
            .starts_with("/nonexistent/flotilla/config.toml: cannot read configuration:"),
        "{e}"
    );
}

fn inline_error(text: &str) -> String {
    match Config::from_str(text, "inline.toml") {
        Ok(_) => panic!("loaded:\n{text}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn missing_executor_and_misplaced_policy_keys() {
    let e = inline_error("[[runners]]\n  name = \"x\"\n");
    assert!(
        e.starts_with("inline.toml:1:1: missing field `executor`"),
        "{e}"
    );
    let e = inline_error(
        "concurrent = 1\n[[runners]]\nurl = \"https://g\"\ntoken = \"t\"\n\
         executor = \"instance\"\n[runners.autoscaler]\nplugin = \"aws\"\nidle_count = 1\n",
    );
    assert_eq!(
        e,
        "inline.toml:8:1: unknown key `idle_count` in [runners.autoscaler]; \
         did you mean `[[runners.autoscaler.policy]] idle_count`?"
    );
}

#[test]
fn negative_counts_and_bad_values_in_opaque_neighbours() {
    let e = inline_error(
        "[[runners]]\nurl = \"https://g\"\ntoken = \"t\"\nexecutor = \"instance\"\nlimit = -1\n",
    );
    assert_eq!(e, "inline.toml:5:9: must not be negative, got -1");
    // plugin_config is opaque: any key is fine there, even ones that look like typos.
    let ok = Config::from_str(
        "concurrent = 1\n[[runners]]\nurl = \"https://g\"\ntoken = \"t\"\n\
         executor = \"instance\"\n[runners.autoscaler]\nplugin = \"x\"\nmax_instances = 1\n\
         [runners.autoscaler.plugin_config]\ncapacity_per_instanse = 3\nnested = { a = [1, 2] }\n",
        "inline.toml",
    )
    .unwrap();
    assert_eq!(ok.warnings, vec![]);
    let a = ok.config.runners[0].autoscaler.as_ref().unwrap();
    assert_eq!(
        a.plugin_config,
        serde_json::json!({"capacity_per_instanse": 3, "nested": {"a": [1, 2]}})
    );
}

#[test]
fn a_gitlab_runner_needs_url_and_token() {
    let e = inline_error("[[runners]]\nname = \"n\"\nexecutor = \"shell\"\n");
    assert_eq!(
        e,
        "inline.toml:1:1: runner `n`: `url` is required for executor `shell`\n\
         inline.toml:1:1: runner `n`: `token` is required for executor `shell`"
    );
}

/// Issue 32: a `[runners.docker] ulimit` Docker would refuse is refused by `config check` at
/// its table, not at the first job.
#[test]
fn bad_ulimit() {
    assert_eq!(
        only_error("bad-ulimit.toml"),
        "F:11:5: ulimit `nofile = 4096:1024`: the soft limit is above the hard one"
    );
}
