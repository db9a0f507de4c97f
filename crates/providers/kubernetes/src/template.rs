//! The PodTemplate: YAML read into a [`Pod`] that each new instance copies.
//!
//! Accepted forms: a `PodTemplate` object (`kind: PodTemplate`, the pod under `template`),
//! a pod template spec (`metadata` and `spec`, as under a Deployment's `template`), or a
//! whole `Pod`. The YAML is read with yaml-rust2 and turned into JSON, then into
//! `k8s-openapi`'s types, so a field of the wrong type is an error naming it.

use flotilla_fleet::FleetError;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Number, Value};
use yaml_rust2::{Yaml, YamlLoader};

/// Reads `text` into the pod each instance is made from.
pub fn parse(text: &str) -> Result<Pod, FleetError> {
    let docs = YamlLoader::load_from_str(text)
        .map_err(|e| FleetError::Config(format!("pod template: invalid YAML: {e}")))?;
    let [doc] = docs.as_slice() else {
        return Err(FleetError::Config(format!(
            "pod template: expected one YAML document, found {}",
            docs.len()
        )));
    };
    let value = to_json(doc)?;
    let pod = match value.get("kind").and_then(Value::as_str) {
        Some("PodTemplate") => value.get("template").cloned().unwrap_or(Value::Null),
        Some("Pod") | None => value,
        Some(other) => {
            return Err(FleetError::Config(format!(
                "pod template: kind {other} is neither PodTemplate nor Pod"
            )));
        }
    };
    let mut pod: Pod = serde_json::from_value(pod)
        .map_err(|e| FleetError::Config(format!("pod template: {e}")))?;
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| FleetError::Config("pod template: spec is missing".into()))?;
    if spec.containers.is_empty() {
        return Err(FleetError::Config(
            "pod template: spec.containers is empty".into(),
        ));
    }
    // Each instance gets its own name; a template's own status means nothing.
    pod.metadata.name = None;
    pod.metadata.resource_version = None;
    pod.metadata.uid = None;
    pod.status = None;
    Ok(pod)
}

fn to_json(yaml: &Yaml) -> Result<Value, FleetError> {
    Ok(match yaml {
        Yaml::Real(r) => r
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map_or(Value::String(r.clone()), Value::Number),
        Yaml::Integer(i) => Value::Number((*i).into()),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Array(items) => Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Yaml::Hash(hash) => {
            let mut map = Map::new();
            for (k, v) in hash {
                let key = match k {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    Yaml::Boolean(b) => b.to_string(),
                    other => {
                        return Err(FleetError::Config(format!(
                            "pod template: unsupported mapping key {other:?}"
                        )));
                    }
                };
                map.insert(key, to_json(v)?);
            }
            Value::Object(map)
        }
        Yaml::Null => Value::Null,
        Yaml::Alias(_) | Yaml::BadValue => {
            return Err(FleetError::Config(
                "pod template: unsupported YAML value".into(),
            ));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_give_the_same_pod() {
        let spec = "spec:\n  containers:\n  - name: main\n    image: docker:dind\n    env:\n    - name: A\n      value: \"1\"\n";
        let template = format!(
            "apiVersion: v1\nkind: PodTemplate\ntemplate:\n  metadata:\n    labels:\n      x: y\n  {}",
            spec.replace('\n', "\n  ")
        );
        let pod = format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: ignored\n  labels:\n    x: y\n{spec}"
        );
        let bare = format!("metadata:\n  labels:\n    x: y\n{spec}");
        let parsed: Vec<Pod> = [template, pod, bare]
            .iter()
            .map(|t| parse(t).unwrap())
            .collect();
        for p in &parsed {
            assert_eq!(p.metadata.name, None);
            assert_eq!(p.metadata.labels.as_ref().unwrap()["x"], "y");
            let c = &p.spec.as_ref().unwrap().containers[0];
            assert_eq!(c.image.as_deref(), Some("docker:dind"));
            assert_eq!(c.env.as_ref().unwrap()[0].value.as_deref(), Some("1"));
        }
    }

    #[test]
    fn bad_templates_say_what_is_wrong() {
        let no_containers = parse("spec:\n  containers: []\n").unwrap_err().to_string();
        assert!(
            no_containers.contains("spec.containers is empty"),
            "{no_containers}"
        );
        let wrong_kind = parse("kind: Deployment\nspec: {}\n")
            .unwrap_err()
            .to_string();
        assert!(wrong_kind.contains("Deployment"), "{wrong_kind}");
        let wrong_type = parse("spec:\n  containers: 3\n").unwrap_err().to_string();
        assert!(wrong_type.contains("pod template"), "{wrong_type}");
        assert!(parse("a: [").is_err());
    }
}
