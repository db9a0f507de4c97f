//! docs/configuration.md accounts for every key GitLab Runner documents: each `<table> <key>`
//! of `fixtures/gitlab-keys.txt` has a table row, in the section of its table, whose first
//! column names the key in backticks (a row may name several keys).

use std::collections::BTreeMap;
use std::path::Path;

/// The text between backticks: `a `b` c `d`` gives `b` and `d`.
fn backticked(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// The table a heading is about: its first backticked `[table]` or `[[table]]`, brackets
/// dropped (`runners.cache.s3`); `-` for a heading about the top level; `None` otherwise.
fn heading_table(heading: &str) -> Option<String> {
    if let Some(table) = backticked(heading).find(|t| t.starts_with('[')) {
        return Some(
            table
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
        );
    }
    if heading.to_ascii_lowercase().contains("top level") {
        return Some("-".to_string());
    }
    None
}

/// The rows of each table's sections: the backticked names in a row's first column, each with
/// the row's state (its `state` column, lower case; in a section without one, the section's
/// heading: `### Honoured` or `### Warned`). A heading that names no table belongs to the
/// section above it; code blocks are skipped.
fn documented(page: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut rows: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    // The open headings: their level, table and title.
    let mut headings: Vec<(usize, Option<String>, String)> = Vec::new();
    let mut state_column = false;
    let mut in_code = false;
    for line in page.lines() {
        let line = line.trim_start();
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if line.starts_with('#') {
            let level = line.chars().take_while(|c| *c == '#').count();
            let title = &line[level..];
            while headings.last().is_some_and(|(l, _, _)| *l >= level) {
                headings.pop();
            }
            let table = heading_table(title)
                .or_else(|| headings.last().and_then(|(_, table, _)| table.clone()));
            headings.push((level, table, title.trim().to_ascii_lowercase()));
            state_column = false;
            continue;
        }
        let Some((_, Some(table), title)) = headings.last() else {
            continue;
        };
        let Some(row) = line.strip_prefix('|') else {
            continue;
        };
        let columns: Vec<&str> = row.split('|').map(str::trim).collect();
        let first = columns.first().copied().unwrap_or_default();
        if first == "key" {
            state_column = columns.get(1) == Some(&"state");
            continue;
        }
        if first.starts_with("---") {
            continue;
        }
        let state = if state_column {
            columns
                .get(1)
                .copied()
                .unwrap_or_default()
                .to_ascii_lowercase()
        } else if title.contains("honoured") {
            "honoured".to_string()
        } else if title.contains("warned") {
            "warned".to_string()
        } else {
            String::new()
        };
        for name in backticked(first) {
            rows.entry(table.clone())
                .or_default()
                .insert(name.to_string(), state.clone());
        }
    }
    rows
}

/// The `<table> <key>` lines of `fixtures/gitlab-keys.txt`.
fn gitlab_keys() -> Vec<(String, String)> {
    let keys_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gitlab-keys.txt");
    let keys = std::fs::read_to_string(&keys_file)
        .unwrap_or_else(|e| panic!("{}: {e}", keys_file.display()));
    let mut out = Vec::new();
    for (n, line) in keys.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let (Some(table), Some(key), None) = (words.next(), words.next(), words.next()) else {
            panic!(
                "{}:{}: `{line}` is not `<table> <key>`",
                keys_file.display(),
                n + 1
            );
        };
        out.push((table.to_string(), key.to_string()));
    }
    out
}

fn the_page() -> String {
    let page_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
    std::fs::read_to_string(&page_file).unwrap_or_else(|e| panic!("{}: {e}", page_file.display()))
}

#[test]
fn every_gitlab_key_has_a_row() {
    let rows = documented(&the_page());
    let keys = gitlab_keys();
    let missing: Vec<String> = keys
        .iter()
        .filter(|(table, key)| !rows.get(table).is_some_and(|names| names.contains_key(key)))
        .map(|(table, key)| {
            let place = if table == "-" {
                "the top level".to_string()
            } else {
                format!("[{table}]")
            };
            format!("`{key}` of {place}")
        })
        .collect();
    // A page or a list that could not be read as intended would pass with nothing checked.
    assert!(keys.len() > 200, "only {} keys in the list", keys.len());
    assert!(
        rows.contains_key("-") && rows.contains_key("runners"),
        "no section for the top level or [[runners]] found: {:?}",
        rows.keys().collect::<Vec<_>>()
    );
    assert!(
        missing.is_empty(),
        "{} GitLab keys have no row in the section of their table in docs/configuration.md:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// A runner every key is tried in: the docker-autoscaler executor on the docker provider,
/// nothing else set.
const BASE: &str = r#"concurrent = 2

[[runners]]
  name = "keys"
  url = "https://gitlab.example.com"
  token = "glrt-keys-example-token"
  executor = "docker-autoscaler"
  [runners.docker]
    image = "alpine:3"
  [runners.autoscaler]
    plugin = "docker"
    capacity_per_instance = 1
    max_instances = 2
"#;

/// Values tried for a key, in order, until one loads: most keys take one of these.
fn candidates() -> Vec<toml_edit::Item> {
    [
        "true",
        "2",
        "\"x\"",
        "[\"x\"]",
        "\"1h\"",
        "1.5",
        "{ x = \"1\" }",
        "[{ name = \"alpine:3\" }]",
    ]
    .iter()
    .map(|v| {
        let doc: toml_edit::DocumentMut = format!("v = {v}").parse().expect("a TOML value");
        doc["v"].clone()
    })
    .collect()
}

/// Values for the keys no candidate suits (a path that must exist, a shape of its own).
fn value_for(table: &str, key: &str, dir: &Path) -> Option<toml_edit::Item> {
    let text = match (table, key) {
        ("runners", "tls-ca-file" | "tls-cert-file" | "tls-key-file") => {
            let file = dir.join(key);
            std::fs::write(&file, "not read at load").expect("a scratch file");
            format!("{:?}", file.display().to_string())
        }
        ("runners", "builds_dir" | "cache_dir") | ("runners.docker", "cache_dir") => {
            "\"/srv/ci\"".into()
        }
        ("runners", "clone_url") => "\"https://gitlab.example.com\"".into(),
        ("runners", "environment") => "[\"A=1\"]".into(),
        ("runners", "shell") => "\"bash\"".into(),
        ("runners", "slot_cgroup_template") => "\"ci/slot-${slot}\"".into(),
        ("runners.docker", "pull_policy" | "allowed_pull_policies") => "[\"always\"]".into(),
        ("runners.docker", "volumes") => "[\"/cache\"]".into(),
        ("runners.docker", "devices") => "[\"/dev/fuse\"]".into(),
        ("runners.docker", "gpus" | "service_gpus") => "\"all\"".into(),
        (
            "runners.docker",
            "cpus"
            | "service_cpus"
            | "memory"
            | "memory_swap"
            | "memory_reservation"
            | "service_memory"
            | "service_memory_swap"
            | "service_memory_reservation",
        ) => "\"1\"".into(),
        ("runners.docker", "ulimit") => "{ nofile = \"1024\" }".into(),
        ("runners.docker", "services_devices") => "{ \"pg*\" = [\"/dev/fuse\"] }".into(),
        ("runners.docker", "container_labels") => "{ team = \"ci\" }".into(),
        ("runners.docker", "log_options") => "{ labels = \"team\" }".into(),
        ("runners.docker.services", "name") => "\"postgres:16\"".into(),
        ("runners.docker.services", "environment") => "[\"A=1\"]".into(),
        ("runners.autoscaler", "plugin") => "\"docker\"".into(),
        ("runners.autoscaler.policy", "periods") => "[\"* * * * *\"]".into(),
        ("runners.autoscaler.policy", "timezone") => "\"UTC\"".into(),
        ("runners.autoscaler.connector_config", "protocol") => "\"ssh\"".into(),
        ("runners.autoscaler.connector_config", "os") => "\"linux\"".into(),
        ("runners.autoscaler.connector_config", "arch") => "\"amd64\"".into(),
        ("runners.cache", "Type") => "\"s3\"".into(),
        ("-", "log_level") => "\"info\"".into(),
        ("-", "log_format") => "\"text\"".into(),
        ("-", "listen_address") => "\"127.0.0.1:9252\"".into(),
        ("runners", "feature_flags") => "{ FF_ENABLE_JOB_CLEANUP = true }".into(),
        ("runners", "custom_build_dir") => "{ enabled = true }".into(),
        ("runners.autoscaler", key) if key.ends_with("_buckets") => "[1.0, 5.0]".into(),
        ("runners.autoscaler.vm_isolation", "nesting_config") => "{ x = \"1\" }".into(),
        _ => return None,
    };
    let doc: toml_edit::DocumentMut = format!("v = {text}").parse().expect("a TOML value");
    Some(doc["v"].clone())
}

/// The table `table` of `doc` (`-` the top level, `runners` the runner, arrays of tables
/// their first entry), made when missing, with what its keys need around them: a cache
/// backend's `Type`, a service's image.
fn table_of<'a>(doc: &'a mut toml_edit::DocumentMut, table: &str) -> &'a mut toml_edit::Table {
    let runner = |doc: &'a mut toml_edit::DocumentMut| -> &'a mut toml_edit::Table {
        doc["runners"]
            .as_array_of_tables_mut()
            .and_then(|a| a.get_mut(0))
            .expect("the base has a runner")
    };
    if table == "-" {
        return doc.as_table_mut();
    }
    let mut parts = table.split('.');
    let mut t = match parts.next() {
        Some("runners") => runner(doc),
        // A table of the top level (`[session_server]`).
        Some(top) => doc
            .as_table_mut()
            .entry(top)
            .or_insert(toml_edit::table())
            .as_table_mut()
            .expect("a table"),
        None => unreachable!("split yields one part at least"),
    };
    let rest: Vec<&str> = parts.collect();
    if let Some(backend @ ("s3" | "gcs" | "azure")) = rest.get(1).copied()
        && rest[0] == "cache"
    {
        let cache = t
            .entry("cache")
            .or_insert(toml_edit::table())
            .as_table_mut()
            .expect("a table");
        cache.insert("Type", toml_edit::value(backend));
        // What each backend requires, so that the key tried is the only thing in question.
        let required: &[(&str, &str)] = match backend {
            "s3" => &[("BucketName", "runner-cache")],
            "gcs" => &[
                ("BucketName", "runner-cache"),
                ("AccessID", "cache@project.iam.gserviceaccount.com"),
                ("PrivateKey", "-----BEGIN PRIVATE KEY-----"),
            ],
            _ => &[
                ("AccountName", "account"),
                ("AccountKey", "a2V5"),
                ("ContainerName", "runner-cache"),
            ],
        };
        let mut table = toml_edit::Table::new();
        for (k, v) in required {
            table.insert(k, toml_edit::value(*v));
        }
        cache.insert(backend, toml_edit::Item::Table(table));
    }
    for (i, part) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        let array = last && matches!(*part, "policy" | "services");
        if array {
            let entries = t
                .entry(part)
                .or_insert(toml_edit::Item::ArrayOfTables(
                    toml_edit::ArrayOfTables::new(),
                ))
                .as_array_of_tables_mut()
                .expect("an array of tables");
            if entries.is_empty() {
                let mut first = toml_edit::Table::new();
                if *part == "services" {
                    first.insert("name", toml_edit::value("postgres:16"));
                }
                entries.push(first);
            }
            t = entries.get_mut(0).expect("an entry");
        } else {
            t = t
                .entry(part)
                .or_insert(toml_edit::table())
                .as_table_mut()
                .expect("a table");
        }
    }
    t
}

/// What loading the base with `key` set in `table` gave, for the first value that loads:
/// the warnings, or the errors of every value tried.
fn load_with(table: &str, key: &str, dir: &Path) -> Result<Vec<String>, Vec<String>> {
    let mut errors = Vec::new();
    let values: Vec<toml_edit::Item> = value_for(table, key, dir)
        .into_iter()
        .chain(candidates())
        .collect();
    for value in values {
        let mut doc: toml_edit::DocumentMut = BASE.parse().expect("the base parses");
        let t = table_of(&mut doc, table);
        // A key the base sets already is tried as the base sets it.
        if !t.contains_key(key) {
            t.insert(key, value.clone());
        }
        let text = doc.to_string();
        match flotilla::config::Config::from_str(&text, dir.join("config.toml")) {
            Ok(loaded) => return Ok(loaded.warnings.iter().map(ToString::to_string).collect()),
            Err(e) => errors.push(format!("{}: {e}", value.to_string().trim())),
        }
    }
    Err(errors)
}

/// Each key does what its row says, tried one at a time in a runner that loads: a key
/// documented as honoured loads with some value and is never said to be unused; a warned
/// key loads and the warnings name it; a refused key loads with no value. Rows with more than
/// one state (`warned / refused`) depend on the value or the executor and are not judged
/// here. What this proves and what it does not: a key GitLab documents that flotilla's
/// configuration types do not have is warned as unused, so a row that calls it honoured fails,
/// and a row that calls it warned fails unless some warning names it; a key that is a field
/// of the types but that no code reads is not caught here (the per-level `build` functions
/// destructure their tables for that, and each honoured row names a test of its effect).
#[test]
fn every_gitlab_key_does_what_its_row_says() {
    let rows = documented(&the_page());
    let dir = tempfile::tempdir().expect("a scratch directory");
    let mut wrong = Vec::new();
    let mut judged = std::collections::BTreeMap::<&str, usize>::new();
    for (table, key) in gitlab_keys() {
        let Some(state) = rows.get(&table).and_then(|r| r.get(&key)) else {
            continue; // every_gitlab_key_has_a_row says so
        };
        let single = |word: &str| state.starts_with(word) && !state.contains('/');
        let place = format!("[{table}] {key} ({state})");
        let result = load_with(&table, &key, dir.path());
        let named = |warnings: &Vec<String>| {
            warnings.iter().any(|w| {
                // The key by name (in backticks, or as the subject: `key = ...`, `key is`,
                // `key:`), or the whole table it is in.
                w.contains(&format!("`{key}`"))
                    || w.contains(&format!(": {key} "))
                    || w.contains(&format!(" {key} "))
                    || w.contains(&format!(".{key} "))
                    || w.contains(&format!("{key}:"))
                    || w.contains(&format!("[{table}.{key}]"))
                    || w.contains(&format!("`{table}`"))
                    || w.contains(&format!("[{table}] {key}"))
            })
        };
        if single("honoured") {
            *judged.entry("honoured").or_default() += 1;
            match &result {
                Ok(warnings) => {
                    if let Some(w) = warnings
                        .iter()
                        .find(|w| w.contains(&key) && w.contains("not used"))
                    {
                        wrong.push(format!("{place}: said to be unused: {w}"));
                    }
                }
                Err(errors) => wrong.push(format!("{place}: no value loads: {errors:?}")),
            }
        } else if single("warned") {
            *judged.entry("warned").or_default() += 1;
            match &result {
                Ok(warnings) if named(warnings) => {}
                Ok(warnings) => wrong.push(format!("{place}: loads without a word: {warnings:?}")),
                Err(errors) => wrong.push(format!("{place}: no value loads: {errors:?}")),
            }
        } else if single("refused") {
            *judged.entry("refused").or_default() += 1;
            if let Ok(warnings) = &result {
                wrong.push(format!("{place}: loads: {warnings:?}"));
            }
        }
    }
    // What the page says today: a page or a parse that went wrong would judge fewer.
    assert!(
        judged.get("honoured").copied().unwrap_or(0) >= 170
            && judged.get("warned").copied().unwrap_or(0) >= 50,
        "too few keys judged: {judged:?}"
    );
    assert!(
        wrong.is_empty(),
        "{} keys do not do what docs/configuration.md says:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
