//! Our Kubernetes quantities judged by apimachinery's own: `kubectl set resources --local`
//! parses each value with `resource.ParseQuantity` and writes the pod back with the
//! canonical form of each (no API server involved). Every canonical form ours writes must be
//! the one kubectl writes, except where apimachinery keeps the text as it was given: its
//! `ParseQuantity` fast path remembers the input when it finds it canonical enough (`+5`,
//! `5.`, `00012`, `1E3`, `1.500` come back as written), where ours writes the value's
//! canonical form so that equal shapes hash alike.

use flotilla_provider_kubernetes::Quantity;
use flotilla_testkit::infra::{Infra, kubectl_path, require};
use std::process::Command;

/// Quantities as people write them: plain, with every suffix, fractions, exponents, values
/// that change suffix kind when canonical, values finer than a nano.
const CASES: &[&str] = &[
    "1", "2", "0.5", ".5", "5.", "1.5", "100m", "250m", "1000m", "1500m", "0.1m", "0.001", "100u",
    "1n", "0.1n", "1.2345", "1k", "1000", "1.5k", "12M", "512M", "1000M", "1G", "2T", "1P", "1E",
    "1Ki", "1023Ki", "1024Ki", "1536Mi", "1.5Gi", "0.5Gi", "0.5Ki", "1.1Ki", "100Mi", "512Mi",
    "1024Mi", "1Gi", "8Gi", "3Ti", "2Pi", "1Ei", "1e3", "1e-3", "12e6", "1000e0", "1.5e3", "1E3",
    "+5", "0", "00012", "0.0", "1.500", "2.50",
];

/// kubectl's canonical form of each of `values`, read from the pod it writes.
fn kubectl_canonical(kubectl: &std::path::Path, values: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let pod = dir.path().join("pod.yaml");
    std::fs::write(
        &pod,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers:\n  - name: c\n    image: x\n",
    )
    .unwrap();
    let mut out = Vec::new();
    for value in values {
        let result = Command::new(kubectl)
            .args(["set", "resources", "--local", "-o", "json", "-f"])
            .arg(&pod)
            .arg(format!("--limits=memory={value}"))
            .output()
            .unwrap();
        assert!(
            result.status.success(),
            "kubectl refused {value}: {}",
            String::from_utf8_lossy(&result.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&result.stdout).unwrap();
        out.push(
            json["spec"]["containers"][0]["resources"]["limits"]["memory"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    out
}

#[test]
fn infra_canonical_quantities_are_the_ones_kubectl_writes() {
    if !require(Infra::Kubectl) {
        return;
    }
    let kubectl = kubectl_path().unwrap();
    let theirs = kubectl_canonical(&kubectl, CASES);
    let mut differ = Vec::new();
    let mut echoed = Vec::new();
    for (text, theirs) in CASES.iter().zip(&theirs) {
        let ours = Quantity::parse(text).unwrap().to_string();
        if ours == *theirs {
            continue;
        }
        if theirs == text {
            echoed.push(*text);
        } else {
            differ.push(format!("{text}: ours {ours}, kubectl {theirs}"));
        }
    }
    assert!(differ.is_empty(), "{differ:#?}");
    // The echoes are the few known ones: a new one would mean a rule not followed.
    assert_eq!(echoed, ["5.", "1E3", "+5", "00012", "1.500"]);
}
