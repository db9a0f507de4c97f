//! Amounts of CPU and memory as the settings and the jobs write them: Kubernetes quantities
//! (`500m`, `1.5`, `512Mi`, `1G`), the form of GitLab's Kubernetes overwrite variables, which
//! the `cgroup` and `microvm` levels read, and of their `config.toml` tables. Pure.

use serde::{Deserialize, Serialize};

/// A CPU quantity as Kubernetes writes it (`2`, `1.5`, `500m`), in thousandths of a CPU.
pub fn parse_cpu(text: &str) -> Option<u64> {
    let text = text.trim();
    if let Some(millis) = text.strip_suffix('m') {
        return millis.parse::<u64>().ok();
    }
    let cpus: f64 = text.parse().ok()?;
    (cpus.is_finite() && cpus >= 0.0).then(|| (cpus * 1000.0).round() as u64)
}

/// A memory quantity as Kubernetes writes it (`512Mi`, `1Gi`, `1G`, `100M`, `1048576`), in
/// bytes. Binary suffixes are powers of 1024, decimal ones powers of 1000; a lone `k`/`m`
/// /`g` is read as the decimal suffix, as Docker users write it.
pub fn parse_memory(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let scale: u64 = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" | "K" => 1_000,
        "M" | "m" => 1_000_000,
        "G" | "g" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    let bytes = value * scale as f64;
    (bytes.is_finite() && bytes >= 0.0 && bytes < u64::MAX as f64).then_some(bytes as u64)
}

/// `1500` as `1.5 CPUs`.
pub fn show_cpu(millis: u64) -> String {
    let cpus = millis as f64 / 1000.0;
    if millis == 1000 {
        "1 CPU".into()
    } else {
        format!("{cpus} CPUs")
    }
}

/// Bytes as the largest binary unit that divides them (`512 MiB`), else in bytes.
pub fn show_memory(bytes: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    format!("{bytes} bytes")
}

/// A CPU amount in a level's table: `1.5` or `"500m"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CpuQuantity {
    /// CPUs.
    Cpus(f64),
    /// A Kubernetes quantity.
    Quantity(String),
}

impl CpuQuantity {
    /// In thousandths of a CPU; `None` when it does not parse or is not positive.
    pub fn millis(&self) -> Option<u64> {
        let millis = match self {
            CpuQuantity::Cpus(c) => parse_cpu(&c.to_string()),
            CpuQuantity::Quantity(q) => parse_cpu(q),
        }?;
        (millis > 0).then_some(millis)
    }
}

/// A memory amount in a level's table: `"512Mi"` or a number of bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MemoryQuantity {
    /// Bytes.
    Bytes(u64),
    /// A Kubernetes quantity.
    Quantity(String),
}

impl MemoryQuantity {
    /// In bytes; `None` when it does not parse or is zero.
    pub fn bytes(&self) -> Option<u64> {
        let bytes = match self {
            MemoryQuantity::Bytes(b) => Some(*b),
            MemoryQuantity::Quantity(q) => parse_memory(q),
        }?;
        (bytes > 0).then_some(bytes)
    }

    /// In MiB, for VM sizes: `None` when it does not parse or is below `min_mib`.
    pub fn mib_at_least(&self, min_mib: u64) -> Option<u32> {
        let mib = self.bytes()? >> 20;
        (mib >= min_mib).then(|| u32::try_from(mib).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_quantities() {
        assert_eq!(parse_cpu("500m"), Some(500));
        assert_eq!(parse_cpu("1.5"), Some(1500));
        assert_eq!(parse_cpu("2"), Some(2000));
        assert_eq!(parse_cpu("lots"), None);
        assert_eq!(parse_memory("512Mi"), Some(512 << 20));
        assert_eq!(parse_memory("1Gi"), Some(1 << 30));
        assert_eq!(parse_memory("1G"), Some(1_000_000_000));
        assert_eq!(parse_memory("100M"), Some(100_000_000));
        assert_eq!(parse_memory("1.5Gi"), Some(3 << 29));
        assert_eq!(parse_memory("4096"), Some(4096));
        assert_eq!(parse_memory("12 apples"), None);
        assert_eq!(show_memory(512 << 20), "512 MiB");
        assert_eq!(show_memory(3 << 29), "1536 MiB");
        assert_eq!(show_memory(1000), "1000 bytes");
        assert_eq!(show_cpu(1500), "1.5 CPUs");
    }
}
