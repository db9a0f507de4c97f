//! `image` and `services`: a name, or a hash with the options the Docker executors honour.

use serde::Serialize;

use super::reader::Reader;
use super::variables::{Variable, VariableSource};
use super::yaml::{Node, Value};

/// The image a job runs in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Image {
    /// The image reference (expanded by the runner, not here).
    pub name: String,
    /// Overrides the image's entrypoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// `always`, `if-not-present`, `never` (in order of preference).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pull_policy: Vec<String>,
    /// `docker: platform`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// `docker: user`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// A service container next to the job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Service {
    /// The image reference.
    pub name: String,
    /// The host name the job reaches it by (besides the ones derived from the name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// Overrides the image's entrypoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// Overrides the image's command.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Variables for the service only.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub variables: Vec<Variable>,
    /// Pull policies, as for the image.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pull_policy: Vec<String>,
    /// `docker: platform`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub platform: Option<String>,
    /// `docker: user`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

const PULL_POLICIES: &[&str] = &["always", "if-not-present", "never"];

fn pull_policy(reader: &mut Reader<'_>, node: &Node) -> Option<Vec<String>> {
    let policies = reader.string_or_strings(node, "pull_policy")?;
    if let Some(bad) = policies
        .iter()
        .find(|p| !PULL_POLICIES.contains(&p.as_str()))
    {
        reader.fail(
            &node.at,
            format!("pull_policy `{bad}` is unknown; allowed: always, if-not-present, never"),
        );
        return None;
    }
    Some(policies)
}

/// `docker: {platform, user}`.
fn docker_options(
    reader: &mut Reader<'_>,
    node: &Node,
) -> Option<(Option<String>, Option<String>)> {
    let map = reader.map(node, "docker")?;
    let mut nested = reader.nested("docker");
    if !nested.check_keys(map, &["platform", "user"]) {
        return None;
    }
    // A keyword with no value is unspecified (GitLab's entry factory; `allow_nil`).
    let map = &map.without_nulls();
    let platform = match map.get("platform") {
        Some(n) => Some(nested.string(n, "platform")?),
        None => None,
    };
    let user = match map.get("user") {
        Some(n) => Some(nested.string(n, "user")?),
        None => None,
    };
    Some((platform, user))
}

/// Read `image:`.
pub(crate) fn read_image(reader: &mut Reader<'_>, node: &Node) -> Option<Image> {
    match &node.value {
        Value::Str(name) => Some(Image {
            name: name.clone(),
            entrypoint: None,
            pull_policy: Vec::new(),
            platform: None,
            user: None,
        }),
        Value::Map(map) => {
            let mut r = reader.nested("image");
            if !r.check_keys(
                map,
                &["name", "entrypoint", "pull_policy", "docker", "kubernetes"],
            ) {
                return None;
            }
            let Some(name_node) = map.get("name") else {
                r.fail(&node.at, "name can't be blank");
                return None;
            };
            let name = r.string(name_node, "name")?;
            let entrypoint = match map.get("entrypoint") {
                Some(n) => Some(r.strings(n, "entrypoint")?),
                None => None,
            };
            let pull_policy = match map.get("pull_policy") {
                Some(n) => pull_policy(&mut r, n)?,
                None => Vec::new(),
            };
            let (platform, user) = match map.get("docker") {
                Some(n) => docker_options(&mut r, n)?,
                None => (None, None),
            };
            if let Some((k, _)) = map.entry("kubernetes") {
                r.warn(&k.at, "kubernetes options are ignored by local runs");
            }
            Some(Image {
                name,
                entrypoint,
                pull_policy,
                platform,
                user,
            })
        }
        _ => {
            reader.wrong(node, "image", "a string or a hash");
            None
        }
    }
}

/// Read `services:`.
pub(crate) fn read_services(reader: &mut Reader<'_>, node: &Node) -> Option<Vec<Service>> {
    let Some(items) = node.as_seq() else {
        reader.wrong(node, "services", "an array");
        return None;
    };
    let mut services = Vec::new();
    let mut ok = true;
    for item in items {
        match read_service(reader, item) {
            Some(s) => services.push(s),
            None => ok = false,
        }
    }
    ok.then_some(services)
}

fn read_service(reader: &mut Reader<'_>, node: &Node) -> Option<Service> {
    match &node.value {
        Value::Str(name) => Some(Service {
            name: name.clone(),
            alias: None,
            entrypoint: None,
            command: None,
            variables: Vec::new(),
            pull_policy: Vec::new(),
            platform: None,
            user: None,
        }),
        Value::Map(map) => {
            let mut r = reader.nested("services");
            if !r.check_keys(
                map,
                &[
                    "name",
                    "alias",
                    "entrypoint",
                    "command",
                    "variables",
                    "pull_policy",
                    "docker",
                    "kubernetes",
                ],
            ) {
                return None;
            }
            let Some(name_node) = map.get("name") else {
                r.fail(&node.at, "name can't be blank");
                return None;
            };
            let name = r.string(name_node, "name")?;
            let alias = match map.get("alias") {
                Some(n) => Some(r.string(n, "alias")?),
                None => None,
            };
            let entrypoint = match map.get("entrypoint") {
                Some(n) => Some(r.strings(n, "entrypoint")?),
                None => None,
            };
            let command = match map.get("command") {
                Some(n) => Some(r.strings(n, "command")?),
                None => None,
            };
            let variables = match map.get("variables") {
                Some(n) => {
                    let vars = r.map(n, "variables")?;
                    let mut out = Vec::new();
                    for (k, v) in vars.iter() {
                        let value = r.string(v, &format!("variables:{}", k.name))?;
                        out.push(Variable::new(
                            k.name.clone(),
                            value,
                            VariableSource::JobYaml,
                        ));
                    }
                    out
                }
                None => Vec::new(),
            };
            let pull_policy = match map.get("pull_policy") {
                Some(n) => pull_policy(&mut r, n)?,
                None => Vec::new(),
            };
            let (platform, user) = match map.get("docker") {
                Some(n) => docker_options(&mut r, n)?,
                None => (None, None),
            };
            if let Some((k, _)) = map.entry("kubernetes") {
                r.warn(&k.at, "kubernetes options are ignored by local runs");
            }
            Some(Service {
                name,
                alias,
                entrypoint,
                command,
                variables,
                pull_policy,
                platform,
                user,
            })
        }
        _ => {
            reader.wrong(node, "services", "a string or a hash");
            None
        }
    }
}
