//! `include: component` from directories on this machine, for people who develop CI/CD catalog
//! components locally.
//!
//! A component address is `<fqdn>/<project path>/<name>@<version>` (GitLab's
//! `Gitlab::Ci::Components::InstancePath`): the last `/` separates the project from the
//! component's name, the version is what follows the first `@`. GitLab reads the component from
//! `templates/<name>.yml`, else `templates/<name>/template.yml`, of that project at that version.
//! A local run has no GitLab to ask, so each directory the user names is looked in, in order:
//! `<dir>/<project path>/templates/...` (a directory of checkouts), then `<dir>/templates/...`
//! (the directory is the component's project). The version is not checked: the directory holds
//! what it holds, and the run says where it read the component from.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::yaml::Value;

/// A component found on disk.
#[derive(Debug)]
pub(crate) struct Found {
    /// The component's project (where its own `include: local` entries resolve).
    pub root: PathBuf,
    /// Its template file.
    pub path: PathBuf,
    /// The `spec:component` fields: `name`, `version` (the reference when it reads as a
    /// version, else null), `reference` (what follows `@`), `sha` (null: not known locally).
    pub fields: HashMap<String, Value>,
}

/// Where `address` is in `dirs`, or why it is not found.
pub(crate) fn find_component(address: &str, dirs: &[PathBuf]) -> Result<Found, String> {
    if dirs.is_empty() {
        return Err(
            "local runs read components only from the directories given with \
                    --component-path"
                .into(),
        );
    }
    let Some((path, reference)) = address.split_once('@') else {
        return Err("the component path is not supported: it has no @version".into());
    };
    // Drop the instance's host: `gitlab.com/group/project/name` or `$CI_SERVER_FQDN/...`.
    let Some((_host, in_instance)) = path.split_once('/') else {
        return Err("the component path is not supported".into());
    };
    let Some((project, name)) = in_instance.rsplit_once('/') else {
        return Err("the component path is not supported: it names no project".into());
    };
    if name.is_empty()
        || project.is_empty()
        || [project, name].iter().any(|p| {
            p.split('/')
                .any(|part| part == ".." || part == "." || part.is_empty())
        })
    {
        return Err("the component path is not supported".into());
    }
    let mut looked = Vec::new();
    for dir in dirs {
        for base in [dir.join(project), dir.clone()] {
            for candidate in template_paths(&base, name) {
                if candidate.is_file() {
                    return Ok(Found {
                        root: base.clone(),
                        path: candidate,
                        fields: fields(name, reference),
                    });
                }
                looked.push(candidate.display().to_string());
            }
        }
    }
    Err(format!(
        "no template found (looked for {})",
        looked.join(", ")
    ))
}

fn template_paths(base: &Path, name: &str) -> [PathBuf; 2] {
    let templates = base.join("templates");
    [
        templates.join(format!("{name}.yml")),
        templates.join(name).join("template.yml"),
    ]
}

fn fields(name: &str, reference: &str) -> HashMap<String, Value> {
    let is_version = reference
        .split('.')
        .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let version = if is_version {
        Value::Str(reference.to_string())
    } else {
        Value::Null
    };
    HashMap::from([
        ("name".to_string(), Value::Str(name.to_string())),
        ("reference".to_string(), Value::Str(reference.to_string())),
        ("version".to_string(), version),
        ("sha".to_string(), Value::Null),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_map_to_templates_as_gitlab_maps_them() {
        let dir = tempfile::tempdir().unwrap();
        let checkout = dir.path().join("group/sub/project/templates");
        std::fs::create_dir_all(checkout.join("deep")).unwrap();
        std::fs::write(checkout.join("simple.yml"), "a: 1\n").unwrap();
        std::fs::write(checkout.join("deep/template.yml"), "b: 1\n").unwrap();
        let dirs = [dir.path().to_path_buf()];
        let found = find_component("gitlab.com/group/sub/project/simple@1.2.0", &dirs).unwrap();
        assert!(found.path.ends_with("templates/simple.yml"));
        assert_eq!(found.fields["version"], Value::Str("1.2.0".into()));
        let found = find_component("gitlab.com/group/sub/project/deep@main", &dirs).unwrap();
        assert!(found.path.ends_with("templates/deep/template.yml"));
        assert_eq!(found.fields["version"], Value::Null);
        // The directory may be the component's project itself.
        let project = [dir.path().join("group/sub/project")];
        assert!(find_component("example.com/other/name/simple@~latest", &project).is_ok());
        let missing = find_component("gitlab.com/group/sub/project/none@1", &dirs).unwrap_err();
        assert!(missing.contains("templates/none.yml"), "{missing}");
        assert!(find_component("gitlab.com/group/../x@1", &dirs).is_err());
        assert!(find_component("gitlab.com/group/project/simple", &dirs).is_err());
    }
}
