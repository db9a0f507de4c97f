//! `flotilla migrate` on real public docker+machine configurations (each fixture under
//! `fixtures/docker-machine/` names its source), and `flotilla run` refusing one.

use flotilla::config::Config;
use flotilla::migrate::{Outcome, ProviderChoice, Report, migrate};
use std::path::PathBuf;
use std::process::Command;

const FIXTURES: [&str; 4] = [
    "gitlab-docs-autoscale-google.toml",
    "gitlab-docs-aws.toml",
    "cattle-ops-runner-config.toml",
    "cattle-ops-runner-offpeak.toml",
];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/docker-machine")
        .join(name)
}

fn run_migrate(name: &str, provider: ProviderChoice) -> (String, String, Report) {
    let path = fixture(name);
    let text = std::fs::read_to_string(&path).unwrap();
    let (out, report) = migrate(&text, &path.display().to_string(), provider, None)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (text, out, report)
}

/// The key a report item is about, as it is spelt in the old file.
fn key_of(what: &str) -> &str {
    let what = what
        .trim_start_matches("autoscaling ")
        .trim_start_matches("MachineOptions ")
        .trim_start_matches("[runners.docker] ")
        .trim_start_matches("[runners.cache] ")
        .trim_start_matches("[runners] ");
    let what = what.trim_start_matches('[').trim_end_matches(']');
    let end = what.find([' ', '=', '(']).unwrap_or(what.len());
    let key = &what[..end];
    key.rsplit('.').next().unwrap_or(key)
}

#[test]
fn every_docker_machine_setting_is_reported_at_its_line() {
    for name in FIXTURES {
        let (text, _, report) = run_migrate(name, ProviderChoice::Matching);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(report.converted.len(), 1, "{name}");
        // Every key of [runners.machine] and its autoscaling sections is accounted for.
        let old: toml::Table = toml::from_str(&text).unwrap();
        let machine = old["runners"][0]["machine"].as_table().unwrap();
        for key in machine.keys().filter(|k| *k != "autoscaling") {
            assert!(
                report
                    .items
                    .iter()
                    .any(|i| i.what.starts_with(key.as_str())),
                "{name}: {key} not in the report:\n{report}"
            );
        }
        for item in &report.items {
            let line = lines[item.line - 1];
            let key = key_of(&item.what);
            assert!(
                line.contains(key) || key.contains("autoscaling"),
                "{name}: line {} is `{line}`, not about `{key}` ({})",
                item.line,
                item.what
            );
        }
    }
}

#[test]
fn the_google_example_becomes_gitlabs_policies_and_plugin() {
    let (_, out, report) = run_migrate(
        "gitlab-docs-autoscale-google.toml",
        ProviderChoice::Matching,
    );
    let loaded = Config::from_str(&out, "new.toml")
        .unwrap_or_else(|e| panic!("{e}\n{out}"))
        .config;
    let r = &loaded.runners[0];
    assert_eq!(r.executor.as_str(), "docker-autoscaler");
    assert_eq!(r.limit, 10);
    let a = r.autoscaler.as_ref().unwrap();
    assert_eq!(a.plugin, "googlecloud");
    assert_eq!(
        (a.capacity_per_instance, a.max_instances, a.max_use_count),
        (1, 10, 100)
    );
    assert_eq!(a.plugin_config["project"], "GOOGLE-PROJECT-ID");
    assert_eq!(a.plugin_config["zone"], "GOOGLE-ZONE");
    assert_eq!(a.connector_config.username.as_deref(), Some("root"));
    assert!(!a.connector_config.use_external_addr);
    assert!(out.contains("use_external_addr = false"), "{out}");
    // Root settings always, then the two periods, last match wins (as in Docker Machine).
    assert_eq!(a.policy.len(), 3);
    let (root, work, weekend) = (&a.policy[0], &a.policy[1], &a.policy[2]);
    assert_eq!(root.periods, ["* * * * *"]);
    assert_eq!((root.idle_count, root.idle_time.as_secs()), (5, 600));
    assert_eq!(work.periods, ["* 9-17 * * mon-fri"]);
    assert_eq!(work.timezone.as_deref(), Some("UTC"));
    // IdleScaleFactor 1.5 between IdleCountMin 5 and IdleCount 50.
    assert_eq!(
        (work.idle_count, work.scale_factor, work.scale_factor_limit),
        (5, 1.5, 50)
    );
    assert_eq!(work.idle_time.as_secs(), 3600);
    assert_eq!(weekend.periods, ["* * * * sat,sun"]);
    assert_eq!((weekend.idle_count, weekend.idle_time.as_secs()), (5, 60));
    // What cannot be carried is listed with a reason.
    let dropped: Vec<String> = report.dropped().map(|i| i.what.clone()).collect();
    for what in [
        "MachineName",
        "google-machine-type",
        "google-machine-image",
        "engine-registry-mirror",
    ] {
        assert!(
            dropped.iter().any(|d| d.contains(what)),
            "{what} not dropped: {dropped:?}"
        );
    }
    assert!(
        report.items.iter().any(|i| i.what == "[runners.cache]"
            && matches!(i.outcome, flotilla::migrate::Outcome::Carried(_))),
        "the S3 cache is carried: {report}"
    );
    assert!(report.todo.iter().any(|t| t.contains("plugin_config.name")));
    // The only finding on the new file: concurrent (50) is above what the fleet holds (10).
    assert_eq!(report.check.len(), 1, "{:?}", report.check);
    assert!(
        report.check[0].contains("concurrent = 50"),
        "{:?}",
        report.check
    );
    // Comments of the old file survive where its settings do.
    assert!(
        out.contains("# The default image used for jobs is 'ruby:3.3'"),
        "{out}"
    );
}

#[test]
fn secrets_of_the_old_file_are_neither_printed_nor_kept_where_unused() {
    let (_, out, report) = run_migrate("cattle-ops-runner-offpeak.toml", ProviderChoice::Matching);
    let text = report.to_string();
    for secret in ["example-runners-secret-key", "AKIAEXAMPLERUNNERKEY"] {
        assert!(!text.contains(secret), "{secret} in the report:\n{text}");
        assert!(!out.contains(secret), "{secret} in the output:\n{out}");
    }
    // The cache bucket's keys are used: moved where GitLab Runner 11.3 and later read them,
    // and never printed in the report.
    let new: toml::Table = toml::from_str(&out).expect("the new file parses");
    let s3 = &new["runners"][0]["cache"]["s3"];
    assert_eq!(
        s3["SecretKey"].as_str(),
        Some("example-bucket-user-secret-key"),
        "{out}"
    );
    assert_eq!(
        s3["AccessKey"].as_str(),
        Some("AKIAEXAMPLEACCESSKEY"),
        "{out}"
    );
    assert!(
        new["runners"][0]["cache"].get("SecretKey").is_none(),
        "{out}"
    );
    for secret in ["example-bucket-user-secret-key", "AKIAEXAMPLEACCESSKEY"] {
        assert!(!text.contains(secret), "{secret} in the report:\n{text}");
    }
    assert!(text.contains("amazonec2-secret-key=(not shown)"), "{text}");
    // Empty OffPeak settings never applied: nothing to convert, and said so.
    let off: Vec<&flotilla::migrate::Item> = report
        .items
        .iter()
        .filter(|i| i.what.starts_with("OffPeak"))
        .collect();
    assert_eq!(off.len(), 3);
    assert!(
        off.iter()
            .all(|i| matches!(&i.outcome, Outcome::Dropped(w) if w.contains("never applied")))
    );
    // privileged = true is carried (docker isolation runs privileged containers), and said.
    assert!(
        !report.dropped().any(|i| i.what.contains("privileged")),
        "{report}"
    );
    assert!(
        report.items.iter().any(|i| i.what.contains("privileged")
            && matches!(&i.outcome, Outcome::Carried(to) if to.contains("privileged"))),
        "{report}"
    );
    let loaded = Config::from_str(&out, "new.toml").unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert!(
        loaded.config.runners[0]
            .docker
            .as_ref()
            .is_some_and(|d| d.privileged),
        "{out}"
    );
}

#[test]
fn the_cattle_ops_rendering_keeps_its_schedule_and_spot_settings_go_to_the_group() {
    let (_, out, report) = run_migrate("cattle-ops-runner-config.toml", ProviderChoice::Matching);
    let loaded = Config::from_str(&out, "new.toml").unwrap().config;
    let a = loaded.runners[0].autoscaler.as_ref().unwrap();
    assert_eq!(a.plugin, "aws");
    assert_eq!(a.max_use_count, 15);
    assert_eq!(a.policy.len(), 3);
    assert_eq!(a.policy[1].periods, ["* 0-9,17-23 * * mon-fri"]);
    assert_eq!(a.policy[1].timezone.as_deref(), Some("Europe/Amsterdam"));
    assert!(!a.connector_config.use_external_addr);
    assert!(out.contains("use_external_addr = false"), "{out}");
    // The machine's region is the group's: the aws provider reads it from plugin_config.
    assert_eq!(a.plugin_config["region"], "eu-west-1", "{out}");
    assert!(
        report
            .items
            .iter()
            .any(|i| i.what.contains("amazonec2-region")
                && matches!(&i.outcome, Outcome::Carried(to) if to == "plugin_config.region")),
        "{report}"
    );
    let spot = report
        .items
        .iter()
        .find(|i| i.what.contains("amazonec2-spot-price"))
        .unwrap();
    assert!(matches!(&spot.outcome, Outcome::Dropped(w) if w.contains("spot")));
    assert!(
        report.dropped().any(|i| i.what.contains("sentry_dsn")),
        "sentry_dsn:\n{report}"
    );
    assert!(!out.contains("sentry_dsn"), "sentry_dsn kept:\n{out}");
    // Issue 34: each "not carried" reason says what flotilla does today. disable_cache is
    // honoured now (issue 32): carried as it is, never reported dropped.
    assert!(
        !report.dropped().any(|i| i.what.contains("disable_cache")),
        "{report}"
    );
    // Keys flotilla now honours are carried as they are.
    for kept in [
        "pre_build_script",
        "output_limit",
        "clone_url",
        "disable_cache",
    ] {
        assert!(out.contains(kept), "{kept} dropped:\n{out}");
        assert!(!report.dropped().any(|i| i.what.contains(kept)), "{report}");
    }
}

#[test]
fn the_docker_provider_target_runs_here() {
    let (_, out, report) = run_migrate("gitlab-docs-aws.toml", ProviderChoice::Docker);
    // The AWS page's url is a placeholder (`<URL of your GitLab instance>`): the check says
    // so, and nothing else.
    assert!(
        report.check.iter().all(|c| c.contains("url")),
        "{:?}",
        report.check
    );
    let fixed = out.replace(
        "<URL of your GitLab instance>",
        "https://gitlab.example.com",
    );
    let loaded = Config::from_str(&fixed, "new.toml").unwrap().config;
    let a = loaded.runners[0].autoscaler.as_ref().unwrap();
    assert_eq!(a.plugin, "docker");
    assert_eq!(a.plugin_config["name"], "gitlab-aws-autoscaler");
    assert_eq!(a.plugin_config["inner_dockerd"], true);
    assert_eq!(a.plugin_config["max_size"], 20);
}

#[test]
fn the_cli_prints_and_never_writes_over_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let old = dir.path().join("config.toml");
    std::fs::copy(fixture("gitlab-docs-autoscale-google.toml"), &old).unwrap();
    let before = std::fs::read(&old).unwrap();
    let bin = env!("CARGO_BIN_EXE_flotilla");
    let out = Command::new(bin).arg("migrate").arg(&old).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stdout.contains("executor = \"docker-autoscaler\""));
    assert!(stdout.contains("[[runners.autoscaler.policy]]"), "{stdout}");
    assert!(stderr.contains("not carried over:"), "{stderr}");
    assert!(stderr.contains("(unchanged)"), "{stderr}");
    assert_eq!(std::fs::read(&old).unwrap(), before);
    // -c names the old file as the other commands name their configuration: the same answer.
    let with_c = Command::new(bin)
        .args(["migrate", "-c"])
        .arg(&old)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&with_c.stdout), stdout);
    let neither = Command::new(bin).arg("migrate").output().unwrap();
    assert_eq!(neither.status.code(), Some(2));
    // --output never names the old file nor an existing one.
    for target in [old.clone(), dir.path().join("config.toml")] {
        let o = Command::new(bin)
            .args(["migrate", "-o"])
            .arg(&target)
            .arg(&old)
            .output()
            .unwrap();
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("never writes over"));
    }
    let new = dir.path().join("new.toml");
    let o = Command::new(bin)
        .args(["migrate", "-o"])
        .arg(&new)
        .arg(&old)
        .output()
        .unwrap();
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(&new).unwrap(), stdout);
    let again = Command::new(bin)
        .args(["migrate", "-o"])
        .arg(&new)
        .arg(&old)
        .output()
        .unwrap();
    assert!(!again.status.success(), "an existing output is refused");
    assert_eq!(std::fs::read(&old).unwrap(), before);
}

#[test]
fn run_given_a_docker_machine_runner_says_so_and_suggests_migrate() {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(["run", "--config"])
        .arg(fixture("gitlab-docs-autoscale-google.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("executor `docker+machine`"), "{stderr}");
    assert!(stderr.contains("Docker Machine"), "{stderr}");
    assert!(stderr.contains("`flotilla migrate`"), "{stderr}");
    // It points at the line.
    assert!(
        stderr.contains("gitlab-docs-autoscale-google.toml:9:"),
        "{stderr}"
    );
}
