//! Containers a test made, found and removed by label with the docker CLI (no Docker API
//! client needed, so any test can use it without the `docker-fleet` feature).

use std::process::Command;

/// The ids of every container, in any state, carrying `label` (`key=value`, or `key` for any
/// value). Empty when the docker CLI cannot list them.
pub fn labelled(label: &str) -> Vec<String> {
    let Ok(out) = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label={label}"))
        .output()
    else {
        return Vec::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// Removes, forcibly and with their anonymous volumes, the containers carrying `label`;
/// returns how many there were.
pub fn remove_labelled(label: &str) -> usize {
    let ids = labelled(label);
    if !ids.is_empty() {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v"])
            .args(&ids)
            .output();
    }
    ids.len()
}

/// Removes every container carrying one of its labels when dropped: at the end of a test,
/// passed or failed.
#[derive(Debug, Default)]
pub struct LabelGuard {
    labels: Vec<String>,
}

impl LabelGuard {
    /// A guard for the containers carrying `label` (`key=value`).
    pub fn new(label: impl Into<String>) -> LabelGuard {
        LabelGuard {
            labels: vec![label.into()],
        }
    }

    /// Also removes the containers carrying `label`.
    pub fn and(mut self, label: impl Into<String>) -> LabelGuard {
        self.labels.push(label.into());
        self
    }
}

impl Drop for LabelGuard {
    fn drop(&mut self) {
        for label in &self.labels {
            remove_labelled(label);
        }
    }
}
