//! docs/configuration.md accounts for every key GitLab Runner documents: each `<table> <key>`
//! of `fixtures/gitlab-keys.txt` has a table row, in the section of its table, whose first
//! column names the key in backticks (a row may name several keys).

use std::collections::{BTreeMap, BTreeSet};
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

/// The backticked names in the first column of the table rows of each table's sections. A
/// heading that names no table (`### Honoured`) belongs to the section above it; code blocks
/// are skipped.
fn documented(page: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut rows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // The open headings: their level and table.
    let mut headings: Vec<(usize, Option<String>)> = Vec::new();
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
            while headings.last().is_some_and(|(l, _)| *l >= level) {
                headings.pop();
            }
            let table = heading_table(title)
                .or_else(|| headings.last().and_then(|(_, table)| table.clone()));
            headings.push((level, table));
            continue;
        }
        let Some(table) = headings.last().and_then(|(_, table)| table.clone()) else {
            continue;
        };
        let Some(row) = line.strip_prefix('|') else {
            continue;
        };
        let first_column = row.split('|').next().unwrap_or_default();
        rows.entry(table)
            .or_default()
            .extend(backticked(first_column).map(str::to_string));
    }
    rows
}

#[test]
fn every_gitlab_key_has_a_row() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let keys_file = manifest.join("tests/fixtures/gitlab-keys.txt");
    let page_file = manifest.join("../../docs/configuration.md");
    let keys = std::fs::read_to_string(&keys_file)
        .unwrap_or_else(|e| panic!("{}: {e}", keys_file.display()));
    let page = std::fs::read_to_string(&page_file)
        .unwrap_or_else(|e| panic!("{}: {e}", page_file.display()));
    let rows = documented(&page);
    let mut checked = 0;
    let mut missing = Vec::new();
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
        checked += 1;
        if !rows.get(table).is_some_and(|names| names.contains(key)) {
            let place = if table == "-" {
                "the top level".to_string()
            } else {
                format!("[{table}]")
            };
            missing.push(format!("`{key}` of {place}"));
        }
    }
    // A page or a list that could not be read as intended would pass with nothing checked.
    assert!(
        checked > 200,
        "only {checked} keys in {}",
        keys_file.display()
    );
    assert!(
        rows.contains_key("-") && rows.contains_key("runners"),
        "no section for the top level or [[runners]] found in {}: {:?}",
        page_file.display(),
        rows.keys().collect::<Vec<_>>()
    );
    assert!(
        missing.is_empty(),
        "{} GitLab keys have no row in the section of their table in {}:\n{}",
        missing.len(),
        page_file.display(),
        missing.join("\n")
    );
}
