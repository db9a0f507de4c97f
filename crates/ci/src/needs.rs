//! `needs` and `dependencies` as written, before they are resolved against the jobs that made
//! it into the pipeline.

use super::error::Location;
use super::parallel::{matrix_name, read_matrix};
use super::reader::Reader;
use super::yaml::{Node, Value};

/// GitLab's limit on `needs` entries.
const MAX_NEEDS: usize = 50;

/// One `needs` entry as written.
#[derive(Clone, Debug)]
pub(crate) struct NeedSpec {
    /// The job's name.
    pub job: String,
    /// For `parallel: matrix` needs, the instance names; otherwise empty.
    pub instances: Vec<String>,
    /// `artifacts:` (default true).
    pub artifacts: bool,
    /// `optional:`.
    pub optional: bool,
    /// Where the entry is.
    pub at: Location,
}

/// Read `needs:` (also `rules:needs`).
pub(crate) fn read_needs(reader: &mut Reader<'_>, node: &Node) -> Option<Vec<NeedSpec>> {
    let Some(items) = node.as_seq() else {
        reader.wrong(node, "needs", "an array");
        return None;
    };
    // `!reference` of needs nests arrays; they are flattened.
    let mut flat: Vec<&Node> = Vec::new();
    let mut pending: Vec<&Node> = items.iter().rev().collect();
    while let Some(item) = pending.pop() {
        match &item.value {
            Value::Seq(nested) => pending.extend(nested.iter().rev()),
            // An entry with no value is unspecified (GitLab's entry factory), as Xen's
            // `.arm32-test-needs: [~]` has it.
            Value::Null => {}
            _ => flat.push(item),
        }
    }
    if flat.len() > MAX_NEEDS {
        reader.fail(
            &node.at,
            format!(
                "needs has {} entries; GitLab's limit is {MAX_NEEDS}",
                flat.len()
            ),
        );
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for item in flat {
        match &item.value {
            Value::Str(name) => out.push(NeedSpec {
                job: name.clone(),
                instances: Vec::new(),
                artifacts: true,
                optional: false,
                at: item.at.clone(),
            }),
            Value::Map(map) => {
                let mut r = reader.nested("needs");
                if map.get("pipeline").is_some() || map.get("project").is_some() {
                    r.warn(
                        &item.at,
                        "needs on another pipeline or project cannot be met by a local run; ignored",
                    );
                    continue;
                }
                if !r.check_keys(map, &["job", "artifacts", "optional", "parallel"]) {
                    ok = false;
                    continue;
                }
                let Some(job) = map.get("job").and_then(|j| r.string(j, "job")) else {
                    if map.get("job").is_none() {
                        r.fail(&item.at, "entry should have job");
                    }
                    ok = false;
                    continue;
                };
                let artifacts = match map.get("artifacts") {
                    Some(a) => r.boolean(a, "artifacts"),
                    None => Some(true),
                };
                let optional = match map.get("optional") {
                    Some(o) => r.boolean(o, "optional"),
                    None => Some(false),
                };
                let instances = match map.get("parallel") {
                    Some(p) => match p.as_map().and_then(|m| m.get("matrix")) {
                        Some(matrix) => read_matrix(&mut r, matrix).map(|combinations| {
                            combinations.iter().map(|c| matrix_name(&job, c)).collect()
                        }),
                        None => {
                            r.wrong(p, "parallel", "a hash with matrix");
                            None
                        }
                    },
                    None => Some(Vec::new()),
                };
                match (artifacts, optional, instances) {
                    (Some(artifacts), Some(optional), Some(instances)) => out.push(NeedSpec {
                        job,
                        instances,
                        artifacts,
                        optional,
                        at: item.at.clone(),
                    }),
                    _ => ok = false,
                }
            }
            _ => {
                reader.wrong(item, "needs", "an array of job names or hashes");
                ok = false;
            }
        }
    }
    ok.then_some(out)
}

/// Read `dependencies:`: job names with their positions.
pub(crate) fn read_dependencies(
    reader: &mut Reader<'_>,
    node: &Node,
) -> Option<Vec<(String, Location)>> {
    let Some(items) = node.as_seq() else {
        reader.wrong(node, "dependencies", "an array of strings");
        return None;
    };
    let mut out = Vec::new();
    for item in items {
        match item.as_str() {
            Some(name) => out.push((name.to_string(), item.at.clone())),
            None => {
                reader.wrong(item, "dependencies", "an array of strings");
                return None;
            }
        }
    }
    Some(out)
}
