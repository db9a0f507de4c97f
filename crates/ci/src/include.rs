//! Reading the pipeline's files: the main file and its `include: local` files (nested, with
//! globs and `include:rules`), deep-merged as GitLab merges them: the included files in order,
//! then the including file on top. A file with a `spec:` header has its inputs checked and
//! interpolated ([`crate::inputs`], [`crate::interpolation`]) before its own includes are read.
//! `include: component` resolves from the directories the user names
//! ([`crate::component`]); other include kinds (remote, project, template) are named in
//! warnings and skipped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use super::component::find_component;
use super::error::{CiError, Diagnostics, Location};
use super::inputs::{InputSpec, is_header, read_header, read_inputs_file, resolve};
use super::interpolation::{Context as Interpolation, interpolate};
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
    /// Where `include: component` looks for components.
    pub component_paths: &'a [PathBuf],
    /// While a component's files are read: its project's directory, where its own
    /// `include: local` entries resolve (as GitLab resolves them in the component's project).
    pub component_root: Option<PathBuf>,
}

/// A file an include names.
#[derive(Clone, Debug)]
pub(crate) enum IncludedFile {
    /// A file of the project, `/`-separated, relative to its root.
    Project(String),
    /// A component's template found in a directory the user named, or a file its own
    /// `include: local` names in the component's project.
    Component {
        /// The component project's directory.
        root: PathBuf,
        /// The file.
        path: PathBuf,
        /// The `spec:component` fields GitLab would give it (`name`, `sha`, `version`,
        /// `reference`).
        fields: HashMap<String, Value>,
    },
}

impl IncludedFile {
    /// The name errors and positions use.
    fn name(&self, project: &Project) -> String {
        match self {
            IncludedFile::Project(path) => path.clone(),
            IncludedFile::Component { path, .. } => path
                .strip_prefix(project.root())
                .unwrap_or(path)
                .display()
                .to_string(),
        }
    }
}

/// One file to include, from one include entry.
#[derive(Clone, Debug)]
pub(crate) struct Included {
    /// The file.
    pub file: IncludedFile,
    /// The include entry.
    pub at: Location,
    /// The entry's `inputs:`.
    pub inputs: Option<Node>,
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
    /// Read `file` and everything it includes, merged; `inputs` are the values the include
    /// entry (or, for the main file, the pipeline) gives the file's `spec:inputs`.
    pub(crate) fn load_file(
        &mut self,
        file: &IncludedFile,
        stack: &mut Vec<String>,
        from: Option<&Location>,
        inputs: Option<&Node>,
    ) -> Result<Mapping, CiError> {
        let file_ref = file;
        let display = file.name(self.project);
        let name: Arc<str> = Arc::from(display.as_str());
        let read = match file {
            IncludedFile::Project(path) => self.project.read_bytes(path),
            IncludedFile::Component { path, .. } => std::fs::read(path),
        };
        let bytes = read.map_err(|source| match from {
            Some(at) if source.kind() == std::io::ErrorKind::NotFound => CiError::Include {
                location: at.clone(),
                message: format!("local file `{display}` does not exist"),
            },
            _ => CiError::Read {
                file: match file {
                    IncludedFile::Project(path) => self.project.root().join(path),
                    IncludedFile::Component { path, .. } => path.clone(),
                },
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
        let fields = match file {
            IncludedFile::Component { fields, .. } => fields.clone(),
            IncludedFile::Project(_) => HashMap::new(),
        };
        // A component's own files (its `spec:include`, its `include: local`) are in its project.
        let outer_root = self.component_root.clone();
        if let IncludedFile::Component { root, .. } = file_ref {
            self.component_root = Some(root.clone());
        }
        let root = self.content(loaded.documents, &name, from, inputs, &fields)?;
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
        let file = display;
        stack.push(file.clone());
        let mut merged: Option<Node> = None;
        if let Some((key, include)) = root.remove("include") {
            for included in self.local_paths(&include)? {
                let (path, at) = (included.file.name(self.project), included.at.clone());
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
                let content =
                    self.load_file(&included.file, stack, Some(&at), included.inputs.as_ref())?;
                let node = Node::new(Value::Map(content), key.at.clone());
                merged = Some(match merged {
                    Some(base) => deep_merge(base, node),
                    None => node,
                });
            }
        }
        stack.pop();
        self.component_root = outer_root;
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

    /// The configuration document of a file, its inputs interpolated.
    ///
    /// GitLab splits a file into at most three documents and drops the empty ones
    /// (`MultiDocYaml`, `reject_empty`); with a `spec:` header first, the content is the last
    /// of them, else the first (`Yaml::Result#content`).
    fn content(
        &mut self,
        documents: Vec<Node>,
        name: &Arc<str>,
        from: Option<&Location>,
        inputs: Option<&Node>,
        component: &HashMap<String, Value>,
    ) -> Result<Node, CiError> {
        let blank = |n: &Node| n.is_null() || n.as_map().is_some_and(Mapping::is_empty);
        let mut documents: Vec<Node> = documents.into_iter().filter(|d| !blank(d)).collect();
        let start = Location::new(name.clone(), 1, 1);
        let fail = |errors: Vec<String>, at: &Location| {
            let message = format!(
                "`{name}`: {}",
                errors.into_iter().take(3).collect::<Vec<_>>().join(", ")
            );
            match from {
                Some(entry) => CiError::Include {
                    location: entry.clone(),
                    message,
                },
                None => CiError::invalid(at, message),
            }
        };
        let given = match inputs.map(|n| &n.value) {
            None | Some(Value::Null) => Mapping::default(),
            Some(Value::Map(m)) => m.clone(),
            Some(_) => return Err(fail(vec!["Given inputs must be a hash".into()], &start)),
        };
        if !is_header(&documents) {
            if documents.len() > 1 {
                self.diag.warn(
                    &documents[1].at,
                    "only the first YAML document of the file is read, as GitLab reads it (a \
                     `spec:` header would make the last one the configuration)",
                );
            }
            if !given.is_empty() {
                return Err(fail(
                    vec![
                        "Given inputs not defined in the `spec` section of the included \
                         configuration file"
                            .into(),
                    ],
                    &start,
                ));
            }
            return Ok(documents
                .into_iter()
                .next()
                .unwrap_or_else(|| Node::new(Value::Null, start)));
        }
        if documents.len() > 2 {
            self.diag.warn(
                &documents[1].at,
                "this document between the spec: header and the configuration is ignored, as \
                 GitLab ignores it",
            );
        }
        let header_node = documents.remove(0);
        let content = documents.swap_remove(documents.len().min(2) - 1);
        let mut header = read_header(&header_node).map_err(|e| fail(e, &header_node.at))?;
        for entry in std::mem::take(&mut header.include).iter().rev() {
            let specs = self.header_inputs(entry).map_err(|e| fail(e, &entry.at))?;
            header.prepend(specs);
        }
        let values = resolve(&header, &given).map_err(|e| fail(e, &header_node.at))?;
        let component: HashMap<String, Value> = component
            .iter()
            .filter(|(k, _)| header.component.contains(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let ctx = Interpolation {
            inputs: &values,
            component: &component,
            variables: self.variables,
        };
        interpolate(content, &ctx).map_err(|e| fail(e, &header_node.at))
    }

    /// The inputs a `spec:include` entry brings: a local file's; a remote or another
    /// project's file cannot be read here, so it brings none (with a warning).
    fn header_inputs(&mut self, entry: &Node) -> Result<Vec<InputSpec>, Vec<String>> {
        let local = match &entry.value {
            Value::Str(path) if !path.starts_with("http://") && !path.starts_with("https://") => {
                Some(path.clone())
            }
            Value::Map(map) => map.get("local").and_then(Node::scalar_text),
            _ => None,
        };
        let Some(written) = local else {
            self.diag.warn(
                &entry.at,
                "spec:include of a remote or another project's file is not supported by local \
                 runs; the inputs it declares are unknown here",
            );
            return Ok(Vec::new());
        };
        let path = expand(&written, &|name| self.variables.get(name).cloned(), true)
            .trim_start_matches("./")
            .trim_start_matches('/')
            .to_string();
        if path.split('/').any(|p| p == "..") {
            return Err(vec![format!(
                "Header include file `{path}` must be inside the project"
            )]);
        }
        let read = match &self.component_root {
            Some(root) => std::fs::read(root.join(&path)),
            None => self.project.read_bytes(&path),
        };
        let bytes =
            read.map_err(|_| vec![format!("Header include file `{path}` does not exist")])?;
        let text = String::from_utf8(bytes)
            .map_err(|_| vec![format!("Header include file `{path}` is not valid UTF-8")])?;
        let name: Arc<str> = Arc::from(path.as_str());
        let loaded = load(&text, &name).map_err(|e| vec![e.to_string()])?;
        let document = loaded
            .documents
            .into_iter()
            .next()
            .unwrap_or_else(|| Node::new(Value::Null, Location::new(name, 1, 1)));
        read_inputs_file(&document, &path)
    }

    /// The local files an `include:` value names, in order (globs expanded, rules applied).
    fn local_paths(&mut self, include: &Node) -> Result<Vec<Included>, CiError> {
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
                        out.extend(self.resolve_local(text, &entry.at, None)?);
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
                    let inputs = map.get("inputs").cloned();
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
                                Some(path) => out.extend(self.resolve_local(
                                    path,
                                    &path_node.at,
                                    inputs.as_ref(),
                                )?),
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
                        Some("component") => {
                            if let Some(found) = self.component(map, &entry.at, inputs.as_ref()) {
                                out.push(found);
                                continue;
                            }
                            let address = map.get("component").and_then(Node::scalar_text);
                            self.skipped.push(SkippedInclude {
                                kind: "include:component".into(),
                                name: address.unwrap_or_default(),
                                at: entry.at.clone(),
                            });
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
        inputs: Option<&Node>,
    ) -> Result<Vec<Included>, CiError> {
        let included = |path: String| Included {
            file: IncludedFile::Project(path),
            at: at.clone(),
            inputs: inputs.cloned(),
        };
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
        // Inside a component, `local` names a file of the component's project.
        if let Some(root) = self.component_root.clone() {
            let file = root.join(&path);
            if path.contains(['*', '?', '[']) || path.split('/').any(|p| p == "..") {
                return Err(CiError::Include {
                    location: at.clone(),
                    message: format!(
                        "`{expanded}` in a component: local runs read a component's local \
                         includes by plain path only"
                    ),
                });
            }
            if !file.is_file() {
                return Err(CiError::Include {
                    location: at.clone(),
                    message: format!(
                        "local file `{expanded}` does not exist in the component's project ({})",
                        root.display()
                    ),
                });
            }
            return Ok(vec![Included {
                file: IncludedFile::Component {
                    root,
                    path: file,
                    fields: HashMap::new(),
                },
                at: at.clone(),
                inputs: inputs.cloned(),
            }]);
        }
        if path.contains(['*', '?', '[']) {
            let files = self.project.glob(&path);
            if files.is_empty() {
                return Err(CiError::Include {
                    location: at.clone(),
                    message: format!("`{expanded}` does not match any file"),
                });
            }
            return Ok(files.into_iter().map(included).collect());
        }
        if !self.project.is_file(&path) {
            return Err(CiError::Include {
                location: at.clone(),
                message: format!("local file `{expanded}` does not exist"),
            });
        }
        Ok(vec![included(path)])
    }

    /// An `include: component` entry found in the component directories, or `None` (with a
    /// warning saying where flotilla looked) when it is not there.
    fn component(
        &mut self,
        map: &Mapping,
        at: &Location,
        inputs: Option<&Node>,
    ) -> Option<Included> {
        let written = map.get("component").and_then(Node::scalar_text)?;
        let address = expand(&written, &|name| self.variables.get(name).cloned(), true);
        // Paths under the project are shown relative to it.
        let root = format!("{}/", self.project.root().display());
        let shown = |text: String| text.replace(&root, "");
        match find_component(&address, self.component_paths) {
            Ok(found) => {
                self.diag.note(
                    at,
                    shown(format!(
                        "include:component `{address}` is read from {} (the version is not \
                         checked: the directory holds what it holds)",
                        found.path.display()
                    )),
                );
                Some(Included {
                    file: IncludedFile::Component {
                        root: found.root,
                        path: found.path,
                        fields: found.fields,
                    },
                    at: at.clone(),
                    inputs: inputs.cloned(),
                })
            }
            Err(why) => {
                self.diag.warn(
                    at,
                    shown(format!(
                        "include:component `{address}` is not included: {why}"
                    )),
                );
                None
            }
        }
    }
}
