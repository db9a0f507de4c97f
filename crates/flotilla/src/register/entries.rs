//! The `[[runners]]` entries of a `config.toml` as `register`, `verify`, `unregister` and
//! `list` read and change them: the rest of the file (comments, order, other tables) stays as
//! it was written.

use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, Value};

/// Why a configuration file cannot be edited.
#[derive(Debug, thiserror::Error)]
pub(super) enum EntriesError {
    /// The file is not TOML.
    #[error("{file}: {message}")]
    Syntax {
        /// The file.
        file: String,
        /// What the TOML parser said.
        message: String,
    },
    /// `runners` is there but not an array of tables.
    #[error("{file}: `runners` is not a list of [[runners]] tables")]
    NotRunners {
        /// The file.
        file: String,
    },
    /// The template has no `[[runners]]` entry.
    #[error("{file}: the template has no [[runners]] entry")]
    EmptyTemplate {
        /// The file.
        file: String,
    },
}

/// One `[[runners]]` entry as the commands see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    /// Its place among the entries.
    pub(super) index: usize,
    /// `name`.
    pub(super) name: String,
    /// `url`.
    pub(super) url: String,
    /// `token`.
    pub(super) token: String,
    /// `executor`.
    pub(super) executor: String,
    /// `tls-ca-file`, `tls-cert-file`, `tls-key-file`: how GitLab is reached.
    pub(super) tls: flotilla_gitlab::TlsFiles,
}

/// A configuration file being edited.
#[derive(Debug, Clone)]
pub(super) struct ConfigDocument {
    doc: DocumentMut,
}

impl ConfigDocument {
    /// Reads `text` (of `file`, for messages); an empty text is a new configuration with
    /// gitlab-runner's global settings (`concurrent = 1`, `check_interval = 0`,
    /// `shutdown_timeout = 0`, which flotilla reads as its defaults).
    pub(super) fn parse(text: &str, file: &str) -> Result<ConfigDocument, EntriesError> {
        let mut doc: DocumentMut =
            text.parse()
                .map_err(|e: toml_edit::TomlError| EntriesError::Syntax {
                    file: file.to_string(),
                    message: e.to_string(),
                })?;
        if text.trim().is_empty() {
            doc.insert("concurrent", toml_edit::value(1));
            doc.insert("check_interval", toml_edit::value(0));
            doc.insert("shutdown_timeout", toml_edit::value(0));
        }
        if let Some(item) = doc.get("runners")
            && !item.is_array_of_tables()
        {
            return Err(EntriesError::NotRunners {
                file: file.to_string(),
            });
        }
        Ok(ConfigDocument { doc })
    }

    /// The entries, in file order.
    pub(super) fn entries(&self) -> Vec<Entry> {
        let Some(list) = self.doc.get("runners").and_then(Item::as_array_of_tables) else {
            return Vec::new();
        };
        let text = |t: &Table, key: &str| {
            t.get(key)
                .and_then(Item::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let path = |t: &Table, key: &str| {
            t.get(key)
                .and_then(Item::as_str)
                .filter(|p| !p.is_empty())
                .map(std::path::PathBuf::from)
        };
        list.iter()
            .enumerate()
            .map(|(index, t)| Entry {
                index,
                name: text(t, "name"),
                url: text(t, "url"),
                token: text(t, "token"),
                executor: text(t, "executor"),
                tls: flotilla_gitlab::TlsFiles {
                    ca_file: path(t, "tls-ca-file"),
                    cert_file: path(t, "tls-cert-file"),
                    key_file: path(t, "tls-key-file"),
                },
            })
            .collect()
    }

    /// Appends `entry` as the last `[[runners]]`.
    pub(super) fn append(&mut self, entry: Table) {
        if self.doc.get("runners").is_none() {
            self.doc
                .insert("runners", Item::ArrayOfTables(ArrayOfTables::new()));
        }
        if let Some(list) = self
            .doc
            .get_mut("runners")
            .and_then(Item::as_array_of_tables_mut)
        {
            list.push(entry);
        }
    }

    /// Removes the entries at `indices`.
    pub(super) fn remove(&mut self, indices: &[usize]) {
        if let Some(list) = self
            .doc
            .get_mut("runners")
            .and_then(Item::as_array_of_tables_mut)
        {
            let mut sorted = indices.to_vec();
            sorted.sort_unstable();
            sorted.dedup();
            for i in sorted.into_iter().rev() {
                if i < list.len() {
                    list.remove(i);
                }
            }
        }
    }

    /// The file's text.
    pub(super) fn text(&self) -> String {
        let mut s = self.doc.to_string();
        if !s.ends_with('\n') {
            s.push('\n');
        }
        s
    }
}

/// The first `[[runners]]` entry of a template file (gitlab-runner's `--template-config`):
/// the new entry starts from it, and what the command line says wins. Its tables forget where
/// they stood in the template: toml_edit writes tables in the order of those positions, so a
/// `[runners.autoscaler]` keeping the template's would be written into an earlier runner of
/// the file it is appended to.
pub(super) fn template_entry(text: &str, file: &str) -> Result<Table, EntriesError> {
    let doc = ConfigDocument::parse(text, file)?;
    let mut entry = doc
        .doc
        .get("runners")
        .and_then(Item::as_array_of_tables)
        .and_then(|l| l.get(0))
        .cloned()
        .ok_or_else(|| EntriesError::EmptyTemplate {
            file: file.to_string(),
        })?;
    forget_positions(&mut entry);
    Ok(entry)
}

fn forget_positions(t: &mut Table) {
    t.set_position(None);
    for (_, item) in t.iter_mut() {
        match item {
            Item::Table(sub) => forget_positions(sub),
            Item::ArrayOfTables(list) => list.iter_mut().for_each(forget_positions),
            _ => {}
        }
    }
}

/// Sets `key` of `entry` to `value` (appended when it was not there).
pub(super) fn set(entry: &mut Table, key: &str, value: impl Into<Value>) {
    entry.insert(key, Item::Value(value.into()));
}

/// Indents an entry as `gitlab-runner register` writes `config.toml`: keys two spaces in,
/// sub-tables' headers two spaces and their keys four.
pub(super) fn indent(entry: &mut Table) {
    entry.decor_mut().set_prefix("\n");
    indent_table(entry, 1);
}

fn indent_table(t: &mut Table, level: usize) {
    let pad = "  ".repeat(level);
    let keys: Vec<String> = t.iter().map(|(k, _)| k.to_string()).collect();
    for k in keys {
        let is_value = t.get(&k).is_some_and(Item::is_value);
        if is_value && let Some(mut key) = t.key_mut(&k) {
            key.leaf_decor_mut().set_prefix(pad.clone());
        }
        match t.get_mut(&k) {
            Some(Item::Table(sub)) => {
                sub.decor_mut().set_prefix(pad.clone());
                indent_table(sub, level + 1);
            }
            Some(Item::ArrayOfTables(list)) => {
                for sub in list.iter_mut() {
                    sub.decor_mut().set_prefix(pad.clone());
                    indent_table(sub, level + 1);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXISTING: &str = r#"# the fleet
concurrent = 4

[[runners]]
  # kept
  name = "first"
  url = "https://gitlab.example.com"
  token = "glrt-first"
  executor = "shell"

[[runners]]
  name = "second"
  url = "https://gitlab.example.com"
  token = "glrtr-second"
  executor = "docker"
"#;

    #[test]
    fn entries_are_read_and_removed_keeping_the_rest() {
        let mut d = ConfigDocument::parse(EXISTING, "c.toml").unwrap();
        let e = d.entries();
        assert_eq!(
            e.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            ["first", "second"]
        );
        assert_eq!(e[1].token, "glrtr-second");
        d.remove(&[1]);
        let text = d.text();
        assert!(text.starts_with("# the fleet\nconcurrent = 4\n"), "{text}");
        assert!(text.contains("  # kept\n  name = \"first\""), "{text}");
        assert!(!text.contains("second"), "{text}");
    }

    #[test]
    fn a_new_file_gets_gitlab_runners_globals_and_the_entry() {
        let mut d = ConfigDocument::parse("", "c.toml").unwrap();
        let mut t = Table::new();
        set(&mut t, "name", "new");
        set(&mut t, "executor", "shell");
        indent(&mut t);
        d.append(t);
        let text = d.text();
        assert_eq!(
            text,
            "concurrent = 1\ncheck_interval = 0\nshutdown_timeout = 0\n\n[[runners]]\n  name = \"new\"\n  executor = \"shell\"\n"
        );
        // It reads back as TOML with one entry.
        let again = ConfigDocument::parse(&text, "c.toml").unwrap();
        assert_eq!(again.entries().len(), 1);
    }

    #[test]
    fn a_templated_entry_lands_after_the_runners_already_there() {
        let existing = "concurrent = 2\n\n[[runners]]\n  name = \"old\"\n  executor = \"docker-autoscaler\"\n  [runners.autoscaler]\n    plugin = \"docker\"\n";
        let template = "[[runners]]\n  executor = \"docker-autoscaler\"\n  [runners.docker]\n    image = \"alpine\"\n  [runners.autoscaler]\n    plugin = \"aws\"\n";
        let mut d = ConfigDocument::parse(existing, "c.toml").unwrap();
        let mut t = template_entry(template, "t.toml").unwrap();
        set(&mut t, "name", "new");
        indent(&mut t);
        d.append(t);
        let text = d.text();
        let doc: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let runners = doc["runners"].as_array().unwrap();
        assert_eq!(
            runners[0]["autoscaler"]["plugin"].as_str(),
            Some("docker"),
            "{text}"
        );
        assert!(runners[0].get("docker").is_none(), "{text}");
        assert_eq!(runners[1]["name"].as_str(), Some("new"));
        assert_eq!(
            runners[1]["autoscaler"]["plugin"].as_str(),
            Some("aws"),
            "{text}"
        );
        assert_eq!(
            runners[1]["docker"]["image"].as_str(),
            Some("alpine"),
            "{text}"
        );
    }

    #[test]
    fn a_template_gives_its_first_entry() {
        let t = template_entry(
            "[[runners]]\n  executor = \"docker-autoscaler\"\n  [runners.autoscaler]\n    plugin = \"docker\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(
            t.get("executor").and_then(Item::as_str),
            Some("docker-autoscaler")
        );
        assert!(t.get("autoscaler").is_some_and(Item::is_table));
        assert!(matches!(
            template_entry("concurrent = 2\n", "t.toml"),
            Err(EntriesError::EmptyTemplate { .. })
        ));
        assert!(matches!(
            ConfigDocument::parse("runners = 3\n", "t.toml"),
            Err(EntriesError::NotRunners { .. })
        ));
        assert!(matches!(
            ConfigDocument::parse("[[runners]\n", "t.toml"),
            Err(EntriesError::Syntax { .. })
        ));
    }
}
