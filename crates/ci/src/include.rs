//! Reading the pipeline's files: the main file and its `include: local` files (nested, with
//! globs and `include:rules`), deep-merged as GitLab merges them: the included files in order,
//! then the including file on top. Other include kinds (remote, project, template, component)
//! are named in warnings and skipped.

use std::collections::HashMap;
use std::sync::Arc;

use super::error::{CiError, Diagnostics, Location};
use super::merge::deep_merge;
use super::project::Project;
use super::reader::Reader;
use super::rules::{Context, RulesKind, read_rules};
use super::variables::expand;
use super::yaml::{Mapping, Node, Value, load};

/// GitLab's limit on included files per pipeline.
const MAX_INCLUDES: usize = 150;

/// What the loader knows while it reads.
pub(crate) struct Loader<'a> {
    /// The project.
    pub project: &'a Project,
    /// Pipeline variables (predefined and user), for include paths and `include:rules`.
    pub variables: &'a HashMap<String, String>,
    /// The files changed by the push, when known.
    pub changed_files: Option<&'a [String]>,
    /// Where problems go.
    pub diag: &'a mut Diagnostics,
    /// How many files were included so far.
    pub included: usize,
    /// The includes a local run cannot read, in the order met.
    pub skipped: &'a mut Vec<SkippedInclude>,
}

/// An include a local run skips: a remote file, another project's file, a template or a
/// component.
#[derive(Clone, Debug)]
pub(crate) struct SkippedInclude {
    /// `include:template`, `include:remote`, ...
    pub kind: String,
    /// What it names.
    pub name: String,
    /// Where the include entry is.
    pub at: Location,
}

impl std::fmt::Display for SkippedInclude {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} `{}` at {}", self.kind, self.name, self.at)
    }
}

impl Loader<'_> {
    /// Read `file` (relative to the project root) and everything it includes, merged.
    pub(crate) fn load_file(
        &mut self,
        file: &str,
        stack: &mut Vec<String>,
        from: Option<&Location>,
    ) -> Result<Mapping, CiError> {
        let name: Arc<str> = Arc::from(file);
        let bytes = self.project.read_bytes(file).map_err(|source| match from {
            Some(at) if source.kind() == std::io::ErrorKind::NotFound => CiError::Include {
                location: at.clone(),
                message: format!("local file `{file}` does not exist"),
            },
            _ => CiError::Read {
                file: self.project.root().join(file),
                source,
            },
        })?;
        let text = String::from_utf8(bytes).map_err(|_| CiError::Syntax {
            location: Location::new(name.clone(), 1, 1),
            message: "the file is not valid UTF-8".into(),
        })?;
        let loaded = load(&text, &name)?;
        self.diag
            .budget
            .charge(loaded.size, &Location::new(name.clone(), 1, 1))?;
        self.diag.warnings.extend(loaded.warnings);
        let root = self.document(loaded.documents, &name)?;
        let mut root = match root.value {
            Value::Map(map) => map,
            Value::Null => Mapping::default(),
            _ => {
                return Err(CiError::invalid(
                    &root.at,
                    format!("root config should be a hash, found {}", root.kind()),
                ));
            }
        };
        stack.push(file.to_string());
        let mut merged: Option<Node> = None;
        if let Some((key, include)) = root.remove("include") {
            for (path, at) in self.local_paths(&include)? {
                if let Some(start) = stack.iter().position(|f| *f == path) {
                    let mut cycle = stack[start..].to_vec();
                    cycle.push(path.clone());
                    return Err(CiError::Include {
                        location: at,
                        message: format!("files include each other: {}", cycle.join(" -> ")),
                    });
                }
                self.included += 1;
                if self.included > MAX_INCLUDES {
                    return Err(CiError::Include {
                        location: at,
                        message: format!("more than {MAX_INCLUDES} files are included"),
                    });
                }
                let content = self.load_file(&path, stack, Some(&at))?;
                let node = Node::new(Value::Map(content), key.at.clone());
                merged = Some(match merged {
                    Some(base) => deep_merge(base, node),
                    None => node,
                });
            }
        }
        stack.pop();
        let own = Node::new(Value::Map(root), Location::new(name, 1, 1));
        let result = match merged {
            Some(base) => deep_merge(base, own),
            None => own,
        };
        match result.value {
            Value::Map(map) => Ok(map),
            _ => Ok(Mapping::default()),
        }
    }

    /// The configuration document of a file: the only one, or the second when the first is a
    /// `spec:` header.
    fn document(&mut self, mut documents: Vec<Node>, name: &Arc<str>) -> Result<Node, CiError> {
        match documents.len() {
            0 => Ok(Node::new(Value::Null, Location::new(name.clone(), 1, 1))),
            1 => Ok(documents.remove(0)),
            2 => {
                let header = documents.remove(0);
                match header.as_map().and_then(|m| m.entry("spec")) {
                    Some((key, _)) => {
                        self.diag.warn(
                            &key.at,
                            "spec:inputs is not supported by local runs; the header is ignored and $[[ inputs ]] are not interpolated",
                        );
                        Ok(documents.remove(0))
                    }
                    None => Err(CiError::invalid(
                        &header.at,
                        "the file holds two YAML documents, and the first is not a spec: header",
                    )),
                }
            }
            _ => Err(CiError::invalid(
                &documents[2].at,
                "the file holds more than two YAML documents",
            )),
        }
    }

    /// The local files an `include:` value names, in order (globs expanded, rules applied).
    fn local_paths(&mut self, include: &Node) -> Result<Vec<(String, Location)>, CiError> {
        let entries: Vec<&Node> = match &include.value {
            Value::Seq(items) => items.iter().collect(),
            _ => vec![include],
        };
        let mut out = Vec::new();
        for entry in entries {
            match &entry.value {
                Value::Str(text) => {
                    if text.starts_with("http://") || text.starts_with("https://") {
                        self.skipped.push(SkippedInclude {
                            kind: "include:remote".into(),
                            name: text.clone(),
                            at: entry.at.clone(),
                        });
                        self.diag.warn(
                            &entry.at,
                            format!("include of remote file `{text}` is not supported by local runs; it is not included"),
                        );
                    } else {
                        out.extend(self.resolve_local(text, &entry.at)?);
                    }
                }
                Value::Map(map) => {
                    let kind = [
                        "local",
                        "remote",
                        "project",
                        "template",
                        "component",
                        "file",
                    ]
                    .into_iter()
                    .find(|k| map.get(k).is_some());
                    let mut reader = Reader::new(self.diag, "include");
                    if !reader.check_keys(
                        map,
                        &[
                            "local",
                            "remote",
                            "project",
                            "file",
                            "ref",
                            "template",
                            "component",
                            "rules",
                            "inputs",
                            "cache",
                            "integrity",
                        ],
                    ) {
                        continue;
                    }
                    if let Some((k, _)) = map.entry("inputs") {
                        reader.warn(&k.at, "inputs are not supported by local runs; ignored");
                    }
                    if let Some(rules_node) = map.get("rules") {
                        let Some(rules) = read_rules(&mut reader, rules_node, RulesKind::Include)
                        else {
                            continue;
                        };
                        let context = Context {
                            variables: self.variables,
                            project: self.project,
                            changed_files: self.changed_files,
                        };
                        let included = context
                            .first_match(&rules, self.diag)
                            .is_some_and(|rule| rule.when != Some(super::job::When::Never));
                        if !included {
                            continue;
                        }
                    }
                    match kind {
                        Some("local") => {
                            let Some(path_node) = map.get("local") else {
                                continue;
                            };
                            match path_node.as_str() {
                                Some(path) => out.extend(self.resolve_local(path, &path_node.at)?),
                                None => {
                                    return Err(CiError::Include {
                                        location: path_node.at.clone(),
                                        message: format!(
                                            "local should be a string, found {}",
                                            path_node.kind()
                                        ),
                                    });
                                }
                            }
                        }
                        Some(other) => {
                            let text = |key: &str| {
                                map.get(key)
                                    .map(|n| match &n.value {
                                        Value::Seq(items) => items
                                            .iter()
                                            .filter_map(Node::scalar_text)
                                            .collect::<Vec<_>>()
                                            .join(", "),
                                        _ => n.scalar_text().unwrap_or_default(),
                                    })
                                    .unwrap_or_default()
                            };
                            let name = match other {
                                "project" | "file" => {
                                    format!("{}: {}", text("project"), text("file"))
                                }
                                _ => text(other),
                            };
                            let kind = if other == "file" { "project" } else { other };
                            self.skipped.push(SkippedInclude {
                                kind: format!("include:{kind}"),
                                name,
                                at: entry.at.clone(),
                            });
                            self.diag.warn(
                                &entry.at,
                                format!("include:{other} is not supported by local runs; it is not included"),
                            );
                        }
                        None => {
                            return Err(CiError::Include {
                                location: entry.at.clone(),
                                message: "an include entry needs local, remote, project, template or component".into(),
                            });
                        }
                    }
                }
                _ => {
                    return Err(CiError::Include {
                        location: entry.at.clone(),
                        message: format!(
                            "should be a string, a hash or an array of them, found {}",
                            entry.kind()
                        ),
                    });
                }
            }
        }
        Ok(out)
    }

    /// One `local:` path (variables expanded, leading `/` and `./` dropped) as the files it names.
    fn resolve_local(
        &mut self,
        written: &str,
        at: &Location,
    ) -> Result<Vec<(String, Location)>, CiError> {
        let expanded = expand(written, &|name| self.variables.get(name).cloned(), true);
        let path = expanded
            .trim_start_matches("./")
            .trim_start_matches('/')
            .to_string();
        if !(path.ends_with(".yml") || path.ends_with(".yaml")) {
            return Err(CiError::Include {
                location: at.clone(),
                message: format!(
                    "included file `{expanded}` does not have a .yml or .yaml extension"
                ),
            });
        }
        if path.contains(['*', '?', '[']) {
            let files = self.project.glob(&path);
            if files.is_empty() {
                return Err(CiError::Include {
                    location: at.clone(),
                    message: format!("`{expanded}` does not match any file"),
                });
            }
            return Ok(files.into_iter().map(|f| (f, at.clone())).collect());
        }
        if !self.project.is_file(&path) {
            return Err(CiError::Include {
                location: at.clone(),
                message: format!("local file `{expanded}` does not exist"),
            });
        }
        Ok(vec![(path, at.clone())])
    }
}
